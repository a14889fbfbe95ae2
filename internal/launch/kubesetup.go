package launch

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/k8s"
)

// KubernetesSetup is a run on Kubernetes before its fleets: the cluster
// (kubectl's current context, or Kubectl.Namespace), what its largest
// fleet asks of the nodes, where the capture comes from, and the relay
// Deployment when the run brings its own. `replay k8s run` and
// compare/capacity --k8s set it up alike (OpenKubernetes).
type KubernetesSetup struct {
	Kubectl *k8s.Kubectl
	// Params are the manifests' parameters: Name, images, Shards,
	// Clients (the largest fleet's, to check that it fits), CPU (each
	// shard's request; "": an even share of the nodes' free CPU),
	// memory sizing, the capture's source when Capture is empty
	// (CaptureInImage or CapturePVC), Relay with its RelayArgs, RelayCPU
	// and RelayMemory. RunArgs, when set, are checked now (the fleets'
	// flags come from Args).
	Params k8s.Params
	// Capture is a capture file on this machine: the image's copy when
	// ImageCaptures (the image's, k8s.ImageSet) holds one of its file
	// name, else sent as the ConfigMap <Name>-capture.
	Capture       string
	ImageCaptures []string
	// Args, Dir, StartTimeout, Keep and Single: the runner's (Kubernetes).
	Args         func(fleet.Config) []string
	Dir          string
	StartTimeout time.Duration
	Keep         bool
	Single       bool
}

// OpenKubernetes reads the cluster (its namespace and its nodes' room:
// kubectl reaches it and the user may read it), refuses a run whose
// largest fleet does not fit the nodes before anything is created, then
// creates the capture's ConfigMap (unless the image or a volume holds the
// capture), the relay Deployment (Relay, waiting until it is ready) and a
// kubectl proxy, and returns the runner. Close deletes it all.
func OpenKubernetes(ctx context.Context, s KubernetesSetup) (*Kubernetes, error) {
	kc := s.Kubectl
	p := s.Params
	if p.Shards < 1 || kc == nil || s.Args == nil {
		return nil, fmt.Errorf("kubernetes: %d shards, kubectl and args: want at least 1 shard and both", p.Shards)
	}
	p.Clients = max(p.Clients, 1)
	k := &Kubernetes{Kubectl: kc, Args: s.Args, Dir: s.Dir, StartTimeout: s.StartTimeout, Keep: s.Keep, Single: s.Single}
	want := k8s.Want{Shards: p.Shards, ClientsPerShard: (p.Clients + p.Shards - 1) / p.Shards, Relay: p.Relay}
	want.MemMiB = shardMemMiB(p, want.ClientsPerShard)
	var err error
	if p.CPU != "" {
		if k.CPUMilli, err = k8s.MilliCPU(p.CPU); err != nil {
			return nil, badSetup(fmt.Errorf("--cpu: %w", err))
		}
		want.CPUMilli = k.CPUMilli
	}
	if p.Relay {
		if want.RelayCPUMilli, err = k8s.MilliCPU(p.RelayCPU); err != nil {
			return nil, badSetup(fmt.Errorf("--relay-cpu: %w", err))
		}
		if want.RelayMemMiB, err = k8s.MiB(p.RelayMemory); err != nil {
			return nil, badSetup(fmt.Errorf("--relay-memory: %w", err))
		}
	}
	var data []byte
	if s.Capture != "" {
		if c := imageCapture(s.ImageCaptures, s.Capture); c != "" {
			p.CaptureInImage = c
		} else if data, err = os.ReadFile(s.Capture); err != nil {
			return nil, badSetup(fmt.Errorf("--capture: %w", err))
		}
	}
	// The manifests' flags and names, checked before the cluster is asked.
	files, err := k8s.Render(p)
	if err != nil {
		return nil, badSetup(err)
	}
	if data != nil {
		cm, err := k8s.CaptureConfigMap(p, data)
		if err != nil {
			return nil, badSetup(err)
		}
		files = append(files, cm)
	}
	if k.Namespace, err = kc.CurrentNamespace(ctx); err != nil {
		return nil, err
	}
	rooms, err := kc.Rooms(ctx)
	if err != nil {
		return nil, fmt.Errorf("the nodes' room: %w", err)
	}
	fit, err := k8s.Plan(want, rooms)
	if err != nil {
		return nil, err
	}
	k.logf("%d shards of up to %d clients: %dm CPU and %d MiB requested each (%s)", p.Shards, want.ClientsPerShard, fit.CPUMilli, fit.MemMiB, RoomsLine(rooms))
	p.RunArgs = nil
	k.Params = p
	if err := k.open(ctx, files); err != nil {
		k.Close(ctx)
		return nil, err
	}
	return k, nil
}

// badSetup is a setup the flags got wrong: fleet.ErrBadConfig, a
// command's usage error.
func badSetup(err error) error { return fmt.Errorf("%w: %v", fleet.ErrBadConfig, err) }

// open creates the capture's ConfigMap and the relay of files (as
// rendered by OpenKubernetes) and starts the proxy.
func (k *Kubernetes) open(ctx context.Context, files []k8s.File) error {
	dir := k.manifestDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("kubernetes: %w", err)
	}
	for _, name := range []string{"capture.yaml", "relay.yaml"} {
		for _, f := range files {
			if f.Name != name {
				continue
			}
			if err := k8s.Write([]k8s.File{f}, dir, nil); err != nil {
				return err
			}
			if err := k.Kubectl.Create(ctx, filepath.Join(dir, f.Name)); err != nil {
				return err
			}
		}
	}
	if k.Params.Relay {
		if err := k.Kubectl.WaitReady(ctx, k.Params.Name+"-relay", k.startTimeout()); err != nil {
			return fmt.Errorf("the relay: %w", err)
		}
	}
	var err error
	if k.proxy, err = k.Kubectl.Proxy(ctx); err != nil {
		return err
	}
	k.Proxy = k.proxy.Addr
	return nil
}

// Close deletes what OpenKubernetes created (after the fleets' own), in
// reverse, waiting until the pods are gone even when ctx ended, and stops
// the proxy; with Keep it deletes nothing and says how to.
func (k *Kubernetes) Close(ctx context.Context) error {
	k.proxy.Stop()
	if k.Keep {
		if len(k.Kubectl.Created()) > 0 {
			k.logf("kept: kubectl delete -f %s", k.manifestDir())
		}
		return nil
	}
	return k.Kubectl.Cleanup(ctx)
}

// RelayTarget is the relay Deployment's Service (Params.Relay) as the
// pods reach it.
func (k *Kubernetes) RelayTarget() string {
	return net.JoinHostPort(k.Params.Name+"-relay", strconv.Itoa(k8s.RelayPort))
}

// DescribeRelay says what the relay Deployment is, for a report.
func (k *Kubernetes) DescribeRelay() string {
	p := k.Params
	return fmt.Sprintf("the relay Deployment %s-relay (image %s, %s CPU, %s) in namespace %s", p.Name, or(p.RelayImage, p.Image), p.RelayCPU, p.RelayMemory, k.Namespace)
}

// ProxyURL is path on a pod's or service's port through the run's proxy.
func (k *Kubernetes) ProxyURL(kind, name string, port int, path string) string {
	return k8s.ProxyURL(k.Proxy, k.Namespace, kind, name, strconv.Itoa(port), path)
}

// manifestDir holds the manifests of what OpenKubernetes creates (and,
// Single, the fleet's): `kubectl delete -f` of it deletes the run.
func (k *Kubernetes) manifestDir() string {
	if k.Single {
		return filepath.Join(k.Dir, "manifests")
	}
	return k.Dir
}

// imageCapture is the image's copy of the capture at path (one of its
// file name), or "".
func imageCapture(inImage []string, path string) string {
	for _, c := range inImage {
		if filepath.Base(c) == filepath.Base(path) {
			return c
		}
	}
	return ""
}

// shardMemMiB is a shard's memory request for per clients as the
// parameters size it.
func shardMemMiB(p k8s.Params, per int) int64 {
	return int64(p.BaseMemoryMiB + (per*p.MemoryPerClientKiB+1023)/1024)
}

// RoomsLine is the nodes' room on one line.
func RoomsLine(rooms []k8s.NodeRoom) string {
	parts := make([]string, len(rooms))
	for i, r := range rooms {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}

func or(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}
