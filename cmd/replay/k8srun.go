package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/compare"
	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/k8s"
	"github.com/reprise-harness/reprise/internal/launch"
)

// `replay k8s run` is one fleet on launch.Kubernetes, the runner compare
// and capacity --k8s use: here are its flags and its printing only.

// k8sRun is one `replay k8s run`.
type k8sRun struct {
	st      *state
	kc      k8s.Kubectl
	out     string
	keep    bool
	start   time.Duration
	maxLoss float64
}

func newK8sRunCmd(st *state) *cobra.Command {
	var rf renderFlags
	r := &k8sRun{st: st}
	var capture, summary string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run [flags] -- [replay run flags]",
		Short: "run the fleet as shards on a Kubernetes cluster: apply, wait, collect each shard's summary, merge, clean up",
		Long: `Creates the capture's ConfigMap and the rendered manifests with kubectl (the
current context, or --namespace), waits for the relay (--relay) and for every
shard of the Indexed Job, starts them together, streams their progress, reads
each shard's summary from its pod log, merges them exactly (as 'replay merge')
and prints the answer. The shard logs, their summaries, the merged summary
and the manifests go to --out. Everything created is deleted at the end, on
failure and on Ctrl-C (unless --keep). A shard that fails, or does not start
within --start-timeout, is named with the cluster's reason.`,
		Example: `  make k8s-images    # then load bin/images/*.tar on the nodes, or use --registry and --push
  replay k8s run --images bin/images --relay --shards 4 -- \
    --clients 2000 --receive-only --login-interval 5ms --duration 30s`,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(c *cobra.Command, args []string) error {
			p, err := rf.params(st, args)
			if err != nil {
				return err
			}
			var inImage []string
			if capture != "" && rf.images != "" && !c.Flags().Changed("image-capture") {
				// --images and --capture: the image's copy of that capture
				// when it holds one (no ConfigMap), else the file.
				p.CaptureInImage = ""
				if set, err := k8s.ReadImageSet(rf.images); err == nil {
					inImage = set.Captures
				}
			}
			if n := btoi(capture != "") + btoi(p.CapturePVC != "") + btoi(p.CaptureInImage != ""); n != 1 {
				return usageError(fmt.Errorf("want one capture: --capture (a local file, sent as a ConfigMap), --capture-pvc or --image-capture"))
			}
			if r.out == "" {
				r.out = compare.DefaultOut("k8s", time.Now())
			}
			ctx := c.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the run took longer than --timeout %v", timeout))
				defer cancel()
			}
			r.kc.Logf = func(format string, a ...any) { fmt.Fprintf(st.stderr, "k8s: "+format+"\n", a...) }
			return r.run(ctx, launch.KubernetesSetup{Kubectl: &r.kc, Params: p, Capture: capture, ImageCaptures: inImage,
				Args: k8sRunArgs(p), Dir: r.out, StartTimeout: r.start, Keep: r.keep, Single: true}, summary)
		},
	}
	addRenderFlags(cmd.Flags(), &rf)
	f := cmd.Flags()
	f.StringVar(&capture, "capture", "", "the capture to replay (a local file, at most 1 MiB: created as the ConfigMap <name>-capture)")
	f.StringVar(&r.kc.Program, "kubectl", "kubectl", "the kubectl program (it uses $KUBECONFIG and its current context)")
	f.StringVarP(&r.kc.Namespace, "namespace", "n", "", "namespace (default: the context's)")
	f.StringVar(&r.out, "out", "", "directory for the manifests, the shards' logs and summaries, and merged.json (default out/k8s-<time>)")
	f.StringVar(&summary, "summary", "", "also write the merged summary as JSON to this file")
	f.BoolVar(&r.keep, "keep", false, "leave the objects in the cluster at the end (to look at them; delete with kubectl delete -f OUT/manifests)")
	f.DurationVar(&r.start, "start-timeout", 3*time.Minute, "fail when a pod is not running within this")
	f.DurationVar(&timeout, "timeout", time.Hour, "fail when the whole run takes longer")
	addMaxLossFlag(f, &r.maxLoss)
	return cmd
}

// k8sRunArgs are the pods' replay flags: the ones after --, and the relay
// Deployment as the target with --relay.
func k8sRunArgs(p k8s.Params) func(fleet.Config) []string {
	return func(fleet.Config) []string {
		args := append([]string(nil), p.RunArgs...)
		if p.Relay {
			args = append(args, "--target", fmt.Sprintf("%s-relay:%d", p.Name, k8s.RelayPort))
		}
		return args
	}
}

// run sets up the cluster, runs the one fleet and prints its merged
// answer; what was created is deleted however it ends (but --keep).
func (r *k8sRun) run(ctx context.Context, setup launch.KubernetesSetup, summary string) (err error) {
	k, err := launch.OpenKubernetes(ctx, setup)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := k.Close(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	f, err := k.Prepare(ctx, fleet.Config{Clients: setup.Params.Clients})
	if err != nil {
		return err
	}
	if _, err := f.Start(ctx); err != nil {
		f.Close()
		return err
	}
	// Levels given after -- are passed, every shard together.
	for l := range f.Levels() {
		f.Resume(l)
	}
	m, err := f.Wait()
	if err != nil {
		return err
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return context.Cause(ctx)
	}
	verdict := printMerged(r.st, m, r.out, summary, r.maxLoss)
	if ctx.Err() != nil && !errors.Is(verdict, fleet.ErrNothingLoggedIn) {
		// Stopped by the user (Ctrl-C): the card says what the shards
		// measured so far; only a run that measured nothing fails.
		return nil
	}
	return verdict
}

// printMerged prints the shards' merged summary with the answer card (as
// 'replay merge') and writes merged.json into out (and --summary). It
// returns the merged run's verdict (Summary.Check): the run's exit.
func printMerged(st *state, m fleet.Summary, out, summary string, maxLoss float64) error {
	verdict := m.Check(maxLoss)
	if err := m.WriteText(st.stdout); err != nil {
		return err
	}
	if err := writeAnswer(st.stdout, m, maxLoss, verdict); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(out, "merged.json"), m.WriteJSON); err != nil {
		return err
	}
	if summary != "" {
		if err := writeFile(summary, m.WriteJSON); err != nil {
			return err
		}
	}
	fmt.Fprintf(st.stderr, "k8s: shards' logs and summaries, merged.json and the manifests: %s\n", out)
	if m.LoginsSucceeded == 0 {
		return fmt.Errorf("no client of any shard logged in: nothing was measured (see %s/shard-*.log): %w", out, fleet.ErrNothingLoggedIn)
	}
	return verdict
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
