package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/k8s"
)

func init() { subcommands = append(subcommands, newK8sCmd) }

// newK8sCmd is `replay k8s`: the fleet on Kubernetes (internal/k8s):
// image, render and run.
func newK8sCmd(st *state) *cobra.Command {
	root := &cobra.Command{Use: "k8s", Short: "run the fleet as shards on Kubernetes: images, manifests, the whole run"}
	root.AddCommand(newK8sImageCmd(st), newK8sRenderCmd(st), newK8sRunCmd(st))
	return root
}

// renderFlags are the manifests' flags, shared by render and run.
type renderFlags struct {
	p      k8s.Params
	images string
}

func addRenderFlags(f *pflag.FlagSet, rf *renderFlags) {
	rf.p = k8s.DefaultParams()
	p := &rf.p
	f.StringVar(&p.Name, "name", p.Name, "prefix of the objects' names")
	f.StringVar(&p.Image, "image", p.Image, "container image holding the replay and relay binaries (replay k8s image, or deploy/kubernetes/Dockerfile)")
	f.StringVar(&p.RelayImage, "relay-image", "", "the relay's image (default: --image)")
	f.StringVar(&p.PullPolicy, "pull-policy", p.PullPolicy, "imagePullPolicy of the containers: Always, IfNotPresent or Never")
	f.StringVar(&rf.images, "images", "", "run the images 'replay k8s image --out `DIR`' wrote (sets --image, --relay-image and --pull-policy)")
	addShardCount(f, &p.Shards, "number of shards: the Job's parallelism and completions")
	f.StringVar(&p.CaptureFile, "capture-file", p.CaptureFile, "the capture's file name in its ConfigMap or volume")
	f.StringVar(&p.CapturePVC, "capture-pvc", "", "mount the capture from this PersistentVolumeClaim instead of the ConfigMap <name>-capture (over 1 MiB)")
	f.StringVar(&p.CaptureInImage, "image-capture", "", "replay this capture inside the image (replay k8s image --capture, e.g. "+k8s.CaptureDir+"/x.pcap): no volume (default with --images: the image's only capture)")
	f.IntVar(&p.MemoryPerClientKiB, "memory-per-client", p.MemoryPerClientKiB, "KiB of memory requested per client of a shard")
	f.IntVar(&p.BaseMemoryMiB, "memory-base", p.BaseMemoryMiB, "MiB of memory requested per shard besides its clients")
	f.StringVar(&p.CPU, "cpu", p.CPU, "CPU request of each shard (default: run: an even share of the nodes' free CPU, 100m to 1; render: "+k8s.DefaultShardCPU+")")
	f.BoolVar(&p.Relay, "relay", false, "also render the bundled relay (Deployment and Service) and target it")
	// --relay-flags as in replay, compare and capacity: split on spaces,
	// repeatable; --relay-arg is its old name, kept hidden.
	f.Var((*argList)(&p.RelayArgs), "relay-flags", `extra flags for the relay, split on spaces (e.g. "--max-room-members 40")`)
	f.Var((*argList)(&p.RelayArgs), "relay-arg", "old name of --relay-flags")
	f.MarkHidden("relay-arg")
	f.StringVar(&p.RelayCPU, "relay-cpu", p.RelayCPU, "CPU request of the relay")
	f.StringVar(&p.RelayMemory, "relay-memory", p.RelayMemory, "memory request and limit of the relay")
}

// params checks the run flags after -- and returns the rendering's
// parameters.
func (rf *renderFlags) params(st *state, args []string) (k8s.Params, error) {
	// Parse the run flags now, so a typo fails here and not in every pod.
	var ff fleetFlags
	fs := pflag.NewFlagSet("replay", pflag.ContinueOnError)
	addFleetFlags(fs, &ff)
	fs.SetOutput(st.stderr)
	if err := fs.Parse(args); err != nil {
		return k8s.Params{}, usageError(fmt.Errorf("replay run flags after --: %w", err))
	}
	if fs.NArg() > 0 {
		return k8s.Params{}, usageError(fmt.Errorf("replay run flags after --: unexpected %q", fs.Arg(0)))
	}
	p := rf.p
	p.RunArgs, p.Clients = args, ff.cfg.Clients
	if rf.images != "" {
		set, err := k8s.ReadImageSet(rf.images)
		if err != nil {
			return k8s.Params{}, usageError(err)
		}
		set.Apply(&p)
	}
	return p, nil
}

// newK8sRenderCmd is `replay k8s render`: the fleet's Kubernetes
// manifests with a run's flags.
func newK8sRenderCmd(st *state) *cobra.Command {
	var rf renderFlags
	var out string
	render := &cobra.Command{
		Use:   "render [flags] -- [replay run flags]",
		Short: "write the Indexed Job (and optionally the relay) that runs a replay as shards",
		Example: `  replay k8s render --shards 8 --image registry.example/reprise:v1 --relay -- \
    --clients 16000 --receive-only --login-interval 5ms --duration 10m > fleet.yaml`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(_ *cobra.Command, args []string) error {
			p, err := rf.params(st, args)
			if err != nil {
				return err
			}
			files, err := k8s.Render(p)
			if err != nil {
				return usageError(err)
			}
			if out != "" {
				if err := os.MkdirAll(out, 0o755); err != nil {
					return fmt.Errorf("render: %w", err)
				}
			}
			return k8s.Write(files, out, st.stdout)
		},
	}
	addRenderFlags(render.Flags(), &rf)
	render.Flags().StringVar(&out, "out", "", "write fleet.yaml (and relay.yaml) into this directory instead of stdout")
	return render
}

// newK8sImageCmd is `replay k8s image`: OCI image tarballs of replay and
// relay from static binaries, without Docker.
func newK8sImageCmd(st *state) *cobra.Command {
	var replayBin, relayBin, out, registry, tag string
	var captures []string
	var program string
	var push bool
	cmd := &cobra.Command{
		Use:   "image",
		Short: "write OCI image tarballs of replay and relay from static binaries (no Docker needed); push them with --push",
		Long: `Builds one image per program from its static binary, with no base image, and writes
DIR/replay.tar and DIR/relay.tar (OCI layout and docker-archive in one: load with
'ctr -n k8s.io images import' or 'docker load') and DIR/images.json, which
'replay k8s render --images DIR' and 'replay k8s run --images DIR' read.
The binaries must be static: CGO_ENABLED=0 go build ./cmd/replay ./cmd/relay (make k8s-images).
The default tag comes from the content of the binary and of the files put in the image
(--capture), so a rebuilt binary or a changed capture never hides behind an old tag.`,
		Example: `  make k8s-images        # CGO_ENABLED=0 builds, then: replay k8s image --capture captures/vr-session.pcap --out bin/images
  replay k8s image --replay bin/static/replay --relay bin/static/relay --out bin/images
  replay k8s image --replay bin/static/replay --relay bin/static/relay --registry registry.example/team --push`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(c *cobra.Command, _ []string) error {
			if push && registry == "" {
				return usageError(fmt.Errorf("--push needs --registry"))
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return fmt.Errorf("image: %w", err)
			}
			if program != "" {
				return otherImage(st, program, out, registry, tag)
			}
			if replayBin == "" {
				exe, err := os.Executable()
				if err != nil {
					return usageError(fmt.Errorf("--replay: %w", err))
				}
				replayBin = exe
			}
			if relayBin == "" {
				relayBin = filepath.Join(filepath.Dir(replayBin), "relay")
			}
			set := k8s.ImageSet{Pushed: push}
			var files []k8s.ImageFile
			for _, c := range captures {
				data, err := os.ReadFile(c)
				if err != nil {
					return usageError(fmt.Errorf("--capture: %w", err))
				}
				f := k8s.ImageFile{Path: k8s.CaptureDir + "/" + filepath.Base(c), Data: data}
				files = append(files, f)
				set.Captures = append(set.Captures, f.Path)
			}
			for _, b := range []struct {
				prog, path string
				files      []k8s.ImageFile
				ref        *string
			}{{"replay", replayBin, files, &set.Replay}, {"relay", relayBin, nil, &set.Relay}} {
				im, err := k8s.BuildImage(b.prog, b.path, b.files, registry, tag)
				if err != nil {
					return usageError(err)
				}
				tarPath := filepath.Join(out, b.prog+".tar")
				if err := writeFile(tarPath, im.WriteTarball); err != nil {
					return err
				}
				digest, err := im.Digest()
				if err != nil {
					return err
				}
				if push {
					if err := im.Push(c.Context()); err != nil {
						return err
					}
				}
				*b.ref = im.Ref.String()
				fmt.Fprintf(st.stdout, "%s  %s  %s\n", im.Ref, digest, tarPath)
			}
			return k8s.WriteImageSet(out, set)
		},
	}
	f := cmd.Flags()
	f.StringVar(&replayBin, "replay", "", "static replay binary (default: this program)")
	f.StringVar(&relayBin, "relay", "", "static relay binary (default: relay beside --replay)")
	f.StringVar(&out, "out", "images", "directory for replay.tar, relay.tar and images.json")
	f.StringVar(&registry, "registry", "", "registry (and path) the images are named in, e.g. registry.example/team (default: "+k8s.LocalRegistry+", load-only)")
	f.StringVar(&tag, "tag", "", "image tag (default: sha-<first 12 hex of the sha256 of the binary and the files put in the image>)")
	f.StringSliceVar(&captures, "capture", nil, "put this capture in the replay image as "+k8s.CaptureDir+"/<file name> (repeatable; for captures over a ConfigMap's 1 MiB)")
	f.BoolVar(&push, "push", false, "push the images to --registry (credentials from the Docker config, as docker push)")
	// Hidden: scripts/k8s-e2e.sh makes the cluster's pause image with it.
	f.StringVar(&program, "program", "", "only write NAME.tar, the image of the static binary PATH (NAME=PATH)")
	f.MarkHidden("program")
	return cmd
}

// otherImage writes the image of one more static program (NAME=PATH).
func otherImage(st *state, program, out, registry, tag string) error {
	name, path, ok := strings.Cut(program, "=")
	if !ok || name == "" || strings.ContainsAny(name, "/: ") {
		return usageError(fmt.Errorf("--program %q: want NAME=PATH", program))
	}
	im, err := k8s.BuildImage(name, path, nil, registry, tag)
	if err != nil {
		return usageError(err)
	}
	tarPath := filepath.Join(out, name+".tar")
	if err := writeFile(tarPath, im.WriteTarball); err != nil {
		return err
	}
	fmt.Fprintln(st.stdout, im.Ref)
	return nil
}
