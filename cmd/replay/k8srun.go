package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/k8s"
	"github.com/reprise-harness/reprise/internal/launch"
)

// `replay k8s run` drives kubectl rather than linking client-go: the user's
// kubectl already knows their cluster (kubeconfig contexts, exec credential
// plugins for EKS/GKE/AKS, proxies), its version skew policy is the
// cluster's, and client-go would add tens of MB to this binary and a second
// copy of the Kubernetes module graph to pin. What a typed watch would give
// is a poll of `kubectl get pods -o json` once a second here: a run lasts
// minutes, and a second of latency in noticing a finished pod costs nothing.

// k8sRunner is one `replay k8s run`.
type k8sRunner struct {
	st           *state
	kc           k8s.Kubectl
	out          string
	keep         bool
	poll         time.Duration
	startTimeout time.Duration
	p            k8s.Params
	maxLoss      float64
	// lastPods are the shard pods by index as last seen (for Ctrl-C).
	lastPods []k8s.Pod
}

func newK8sRunCmd(st *state) *cobra.Command {
	var rf renderFlags
	r := &k8sRunner{st: st, poll: time.Second}
	var capture, summary string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "run [flags] -- [replay run flags]",
		Short: "run the fleet as shards on a Kubernetes cluster: apply, wait, collect each shard's summary, merge, clean up",
		Long: `Creates the capture's ConfigMap and the rendered manifests with kubectl (the
current context, or --namespace), waits for the relay (--relay) and for every
shard of the Indexed Job, streams their progress, reads each shard's summary
from its pod log, merges them exactly (as 'replay merge') and prints the
answer. The shard logs, their summaries, the merged summary and the
manifests go to --out. Everything created is deleted at the end, on failure
and on Ctrl-C (unless --keep). A shard that fails, or does not start within
--start-timeout, is named with the cluster's reason.`,
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
			if capture != "" && rf.images != "" && !c.Flags().Changed("image-capture") {
				// --images and --capture: the image's copy of that capture
				// when it holds one (no ConfigMap), else the file.
				p.CaptureInImage = ""
				if set, err := k8s.ReadImageSet(rf.images); err == nil {
					for _, ic := range set.Captures {
						if filepath.Base(ic) == filepath.Base(capture) {
							p.CaptureInImage, capture = ic, ""
						}
					}
				}
			}
			if n := btoi(capture != "") + btoi(p.CapturePVC != "") + btoi(p.CaptureInImage != ""); n != 1 {
				return usageError(fmt.Errorf("want one capture: --capture (a local file, sent as a ConfigMap), --capture-pvc or --image-capture"))
			}
			r.p = p
			r.kc.Logf = r.logf
			if r.out == "" {
				r.out = filepath.Join("out", "k8s-"+time.Now().UTC().Format("20060102-150405"))
			}
			ctx := c.Context()
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeoutCause(ctx, timeout, fmt.Errorf("the run took longer than --timeout %v", timeout))
				defer cancel()
			}
			return r.run(ctx, capture, summary)
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
	f.DurationVar(&r.startTimeout, "start-timeout", 3*time.Minute, "fail when a pod is not running within this")
	f.DurationVar(&timeout, "timeout", time.Hour, "fail when the whole run takes longer")
	addMaxLossFlag(f, &r.maxLoss)
	return cmd
}

func (r *k8sRunner) logf(format string, a ...any) {
	fmt.Fprintf(r.st.stderr, "k8s: "+format+"\n", a...)
}

// fit reads the nodes' room before anything is created, sets each
// shard's requests (an auto CPU request as the nodes allow) and refuses a
// run the scheduler could not place, with the numbers.
func (r *k8sRunner) fit(ctx context.Context) error {
	p := &r.p
	per := (p.Clients + p.Shards - 1) / p.Shards
	want := k8s.Want{Shards: p.Shards, ClientsPerShard: per, Relay: p.Relay,
		MemMiB: int64(p.BaseMemoryMiB + (per*p.MemoryPerClientKiB+1023)/1024)}
	var err error
	if p.CPU != "" {
		if want.CPUMilli, err = k8s.MilliCPU(p.CPU); err != nil {
			return usageError(fmt.Errorf("--cpu: %w", err))
		}
	}
	if p.Relay {
		if want.RelayCPUMilli, err = k8s.MilliCPU(p.RelayCPU); err != nil {
			return usageError(fmt.Errorf("--relay-cpu: %w", err))
		}
		if want.RelayMemMiB, err = k8s.MiB(p.RelayMemory); err != nil {
			return usageError(fmt.Errorf("--relay-memory: %w", err))
		}
	}
	rooms, err := r.kc.Rooms(ctx)
	if err != nil {
		return fmt.Errorf("the nodes' room: %w", err)
	}
	fit, err := k8s.Plan(want, rooms)
	if err != nil {
		return err
	}
	p.CPU, p.MemoryMiB = fmt.Sprintf("%dm", fit.CPUMilli), fit.MemMiB
	r.logf("%d shards × %d clients: %s CPU and %d MiB requested each (%s)", p.Shards, per, p.CPU, fit.MemMiB, roomsLine(rooms))
	return nil
}

// kubectlRun runs kubectl (k8s.Kubectl.Run).
func (r *k8sRunner) kubectlRun(ctx context.Context, args ...string) ([]byte, error) {
	return r.kc.Run(ctx, args...)
}

func (r *k8sRunner) create(ctx context.Context, path string) error { return r.kc.Create(ctx, path) }

// pods lists the pods of one app label.
func (r *k8sRunner) pods(ctx context.Context, app string) ([]k8s.Pod, error) {
	return r.kc.Pods(ctx, app)
}

// run is the whole run; created objects are deleted however it ends.
func (r *k8sRunner) run(ctx context.Context, capture, summary string) (err error) {
	if err := r.fit(ctx); err != nil {
		return err
	}
	files, err := k8s.Render(r.p)
	if err != nil {
		return usageError(err)
	}
	if capture != "" {
		data, err := os.ReadFile(capture)
		if err != nil {
			return usageError(fmt.Errorf("--capture: %w", err))
		}
		cm, err := k8s.CaptureConfigMap(r.p, data)
		if err != nil {
			return usageError(err)
		}
		files = append([]k8s.File{cm}, files...)
	}
	mdir := filepath.Join(r.out, "manifests")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return fmt.Errorf("k8s run: %w", err)
	}
	if err := k8s.Write(files, mdir, nil); err != nil {
		return err
	}
	defer func() {
		if cerr := r.cleanup(ctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for _, f := range files {
		if f.Name == "fleet.yaml" {
			continue
		}
		if err := r.create(ctx, filepath.Join(mdir, f.Name)); err != nil {
			return err
		}
	}
	if r.p.Relay {
		if err := r.waitRelay(ctx); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := r.create(ctx, filepath.Join(mdir, "fleet.yaml")); err != nil {
		return err
	}
	pods, err := r.waitShards(ctx, start)
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) && len(r.lastPods) > 0 {
			// Ctrl-C: what ran so far, as a local run gives it.
			return r.interrupted(ctx, summary)
		}
		return err
	}
	if _, err := r.kubectlRun(ctx, "wait", "--for=condition=complete", "--timeout=60s", "job/"+r.p.Name+"-fleet"); err != nil {
		return fmt.Errorf("every shard succeeded but the Job is not complete: %w", err)
	}
	r.logf("job %s-fleet complete (%v)", r.p.Name, time.Since(start).Round(time.Second))
	return r.answer(ctx, pods, summary)
}

// cleanup deletes what was created, in reverse, waiting until the pods
// are gone, even when ctx was cancelled (Ctrl-C).
func (r *k8sRunner) cleanup(ctx context.Context) error {
	if r.keep {
		if len(r.kc.Created()) > 0 {
			r.logf("kept: kubectl delete -f %s", filepath.Join(r.out, "manifests"))
		}
		return nil
	}
	return r.kc.Cleanup(ctx)
}

// waitRelay waits until a relay pod is ready.
func (r *k8sRunner) waitRelay(ctx context.Context) error {
	if err := r.kc.WaitReady(ctx, r.p.Name+"-relay", r.startTimeout); err != nil {
		return fmt.Errorf("the relay: %w", err)
	}
	return nil
}

// waitShards follows the shard pods until every one succeeded, and
// returns them by index. It names a shard that failed or did not start.
func (r *k8sRunner) waitShards(ctx context.Context, start time.Time) ([]k8s.Pod, error) {
	app := r.p.Name + "-fleet"
	seen := map[string]k8s.PodState{}
	lastStatus := time.Now()
	for {
		pods, err := r.pods(ctx, app)
		if err != nil {
			return nil, err
		}
		byIndex := make([]k8s.Pod, r.p.Shards)
		var n [4]int
		var starting []string
		for _, p := range pods {
			i := p.CompletionIndex()
			if i < 0 || i >= r.p.Shards {
				continue
			}
			byIndex[i] = p
			r.lastPods = byIndex
			st, reason := p.State()
			n[st]++
			if old, ok := seen[p.Metadata.Name]; !ok || old != st {
				seen[p.Metadata.Name] = st
				r.logf("shard %d/%d %s: %s", i, r.p.Shards, p.Metadata.Name, st)
			}
			switch st {
			case k8s.PodFailed:
				r.logTail(ctx, p.Metadata.Name)
				return nil, fmt.Errorf("shard %d (pod %s) failed: %s", i, p.Metadata.Name, reason)
			case k8s.PodStarting:
				if strings.HasPrefix(reason, "Unschedulable") {
					// The scheduler said so: waiting would not change the nodes.
					return nil, fmt.Errorf("shard %d (pod %s) cannot be scheduled: %s", i, p.Metadata.Name, reason)
				}
				starting = append(starting, fmt.Sprintf("shard %d (pod %s): %s", i, p.Metadata.Name, reason))
			}
		}
		if n[k8s.PodSucceeded] == r.p.Shards {
			return byIndex, nil
		}
		if (len(starting) > 0 || len(pods) < r.p.Shards) && time.Since(start) > r.startTimeout {
			if len(pods) < r.p.Shards {
				starting = append(starting, fmt.Sprintf("%d of %d shard pods were never created (kubectl describe job %s)", r.p.Shards-len(pods), r.p.Shards, app))
			}
			return nil, fmt.Errorf("not every shard started within --start-timeout %v: %s", r.startTimeout, strings.Join(starting, "; "))
		}
		if time.Since(lastStatus) >= 10*time.Second {
			lastStatus = time.Now()
			r.logf("%d starting, %d running, %d succeeded of %d shards (%v)", n[k8s.PodStarting], n[k8s.PodRunning], n[k8s.PodSucceeded], r.p.Shards, time.Since(start).Round(time.Second))
		}
		if err := sleepCtx(ctx, r.poll); err != nil {
			return nil, err
		}
	}
}

// logTail shows the end of a failed pod's log.
func (r *k8sRunner) logTail(ctx context.Context, pod string) {
	b, err := r.kubectlRun(ctx, "logs", "--tail=20", pod)
	if err != nil || len(b) == 0 {
		return
	}
	r.logf("the end of %s's log:\n%s", pod, bytes.TrimRight(b, "\n"))
}

// interrupted stops the shards as Ctrl-C stops a local run: the Job is
// suspended, so Kubernetes sends each running pod SIGTERM, on which replay
// writes its summary and exits; their logs are followed until then, and
// the summaries there are merged and printed. The run then ends as done
// (exit 0) with what it had, as the README says.
func (r *k8sRunner) interrupted(ctx context.Context, summary string) error {
	r.logf("interrupted: stopping the shards (the Job suspended: SIGTERM); each writes what it ran so far")
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	pods := r.lastPods
	logs := make([][]byte, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		if st, _ := p.State(); p.Metadata.Name == "" || (st != k8s.PodRunning && st != k8s.PodSucceeded) {
			continue
		}
		wg.Go(func() { logs[i], _ = r.kc.Run(bctx, "logs", "-f", p.Metadata.Name) })
	}
	// The streams attach before the pods are told to stop.
	sleepCtx(bctx, time.Second)
	if _, err := r.kc.Run(bctx, "patch", "job", r.p.Name+"-fleet", "--type=merge", "-p", `{"spec":{"suspend":true}}`); err != nil {
		r.logf("%v", err)
	}
	wg.Wait()
	var sums []fleet.Summary
	for i, b := range logs {
		if len(b) == 0 {
			r.logf("shard %d: no log: not running when interrupted", i)
			continue
		}
		if err := os.WriteFile(filepath.Join(r.out, fmt.Sprintf("shard-%d.log", i)), b, 0o644); err != nil {
			return fmt.Errorf("k8s run: %w", err)
		}
		s, err := launch.SummaryFromLog(b)
		if err != nil {
			r.logf("shard %d (pod %s): %v", i, pods[i].Metadata.Name, err)
			continue
		}
		sums = append(sums, s)
	}
	if len(sums) == 0 {
		return fmt.Errorf("interrupted before any shard wrote a summary (logs in %s)", r.out)
	}
	r.logf("interrupted: %d of %d shards' summaries merged", len(sums), len(pods))
	verdict := r.printMerged(sums, summary)
	if errors.Is(verdict, fleet.ErrNothingLoggedIn) {
		return verdict
	}
	// Stopped by the user: the card says what the shards measured so far;
	// only a run that measured nothing fails.
	return nil
}

// answer collects each shard's summary from its log, merges them and
// prints the merged answer.
func (r *k8sRunner) answer(ctx context.Context, pods []k8s.Pod, summary string) error {
	sums := make([]fleet.Summary, 0, len(pods))
	for i, p := range pods {
		b, err := r.kubectlRun(ctx, "logs", p.Metadata.Name)
		if err != nil {
			return fmt.Errorf("shard %d log: %w", i, err)
		}
		path := filepath.Join(r.out, fmt.Sprintf("shard-%d.log", i))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return fmt.Errorf("k8s run: %w", err)
		}
		s, err := loadSummary(path)
		if err != nil {
			return fmt.Errorf("shard %d (pod %s): %w", i, p.Metadata.Name, err)
		}
		if err := writeFile(filepath.Join(r.out, fmt.Sprintf("shard-%d.json", i)), s.WriteJSON); err != nil {
			return err
		}
		sums = append(sums, s)
	}
	return r.printMerged(sums, summary)
}

// printMerged merges the shards' summaries, prints them with the answer
// card (as 'replay merge') and writes merged.json (and --summary). It
// returns the merged run's verdict (Summary.Check): the run's exit.
func (r *k8sRunner) printMerged(sums []fleet.Summary, summary string) error {
	m, err := fleet.Merge(sums)
	if err != nil {
		return err
	}
	verdict := m.Check(r.maxLoss)
	if err := m.WriteText(r.st.stdout); err != nil {
		return err
	}
	if err := writeAnswer(r.st.stdout, m, r.maxLoss, verdict); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(r.out, "merged.json"), m.WriteJSON); err != nil {
		return err
	}
	if summary != "" {
		if err := writeFile(summary, m.WriteJSON); err != nil {
			return err
		}
	}
	r.logf("shards' logs and summaries, merged.json and the manifests: %s", r.out)
	if m.LoginsSucceeded == 0 {
		return fmt.Errorf("no client of any shard logged in: nothing was measured (see %s/shard-*.log): %w", r.out, fleet.ErrNothingLoggedIn)
	}
	return verdict
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
