// Package compare drives fleets to an answer. Run is `replay compare`:
// the same recorded session and the same login ramp replayed as N:N
// (every client plays the loop) and as 1:N (K senders, the rest receive
// only), each repeated, against one server, waiting for the server to
// drop back to zero connections between runs. RunCapacity (capacity.go)
// is `replay capacity`: one fleet stepping up level by level, each held
// and judged against the objectives, until one breaks. Both sample the
// server's and the fleet's metrics every Interval and hand everything to
// internal/report; both run their fleets through one seam,
// launch.Runner (in this process, as shard processes, or as the pods of
// a Kubernetes Job).
//
// It is not the fleet (internal/fleet), nor the report's maths and
// pictures (internal/report), nor how a fleet is started (internal/launch); it
// starts no relay (the command starts one as a child process and passes
// its address). It owns the order of runs, asks for the decision at each
// level (a pure function of the samples: report.Decide), and owns the
// goroutine that samples while a fleet runs.
package compare

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/launch"
	"github.com/reprise-harness/reprise/internal/report"
)

// Scenario names, as they appear in the report.
const (
	NN   = "N:N"
	OneN = "1:N"
)

// finalScrapeDelay is how long after a run's duration its last sample is
// taken: after the last sends, inside the fleet's 200 ms drain quiet time.
const finalScrapeDelay = 120 * time.Millisecond

// RunResult is one fleet run as the fleet itself saw it.
type RunResult struct {
	Scenario string
	Repeat   int
	Fleet    fleet.Summary
}

// Result is what a comparison produced.
type Result struct {
	Dir         string
	Summary     report.Summary
	Runs        []RunResult
	Interrupted bool
}

// comparison is one Run's state, the driving goroutine's.
type comparison struct {
	*driver
	input   report.Input
	results []RunResult
}

// Run runs every scenario and repeat, then writes the report. When ctx
// ends early (Ctrl-C) the run in progress stops cleanly, the rest are
// skipped, and the report of what ran is still written. The error is set
// when nothing could run, a run read nothing (no login, or no server
// metrics that were asked for: the comparison stops there), or the report
// could not be written.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.CheckCompare(); err != nil {
		return Result{}, err
	}
	d, err := newDriver(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	c := &comparison{driver: d}
	c.input = report.Input{
		Title:     fmt.Sprintf("reprise compare: N:N vs 1:N, %d clients, %d senders", cfg.Fleet.Clients, cfg.Senders),
		Generated: time.Now(),
		Params:    c.params(),
		SLO:       &cfg.SLO,
	}
	if w := c.noServerMetrics(); w != "" {
		c.input.Warnings = append(c.input.Warnings, w)
	}
	runErr := c.runAll(ctx)
	res := Result{Dir: cfg.Out, Runs: c.results, Interrupted: ctx.Err() != nil}
	if len(c.input.Runs) == 0 {
		if runErr == nil {
			runErr = errors.New("interrupted before the first run")
		}
		return res, runErr
	}
	if res.Interrupted {
		c.input.Warnings = append(c.input.Warnings, "interrupted: the report covers only the runs listed")
	}
	if runErr != nil {
		c.input.Warnings = append(c.input.Warnings, "stopped early: "+runErr.Error())
	}
	sum, err := report.Write(cfg.Out, c.input)
	res.Summary = sum
	if err != nil {
		return res, err
	}
	return res, runErr
}

// roomSize says --room-size as the rooms it makes: 0 is one room of
// everyone, not rooms of none.
func roomSize(size, clients int) string {
	if size <= 0 || size >= clients {
		return fmt.Sprintf("one room of all %d clients", clients)
	}
	return fmt.Sprintf("%d (%d rooms)", size, (clients+size-1)/size)
}

func (c *comparison) params() []report.Param {
	f := c.cfg.Fleet
	p := []report.Param{
		{Name: "capture", Value: f.Capture},
		{Name: "clients (N)", Value: strconv.Itoa(f.Clients)},
		{Name: "senders in 1:N (K)", Value: strconv.Itoa(c.cfg.Senders)},
		{Name: "loop", Value: orDash(f.Loop)},
		{Name: "login interval", Value: f.LoginInterval.String()},
		{Name: "pause", Value: fmt.Sprintf("%v every %d logins", f.Pause, f.PauseEvery)},
		{Name: "room", Value: orDash(f.Room)},
		{Name: "room size", Value: roomSize(f.RoomSize, f.Clients)},
		{Name: "duration per run", Value: f.Duration.String()},
		{Name: "repeats", Value: strconv.Itoa(c.cfg.Repeat)},
		{Name: "order", Value: "each repeat runs N:N then 1:N, so drift of the machine hits both alike"},
		{Name: "target", Value: f.Target},
		c.relayMetricsParam(),
		{Name: "fleet", Value: c.runner.Describe()},
		{Name: "sampling interval", Value: c.cfg.Interval.String()},
		{Name: "host", Value: fmt.Sprintf("%d CPUs, GOMAXPROCS %d, %s/%s, %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())},
	}
	p = append(p, c.relayProcessParam()...)
	return append(p, c.cfg.Params...)
}

// runAll runs repeat × {N:N, 1:N}, waiting for the relay to drain before
// each run.
func (c *comparison) runAll(ctx context.Context) error {
	scenarios := []struct {
		name    string
		senders int
	}{{NN, 0}, {OneN, c.cfg.Senders}}
	total := 2 * c.cfg.Repeat
	n := 0
	for rep := 1; rep <= c.cfg.Repeat; rep++ {
		for _, sc := range scenarios {
			if ctx.Err() != nil {
				return nil
			}
			n++
			var warnings []string
			if w := c.waitDrained(ctx, "before "+label(sc.name, rep)); w != "" {
				warnings = append(warnings, w)
			}
			fmt.Fprintf(c.out, "compare: run %d/%d: %s (%d clients, %s)\n", n, total, label(sc.name, rep),
				c.cfg.Fleet.Clients, sendersText(sc.senders))
			if err := c.runOne(ctx, sc.name, sc.senders, rep, warnings); err != nil {
				return err
			}
		}
	}
	// After the last run too, so a relay that never lets go shows up.
	if w := c.waitDrained(ctx, "after the last run"); w != "" {
		c.input.Warnings = append(c.input.Warnings, w)
	}
	return nil
}

func label(scenario string, rep int) string { return fmt.Sprintf("%s #%d", scenario, rep) }

func sendersText(k int) string {
	if k == 0 {
		return "all send"
	}
	return fmt.Sprintf("%d send, the rest receive", k)
}

// runOne runs one scenario's fleet while it is sampled with the server.
func (c *comparison) runOne(ctx context.Context, scenario string, senders, rep int, warnings []string) error {
	lbl := label(scenario, rep)
	fc := c.cfg.Fleet
	fc.Senders = senders
	fc.Out = launch.Prefixed(c.out, "["+lbl+"] ")
	fc.Log = c.log.Named("fleet")
	var drops0 *report.KernelDrops
	if c.localHost {
		if k, err := report.ReadKernelDrops(); err == nil {
			drops0 = &k
		}
	}
	r, err := c.runFleet(ctx, fc, fc.Duration+finalScrapeDelay, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", lbl, err)
	}
	run := runRecord(scenario, rep, fc.Clients, r, warnings)
	if r.sum.TLS != nil {
		fmt.Fprintf(c.out, "[%s] %s\n", lbl, tlsLine(r.sum.TLS))
	}
	if drops0 != nil {
		if k, err := report.ReadKernelDrops(); err == nil {
			d := k.Sub(*drops0)
			run.KernelDrops = &d
		}
	}
	// A run that read nothing ends the comparison: the next would not
	// read more (a target that accepts and never answers).
	var empty error
	if ctx.Err() != nil {
		run.Warnings = append(run.Warnings, "interrupted before its duration ended")
	} else {
		empty = c.checkRead(lbl, r)
	}
	c.input.Runs = append(c.input.Runs, run)
	c.results = append(c.results, RunResult{Scenario: scenario, Repeat: rep, Fleet: r.sum})
	// The peak as the report's table has it: one source for both.
	peak := report.AnalyzeRun(run).MaxLoggedIn
	fmt.Fprintf(c.out, "compare: %s done: %s logged in at peak; the clients sent %d messages and received %d\n",
		lbl, num(peak, 0), r.sum.MessagesSent, r.sum.MessagesReceived)
	return empty
}

// waitDrained polls the relay until it reports zero connections, for at
// most DrainTimeout; it returns a warning when the relay did not get there
// (or could not be asked), "" when it did.
func (c *comparison) waitDrained(ctx context.Context, when string) string {
	if ctx.Err() != nil || c.relayURL == "" {
		// Interrupted: the user wants the report, not a wait. Without
		// server metrics there is no one to ask (the report says so).
		return ""
	}
	s, err := report.NewSampler(report.SamplerConfig{Targets: c.serverTargets(), Interval: c.cfg.Interval})
	if err != nil {
		return err.Error()
	}
	deadline := time.Now().Add(c.cfg.DrainTimeout)
	var last report.Snapshot
	var lastErr error
	for {
		last, lastErr = s.Scrape(ctx)
		if lastErr == nil && last.Relay.Connections == 0 {
			return ""
		}
		if time.Now().After(deadline) || !sleep(ctx, 200*time.Millisecond) {
			break
		}
	}
	if lastErr != nil {
		return fmt.Sprintf("relay not confirmed at 0 connections %s: %v", when, lastErr)
	}
	return fmt.Sprintf("relay not at 0 connections %s: %.0f still open after %v", when, last.Relay.Connections, c.cfg.DrainTimeout)
}

// DefaultOut is the report directory for a run of kind ("compare",
// "capacity") started at t.
func DefaultOut(kind string, t time.Time) string {
	return "out/" + kind + "-" + t.Format("20060102-150405")
}
