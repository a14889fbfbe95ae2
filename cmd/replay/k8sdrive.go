package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/k8s"
	"github.com/reprise-harness/reprise/internal/launch"
)

// `replay compare --k8s` and `replay capacity --k8s`: the driver stays
// here; each fleet runs as an Indexed Job of --shards pods
// (launch.Kubernetes), against the relay as a Deployment (--relay) or
// --target. The server's metrics: the relay Deployment's, and a --target
// that names a Service without --relay-metrics, through the same kubectl
// proxy as the shards'; a --relay-metrics address is scraped from this
// machine as given.

// k8sDrive are the --k8s flags of compare and capacity.
type k8sDrive struct {
	on          bool
	relay       bool
	images      string
	kubectl     k8s.Kubectl
	p           k8s.Params
	cpu         string
	startTimout time.Duration
	// imageCaptures are the captures in the replay image (--images).
	imageCaptures []string
}

func addK8sDriveFlags(fs *pflag.FlagSet, k *k8sDrive) {
	k.p = k8s.DefaultParams()
	fs.BoolVar(&k.on, "k8s", false, "run each fleet as a Kubernetes Job of --shards pods (kubectl's current context); the report is written here")
	fs.BoolVar(&k.relay, "relay", false, "with --k8s: run the bundled relay as a Deployment and target it (else --target: a server the pods reach)")
	fs.StringVar(&k.images, "images", "", "with --k8s: the images 'replay k8s image --out `DIR`' wrote (sets the image and pull policy)")
	fs.StringVar(&k.p.Image, "image", k.p.Image, "with --k8s: the image holding replay and relay")
	fs.StringVar(&k.p.PullPolicy, "pull-policy", k.p.PullPolicy, "with --k8s: imagePullPolicy: Always, IfNotPresent or Never")
	fs.StringVar(&k.p.Name, "name", k.p.Name, "with --k8s: prefix of the objects' names")
	fs.StringVarP(&k.kubectl.Namespace, "namespace", "n", "", "with --k8s: namespace (default: the context's)")
	fs.StringVar(&k.kubectl.Program, "kubectl", "kubectl", "with --k8s: the kubectl program")
	fs.StringVar(&k.cpu, "cpu", "", "with --k8s: CPU request of each shard (default: an even share of the nodes' free CPU, 100m to 1)")
	fs.StringVar(&k.p.RelayCPU, "relay-cpu", "500m", "with --k8s --relay: CPU request of the relay")
	fs.StringVar(&k.p.RelayMemory, "relay-memory", "256Mi", "with --k8s --relay: memory request and limit of the relay")
	fs.DurationVar(&k.startTimout, "start-timeout", 3*time.Minute, "with --k8s: fail when a fleet's pods do not all run within this")
}

// check refuses --k8s flags without --k8s, and a --k8s run with neither
// --relay nor --target.
func (k *k8sDrive) check(fs *pflag.FlagSet, target string) error {
	if !k.on {
		for _, name := range []string{"relay", "images", "image", "pull-policy", "name", "namespace", "kubectl", "cpu", "relay-cpu", "relay-memory", "start-timeout"} {
			if fs.Changed(name) {
				return usageError(fmt.Errorf("--%s goes with --k8s", name))
			}
		}
		return nil
	}
	switch {
	case fs.Changed("tls-keylog"):
		// The pods get the capture, not files beside it.
		return usageError(errors.New("--tls-keylog with --k8s: the pods get only the capture; put the secrets into it (record live --tls-keylog writes them in, or editcap --inject-secrets tls,KEYLOG in.pcap out.pcapng) and drop --tls-keylog"))
	case k.relay && target != "":
		return usageError(errors.New("--relay and --target: pick one (--relay targets the relay Deployment)"))
	case !k.relay && target == "":
		return usageError(errors.New("--k8s needs --relay (the bundled relay as a Deployment) or --target (a server the pods reach)"))
	}
	if k.images != "" {
		set, err := k8s.ReadImageSet(k.images)
		if err != nil {
			return usageError(err)
		}
		k.imageCaptures = set.Captures
		set.Captures = nil // the capture is --capture's (open)
		set.Apply(&k.p)
	}
	if k.cpu != "" {
		if _, err := k8s.MilliCPU(k.cpu); err != nil {
			return usageError(fmt.Errorf("--cpu: %w", err))
		}
	}
	return nil
}

// k8sSession is what a --k8s run creates besides its fleets: the capture's
// ConfigMap, the relay Deployment, a kubectl proxy. close deletes it all.
type k8sSession struct {
	kubectl *k8s.Kubectl
	proxy   *k8s.Background
	dir     string
}

// podArgs gives a fleet's replay flags in its pods: the fleet flags given
// here (but the capture, whose path in the pod the manifests give, and
// the relay child's), and the fleet's own target, clients, senders and
// duration.
func podArgs(fs *pflag.FlagSet) func(fleet.Config) []string {
	var given []string
	fs.VisitAll(func(f *pflag.Flag) {
		switch f.Name {
		case "clients", "senders", "target", "duration", "metrics", "receive-only", "capture", "relay-bin", "relay-flags":
			return
		}
		if f.Changed {
			given = append(given, "--"+f.Name+"="+f.Value.String())
		}
	})
	return func(f fleet.Config) []string {
		return append(append([]string(nil), given...),
			"--target", f.Target,
			"--clients", strconv.Itoa(f.Clients),
			"--senders", strconv.Itoa(f.Senders),
			"--receive-only="+strconv.FormatBool(f.ReceiveOnly),
			"--duration", f.Duration.String())
	}
}

// open checks that the largest fleet fits the nodes (before creating
// anything), then creates the capture's ConfigMap (unless the image holds
// the capture), the relay with --relay, and a kubectl proxy; it sets the
// run's runner, target and server metrics.
func (k *k8sDrive) open(ctx context.Context, st *state, d *driveFlags, cc *compare.Config) (*k8sSession, error) {
	kc := &k.kubectl
	kc.Logf = func(format string, a ...any) { fmt.Fprintf(st.stderr, "k8s: "+format+"\n", a...) }
	ns, err := kc.CurrentNamespace(ctx)
	if err != nil {
		return nil, err
	}
	shards := d.shards
	largest := cc.Fleet.Clients
	if d.kind == "capacity" {
		largest = cc.Max
	}
	var cpu int64
	if k.cpu != "" {
		cpu, _ = k8s.MilliCPU(k.cpu)
	}
	want := k8s.Want{Shards: shards, ClientsPerShard: (largest + shards - 1) / shards, CPUMilli: cpu, Relay: k.relay}
	if k.relay {
		if want.RelayCPUMilli, err = k8s.MilliCPU(k.p.RelayCPU); err != nil {
			return nil, usageError(fmt.Errorf("--relay-cpu: %w", err))
		}
		if want.RelayMemMiB, err = k8s.MiB(k.p.RelayMemory); err != nil {
			return nil, usageError(fmt.Errorf("--relay-memory: %w", err))
		}
	}
	rooms, err := kc.Rooms(ctx)
	if err != nil {
		return nil, fmt.Errorf("the nodes' room: %w", err)
	}
	fit, err := k8s.Plan(want, rooms)
	if err != nil {
		return nil, err
	}
	kc.Logf("%d shards of up to %d clients: %dm CPU and %d MiB each requested (%s)", shards, want.ClientsPerShard, fit.CPUMilli, fit.MemMiB, roomsLine(rooms))
	s := &k8sSession{kubectl: kc, dir: filepath.Join(cc.Out, "k8s")}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("--k8s: %w", err)
	}
	p := k.p
	p.Shards, p.Clients, p.Relay = shards, max(largest, 1), k.relay
	if err := k.capture(ctx, s, &p, cc.Fleet.Capture); err != nil {
		s.close(ctx)
		return nil, err
	}
	if k.relay {
		p.RelayArgs = d.ff.relay.args
		files, err := k8s.Render(p)
		if err != nil {
			s.close(ctx)
			return nil, usageError(err)
		}
		if err := k8s.Write(files[1:], s.dir, nil); err != nil {
			s.close(ctx)
			return nil, err
		}
		if err := kc.Create(ctx, filepath.Join(s.dir, "relay.yaml")); err != nil {
			s.close(ctx)
			return nil, err
		}
		if err := kc.WaitReady(ctx, p.Name+"-relay", k.startTimout); err != nil {
			s.close(ctx)
			return nil, fmt.Errorf("the relay: %w", err)
		}
		cc.Fleet.Target = net.JoinHostPort(p.Name+"-relay", strconv.Itoa(k8s.RelayPort))
		cc.RelayProcess = fmt.Sprintf("the relay Deployment %s-relay (image %s, %s CPU, %s) in namespace %s", p.Name, p.RelayImage, p.RelayCPU, p.RelayMemory, ns)
	}
	if s.proxy, err = kc.Proxy(ctx); err != nil {
		s.close(ctx)
		return nil, err
	}
	if cc.RelayMetrics == "" {
		if svc, port, ok := serviceTarget(cc.Fleet.Target, k8s.RelayMetricsPort); ok {
			cc.RelayMetrics = k8s.ProxyURL(s.proxy.Addr, ns, "services", svc, port, "/metrics")
		}
	}
	cc.Runner = &launch.Kubernetes{Kubectl: kc, Namespace: ns, Proxy: s.proxy.Addr, Params: p, CPUMilli: cpu,
		Args: podArgs(d.fleetFS), Dir: s.dir, StartTimeout: k.startTimout}
	return s, nil
}

// capture points the pods at the capture: the image's copy when the image
// holds one of that file name, else a ConfigMap made from the file.
func (k *k8sDrive) capture(ctx context.Context, s *k8sSession, p *k8s.Params, path string) error {
	for _, c := range k.imageCaptures {
		if filepath.Base(c) == filepath.Base(path) {
			p.CaptureInImage = c
			return nil
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return usageError(fmt.Errorf("--capture: %w", err))
	}
	p.CaptureFile = filepath.Base(path)
	cm, err := k8s.CaptureConfigMap(*p, data)
	if err != nil {
		return usageError(err)
	}
	if err := k8s.Write([]k8s.File{cm}, s.dir, nil); err != nil {
		return err
	}
	return s.kubectl.Create(ctx, filepath.Join(s.dir, cm.Name))
}

// serviceTarget is the Service a target names (name, name.namespace or
// name.namespace.svc...), for its metrics through the proxy at port.
func serviceTarget(target string, port int) (svc, portName string, ok bool) {
	host, _, err := net.SplitHostPort(target)
	if err != nil || net.ParseIP(host) != nil || host == "localhost" {
		return "", "", false
	}
	name, _, _ := strings.Cut(host, ".")
	return name, strconv.Itoa(port), true
}

func roomsLine(rooms []k8s.NodeRoom) string {
	parts := make([]string, len(rooms))
	for i, r := range rooms {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}

// close deletes what the session created (after the fleets' own) and
// stops the proxy, however the run ended.
func (s *k8sSession) close(ctx context.Context) error {
	s.proxy.Stop()
	return s.kubectl.Cleanup(ctx)
}
