package main

import (
	"context"
	"errors"
	"fmt"
	"net"
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

// open sets up the run on the cluster (launch.OpenKubernetes: the largest
// fleet checked against the nodes before anything is created, the
// capture's ConfigMap unless the image holds the capture, the relay with
// --relay, a kubectl proxy) and sets the run's runner, target and server
// metrics. The runner's Close deletes what it created.
func (k *k8sDrive) open(ctx context.Context, st *state, d *driveFlags, cc *compare.Config) (*launch.Kubernetes, error) {
	kc := &k.kubectl
	kc.Logf = func(format string, a ...any) { fmt.Fprintf(st.stderr, "k8s: "+format+"\n", a...) }
	largest := cc.Fleet.Clients
	if d.kind == "capacity" {
		largest = cc.Max
	}
	p := k.p
	p.Shards, p.Clients, p.Relay, p.CPU = d.shards, largest, k.relay, k.cpu
	p.CaptureFile = filepath.Base(cc.Fleet.Capture)
	if k.relay {
		p.RelayArgs = d.ff.relay.args
	}
	kr, err := launch.OpenKubernetes(ctx, launch.KubernetesSetup{Kubectl: kc, Params: p,
		Capture: cc.Fleet.Capture, ImageCaptures: k.imageCaptures,
		Args: podArgs(d.fleetFS), Dir: filepath.Join(cc.Out, "k8s"), StartTimeout: k.startTimout})
	if err != nil {
		return nil, err
	}
	if k.relay {
		cc.Fleet.Target, cc.RelayProcess = kr.RelayTarget(), kr.DescribeRelay()
	}
	if cc.RelayMetrics == "" {
		if svc, ok := serviceTarget(cc.Fleet.Target); ok {
			cc.RelayMetrics = kr.ProxyURL("services", svc, k8s.RelayMetricsPort, "/metrics")
		}
	}
	cc.Runner = kr
	return kr, nil
}

// serviceTarget is the Service a target names (name, name.namespace or
// name.namespace.svc...), for its metrics through the proxy.
func serviceTarget(target string) (svc string, ok bool) {
	host, _, err := net.SplitHostPort(target)
	if err != nil || net.ParseIP(host) != nil || host == "localhost" {
		return "", false
	}
	name, _, _ := strings.Cut(host, ".")
	return name, true
}
