package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/k8s"
)

func init() { subcommands = append(subcommands, newK8sCmd) }

// newK8sCmd is `replay k8s render`: the fleet's Kubernetes manifests with
// a run's flags (internal/k8s).
func newK8sCmd(st *state) *cobra.Command {
	root := &cobra.Command{Use: "k8s", Short: "Kubernetes manifests for running the fleet as shards"}
	p := k8s.DefaultParams()
	var out string
	render := &cobra.Command{
		Use:   "render [flags] -- [replay run flags]",
		Short: "write the Indexed Job (and optionally the relay) that runs a replay as shards",
		Example: `  replay k8s render --shards 8 --image registry.example/reprise:v1 --relay -- \
    --clients 16000 --receive-only --login-interval 5ms --duration 10m > fleet.yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, args []string) error {
			// Parse the run flags now, so a typo fails here and not in
			// every pod.
			var ff fleetFlags
			fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
			addFleetFlags(fs, &ff)
			fs.SetOutput(st.stderr)
			if err := fs.Parse(args); err != nil {
				return usageError(fmt.Errorf("replay run flags after --: %w", err))
			}
			if fs.NArg() > 0 {
				return usageError(fmt.Errorf("replay run flags after --: unexpected %q", fs.Arg(0)))
			}
			p.RunArgs, p.Clients = args, ff.cfg.Clients
			files, err := k8s.Render(p)
			if err != nil {
				return usageError(err)
			}
			return k8s.Write(files, out, st.stdout)
		},
	}
	f := render.Flags()
	f.StringVar(&p.Name, "name", p.Name, "prefix of the objects' names")
	f.StringVar(&p.Image, "image", p.Image, "container image holding the replay and relay binaries (deploy/kubernetes/Dockerfile)")
	f.IntVar(&p.Shards, "shards", p.Shards, "number of shards: the Job's parallelism and completions")
	f.StringVar(&p.CaptureFile, "capture-file", p.CaptureFile, "the capture's file name in its ConfigMap or volume")
	f.StringVar(&p.CapturePVC, "capture-pvc", "", "mount the capture from this PersistentVolumeClaim instead of the ConfigMap <name>-capture (over 1 MiB)")
	f.IntVar(&p.MemoryPerClientKiB, "memory-per-client", p.MemoryPerClientKiB, "KiB of memory requested per client of a shard")
	f.IntVar(&p.BaseMemoryMiB, "memory-base", p.BaseMemoryMiB, "MiB of memory requested per shard besides its clients")
	f.StringVar(&p.CPU, "cpu", p.CPU, "CPU request of each shard")
	f.BoolVar(&p.Relay, "relay", false, "also render the bundled relay (Deployment and Service) and target it")
	// --relay-flags as in replay, compare and capacity: split on spaces,
	// repeatable; --relay-arg is its old name, kept hidden.
	f.Var((*argList)(&p.RelayArgs), "relay-flags", `extra flags for the relay, split on spaces (e.g. "--max-room-members 40")`)
	f.Var((*argList)(&p.RelayArgs), "relay-arg", "old name of --relay-flags")
	f.MarkHidden("relay-arg")
	f.StringVar(&p.RelayCPU, "relay-cpu", p.RelayCPU, "CPU request of the relay")
	f.StringVar(&p.RelayMemory, "relay-memory", p.RelayMemory, "memory request and limit of the relay")
	f.StringVar(&out, "out", "", "write fleet.yaml (and relay.yaml) into this directory instead of stdout")
	root.AddCommand(render)
	return root
}
