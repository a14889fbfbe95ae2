package compare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/reprise-harness/reprise/internal/barrier"
	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
)

// fleetRun is one scenario's fleet, in this process or as shard processes:
// the targets to sample (its registry, or each shard's /metrics), and run,
// which runs it to its summary.
type fleetRun struct {
	targets []report.Target
	run     func(context.Context) (fleet.Summary, error)
	// runAt, in process, runs it with its clock starting at an instant.
	runAt func(context.Context, time.Time) (fleet.Summary, error)
	close func()
	// start, for shards, waits for their common start instant.
	start func(context.Context) (time.Time, error)
}

// newFleet prepares a scenario's fleet: in this process, or with Shards as
// that many local replay processes started together.
func (r *runner) newFleet(ctx context.Context, cfg fleet.Config, lbl string) (*fleetRun, error) {
	if r.cfg.Shards > 1 {
		return r.newShards(ctx, cfg, lbl)
	}
	f, err := fleet.New(cfg)
	if err != nil {
		return nil, err
	}
	return &fleetRun{targets: []report.Target{{Role: report.RoleFleet, Gatherer: f.Gatherer()}}, run: f.Run, runAt: f.RunAt, close: f.Close}, nil
}

// shardStartTimeout bounds how long the shard processes may take to load
// the capture and bind their metrics.
const shardStartTimeout = 30 * time.Second

// newShards starts Shards replay processes (Exe), each running the
// clients of its shard with RunArgs plus this scenario's senders, target,
// duration and its own metrics port, all starting at one barrier; it
// returns once every shard answers on /metrics. run waits for them and
// merges their summaries (fleet.Merge).
func (r *runner) newShards(ctx context.Context, cfg fleet.Config, lbl string) (*fleetRun, error) {
	n := r.cfg.Shards
	dir, err := os.MkdirTemp("", "reprise-shards-")
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	ports, err := freePorts(n)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// This process coordinates the start, so it knows the instant the
	// shards' clocks start and samples from then.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("shards: barrier: %w", err)
	}
	coord := barrier.NewCoordinator(n, 0)
	procCtx, kill := context.WithCancel(context.Background())
	var wg, serving sync.WaitGroup // the shard processes; the barrier
	serving.Go(func() { coord.Serve(procCtx, ln) })
	fr := &fleetRun{}
	exited := make(chan struct{}, n)
	errs := make([]error, n)
	for i := range n {
		metrics := fmt.Sprintf("127.0.0.1:%d", ports[i])
		args := append(append([]string(nil), r.cfg.RunArgs...),
			"--target", cfg.Target,
			"--clients", fmt.Sprint(cfg.Clients),
			"--senders", fmt.Sprint(cfg.Senders),
			"--receive-only="+fmt.Sprint(cfg.ReceiveOnly),
			"--duration", cfg.Duration.String(),
			"--metrics", metrics,
			"--shard", fmt.Sprintf("%d/%d", i, n),
			"--barrier", ln.Addr().String(), "--barrier-serve=false",
			"--summary", filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		if len(cfg.Levels) > 0 { // a capacity search's step ramp
			args = append(args, "--levels", intList(cfg.Levels), "--level-wait", cfg.LevelWait.String())
		}
		cmd := exec.CommandContext(procCtx, r.cfg.Exe, args...)
		// Ctrl-C reaches the shards through the context: each stops
		// cleanly and still writes its summary.
		cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
		cmd.WaitDelay = 15 * time.Second
		w := &prefixWriter{w: r.out, prefix: fmt.Sprintf("[%s shard %d/%d] ", lbl, i, n)}
		cmd.Stdout, cmd.Stderr = discardTable{}, w
		if err := cmd.Start(); err != nil {
			kill()
			wg.Wait()
			serving.Wait()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("shard %d/%d: %w", i, n, err)
		}
		wg.Go(func() { errs[i] = cmd.Wait(); exited <- struct{}{} })
		fr.targets = append(fr.targets, report.Target{Role: report.RoleFleet, URL: "http://" + metrics + "/metrics"})
	}
	stop := context.AfterFunc(ctx, kill)
	fr.close = func() { stop(); kill(); wg.Wait(); serving.Wait(); os.RemoveAll(dir) }
	if err := waitMetrics(ctx, fr.targets, shardStartTimeout); err != nil {
		fr.close()
		return nil, err
	}
	fr.start = func(ctx context.Context) (time.Time, error) {
		select {
		case <-coord.Started():
			return coord.Start(), nil
		case <-exited:
			return time.Time{}, errors.New("a shard exited before the start")
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	fr.run = func(context.Context) (fleet.Summary, error) {
		wg.Wait()
		defer fr.close()
		var sums []fleet.Summary
		for i := range n {
			s, err := readSummary(filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
			if err != nil {
				return fleet.Summary{}, fmt.Errorf("shard %d/%d: %w (exit: %v)", i, n, err, errs[i])
			}
			sums = append(sums, s)
		}
		return fleet.Merge(sums)
	}
	return fr, nil
}

// discardTable drops a shard's summary table (the merged one counts).
type discardTable struct{}

func (discardTable) Write(b []byte) (int, error) { return len(b), nil }

func readSummary(path string) (fleet.Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return fleet.Summary{}, fmt.Errorf("no summary: %w", err)
	}
	defer f.Close()
	return fleet.ReadSummary(f)
}

// freePorts reserves n free loopback ports and releases them for the
// shards to bind (a small race with other programs, as for any test port).
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("shards: free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitMetrics polls every URL until it answers 200, for at most timeout.
func waitMetrics(ctx context.Context, targets []report.Target, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for _, t := range targets {
		u := t.URL
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if ctx.Err() != nil {
				return errors.Join(fmt.Errorf("shards: %s did not answer within %v", u, timeout), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// shardLine is the report's line on each shard: its CPU idle, start and
// saturation (the merged summary's shards).
func shardLine(sum fleet.Summary) string {
	parts := make([]string, 0, len(sum.Shards))
	for _, s := range sum.Shards {
		p := fmt.Sprintf("%s %.0f%% idle, late %.1f ms", s.Shard, s.CPUIdlePct, s.StartLateMS)
		if s.Saturated {
			p += " SATURATED"
		}
		parts = append(parts, p)
	}
	skew := 0.0
	if sum.StartSkewMS != nil {
		skew = *sum.StartSkewMS
	}
	return fmt.Sprintf("fleet ran as %d shards (start skew %.1f ms): %s", len(sum.Shards), skew, strings.Join(parts, "; "))
}

// intList is ns as a comma-separated list.
func intList(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}
