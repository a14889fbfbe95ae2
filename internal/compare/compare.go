// Package compare runs `replay compare`: the same recorded session and the
// same login ramp replayed as N:N (every client plays the loop) and as 1:N
// (K senders, the rest receive only), each repeated, against one relay;
// it samples the relay's and the fleet's /metrics every second, waits for
// the relay to drop back to zero connections between runs, and hands
// everything to internal/report. It also runs `replay capacity`
// (capacity.go): one fleet stepping up level by level, each held and
// judged against the objectives, until one breaks.
//
// It is not the fleet (internal/fleet) nor the report's maths and pictures
// (internal/report), and it starts no relay: the command starts one as a
// child process (internal/relayproc) and passes its address. It owns the
// order of runs and the goroutines that sample while a fleet runs.
package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/profile"
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

// ErrBadConfig marks a configuration compare refuses before running.
var ErrBadConfig = errors.New("bad configuration")

// Config is one comparison.
type Config struct {
	// Fleet is the run every scenario shares: capture, clients, loop, ramp,
	// target (required). Its Senders is ignored (N:N has none, 1:N has Senders below),
	// its Metrics replaced by a free loopback port, its Duration required.
	Fleet fleet.Config
	// Senders is K, the clients that send in 1:N.
	Senders int
	// Repeat runs each scenario this many times (default 1).
	Repeat int
	// Out is the report directory.
	Out string
	// RelayMetrics is the relay's /metrics URL; empty means
	// http://<target host>:9400/metrics for the reprise profile, and no
	// server metrics at all for a server of another protocol (mosquitto,
	// redis-server: they serve no relay /metrics), whose server columns are
	// then absent from the report.
	RelayMetrics string
	// RelayProcess describes the relay when the command started it as a
	// child process (its command line and pid), for the report; empty for
	// a --target of the user's.
	RelayProcess string
	// Interval is the sampling period (default 1 s).
	Interval time.Duration
	// DrainTimeout bounds the wait for the relay to reach zero
	// connections between runs (default 30 s).
	DrainTimeout time.Duration
	// Progress receives one line per event and the fleet's progress lines;
	// nil discards them.
	Progress io.Writer
	// Log receives debug events; nil discards them.
	Log *zap.Logger
	// Params are extra parameters to show in the report (the command line).
	Params []report.Param

	// Shards, over 1, runs each scenario's fleet as that many local
	// processes of Exe (the replay binary) with RunArgs (the run's fleet
	// flags as given), started together at a barrier and sampled each; the
	// run's summary is their merge (fleet.Merge).
	Shards  int
	Exe     string
	RunArgs []string
}

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

// runner holds one comparison's state.
type runner struct {
	cfg       Config
	out       io.Writer
	log       *zap.Logger
	relayURL  string // "": no server metrics (not the reprise relay)
	localHost bool   // relay on this machine: kernel drops mean something
	input     report.Input
	results   []RunResult
}

func (c *Config) check() error {
	f := c.Fleet
	switch {
	case f.Target == "":
		return fmt.Errorf("%w: no target: start a relay and pass its address", ErrBadConfig)
	case f.Clients < 2:
		return fmt.Errorf("%w: --clients %d: a comparison needs at least 2", ErrBadConfig, f.Clients)
	case c.Senders < 1 || c.Senders >= f.Clients:
		return fmt.Errorf("%w: --senders %d: 1:N needs 1 to %d senders (fewer than --clients)", ErrBadConfig, c.Senders, f.Clients-1)
	case f.Duration <= 0:
		return fmt.Errorf("%w: --duration is required: each scenario runs that long", ErrBadConfig)
	case f.ReceiveOnly:
		return fmt.Errorf("%w: --receive-only makes both scenarios the same", ErrBadConfig)
	case c.Repeat < 0:
		return fmt.Errorf("%w: --repeat %d", ErrBadConfig, c.Repeat)
	case c.Out == "":
		return fmt.Errorf("%w: no output directory", ErrBadConfig)
	case c.Shards > 1 && c.Exe == "":
		return fmt.Errorf("%w: --shards needs the replay binary", ErrBadConfig)
	}
	return nil
}

func (c *Config) withDefaults() {
	if c.Repeat == 0 {
		c.Repeat = 1
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
}

// Run runs every scenario and repeat, then writes the report. When ctx
// ends early (Ctrl-C) the run in progress stops cleanly, the rest are
// skipped, and the report of what ran is still written. The error is set
// when nothing could run, or the report could not be written.
func Run(ctx context.Context, cfg Config) (Result, error) {
	cfg.withDefaults()
	if err := cfg.check(); err != nil {
		return Result{}, err
	}
	r := &runner{cfg: cfg, out: cfg.Progress, log: cfg.Log}
	if err := r.useTarget(); err != nil {
		return Result{}, err
	}
	r.input = report.Input{
		Title:     fmt.Sprintf("reprise compare: N:N vs 1:N, %d clients, %d senders", cfg.Fleet.Clients, cfg.Senders),
		Generated: time.Now(),
		Params:    r.params(),
	}
	if w := r.noServerMetrics(); w != "" {
		r.input.Warnings = append(r.input.Warnings, w)
	}
	runErr := r.runAll(ctx)
	res := Result{Dir: cfg.Out, Runs: r.results, Interrupted: ctx.Err() != nil}
	if len(r.input.Runs) == 0 {
		if runErr == nil {
			runErr = errors.New("compare: interrupted before the first run")
		}
		return res, runErr
	}
	if res.Interrupted {
		r.input.Warnings = append(r.input.Warnings, "interrupted: the report covers only the runs listed")
	}
	if runErr != nil {
		r.input.Warnings = append(r.input.Warnings, "stopped early: "+runErr.Error())
	}
	sum, err := report.Write(cfg.Out, r.input)
	res.Summary = sum
	if err != nil {
		return res, fmt.Errorf("compare: %w", err)
	}
	return res, runErr
}

// isReprise reports whether a fleet's profile is the bundled relay's
// protocol, the only server whose /metrics compare knows by default.
func isReprise(name string) bool { return name == "" || name == profile.Default }

// serverTargets are the server's metrics to sample: none when it has no
// relay /metrics.
func (r *runner) serverTargets() []report.Target {
	if r.relayURL == "" {
		return nil
	}
	return []report.Target{{Role: report.RoleRelay, URL: r.relayURL}}
}

// noServerMetrics is the report's note for a run without server metrics;
// "" when the server is sampled.
func (r *runner) noServerMetrics() string {
	if r.relayURL != "" {
		return ""
	}
	return fmt.Sprintf("no server metrics: the target speaks --profile %s and --relay-metrics was not given, so the server's columns "+
		"(its messages in and delivered, send Gbps, its CPU, slow-consumer disconnects, connections between runs) are absent; "+
		"logins, latency, drops and CPU are the fleet's view", r.cfg.Fleet.Profile)
}

// relayMetricsParam is the report's line for the server's metrics.
func (r *runner) relayMetricsParam() report.Param {
	if r.relayURL == "" {
		return report.Param{Name: "relay metrics", Value: "none (not the reprise relay; give --relay-metrics for a server that serves them)"}
	}
	return report.Param{Name: "relay metrics", Value: r.relayURL}
}

// useTarget works out the relay's metrics URL and whether it runs on
// this machine.
func (r *runner) useTarget() error {
	host, _, err := net.SplitHostPort(r.cfg.Fleet.Target)
	if err != nil {
		return fmt.Errorf("%w: --target %q: %v", ErrBadConfig, r.cfg.Fleet.Target, err)
	}
	r.relayURL = r.cfg.RelayMetrics
	if r.relayURL == "" && isReprise(r.cfg.Fleet.Profile) {
		r.relayURL = "http://" + net.JoinHostPort(host, "9400") + "/metrics"
	}
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		r.localHost = true
	}
	return nil
}

func (r *runner) params() []report.Param {
	f := r.cfg.Fleet
	p := []report.Param{
		{Name: "capture", Value: f.Capture},
		{Name: "clients (N)", Value: strconv.Itoa(f.Clients)},
		{Name: "senders in 1:N (K)", Value: strconv.Itoa(r.cfg.Senders)},
		{Name: "loop", Value: orDash(f.Loop)},
		{Name: "login interval", Value: f.LoginInterval.String()},
		{Name: "pause", Value: fmt.Sprintf("%v every %d logins", f.Pause, f.PauseEvery)},
		{Name: "room", Value: orDash(f.Room)},
		{Name: "room size", Value: strconv.Itoa(f.RoomSize)},
		{Name: "duration per run", Value: f.Duration.String()},
		{Name: "repeats", Value: strconv.Itoa(r.cfg.Repeat)},
		{Name: "order", Value: "each repeat runs N:N then 1:N, so drift of the machine hits both alike"},
		{Name: "target", Value: f.Target},
		r.relayMetricsParam(),
		{Name: "sampling interval", Value: r.cfg.Interval.String()},
		{Name: "host", Value: fmt.Sprintf("%d CPUs, GOMAXPROCS %d, %s/%s, %s", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())},
	}
	if r.cfg.RelayProcess != "" {
		p = append(p, report.Param{Name: "relay process", Value: r.cfg.RelayProcess + "; its CPU and memory are its own, but it shares the host's CPUs with the fleet"})
	}
	return append(p, r.cfg.Params...)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// runAll runs repeat × {N:N, 1:N}, waiting for the relay to drain before
// each run.
func (r *runner) runAll(ctx context.Context) error {
	scenarios := []struct {
		name    string
		senders int
	}{{NN, 0}, {OneN, r.cfg.Senders}}
	total := 2 * r.cfg.Repeat
	n := 0
	for rep := 1; rep <= r.cfg.Repeat; rep++ {
		for _, sc := range scenarios {
			if ctx.Err() != nil {
				return nil
			}
			n++
			var warnings []string
			if w := r.waitDrained(ctx, "before "+label(sc.name, rep)); w != "" {
				warnings = append(warnings, w)
			}
			fmt.Fprintf(r.out, "compare: run %d/%d: %s (%d clients, %s)\n", n, total, label(sc.name, rep),
				r.cfg.Fleet.Clients, sendersText(sc.senders))
			if err := r.runOne(ctx, sc.name, sc.senders, rep, warnings); err != nil {
				return err
			}
		}
	}
	// After the last run too, so a relay that never lets go shows up.
	if w := r.waitDrained(ctx, "after the last run"); w != "" {
		r.input.Warnings = append(r.input.Warnings, w)
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

// runOne runs one fleet while a sampler scrapes it and the relay.
func (r *runner) runOne(ctx context.Context, scenario string, senders, rep int, warnings []string) error {
	cfg := r.cfg.Fleet
	cfg.Senders = senders
	// Sampled in process (fleet.Gatherer): no HTTP server, and the last
	// sample can be read whenever it comes.
	cfg.Metrics = ""
	cfg.Out = &prefixWriter{w: r.out, prefix: "[" + label(scenario, rep) + "] "}
	cfg.Log = r.log.Named("fleet")
	f, err := r.newFleet(ctx, cfg, label(scenario, rep))
	if err != nil {
		return fmt.Errorf("%s: %w", label(scenario, rep), err)
	}
	targets := append(r.serverTargets(), f.targets...)
	sampler, err := report.NewSampler(report.SamplerConfig{Targets: targets, Interval: r.cfg.Interval})
	if err != nil {
		f.close()
		return err
	}
	var drops0 *report.KernelDrops
	if r.localHost {
		if k, err := report.ReadKernelDrops(); err == nil {
			drops0 = &k
		}
	}
	// The sampler takes its last scrape just after the run's duration,
	// when the sends have stopped but the fleet is still draining (it
	// waits for 200 ms without deliveries before its clients leave), or
	// when the fleet returns early (Ctrl-C).
	var start time.Time
	if f.start != nil {
		// Shards: their counters are zero until their common start.
		if start, err = f.start(ctx); err != nil {
			_, runErr := f.run(ctx)
			return fmt.Errorf("%s: shards did not start: %w", label(scenario, rep), errors.Join(err, runErr))
		}
	}
	base := r.baseline(ctx, f.targets)
	if !start.IsZero() {
		time.Sleep(time.Until(start))
		base.At = start
	}
	started := base.At
	sampCtx, stopSampling := context.WithDeadline(ctx, started.Add(cfg.Duration+finalScrapeDelay))
	defer stopSampling()
	serc := make(chan report.Series, 1)
	go func() { serc <- sampler.RunFrom(sampCtx, base) }()
	sum, runErr := f.run(ctx)
	stopSampling()
	ser := <-serc
	if runErr != nil {
		return fmt.Errorf("%s: %w", label(scenario, rep), runErr)
	}
	// Deliveries go on arriving during the fleet's drain, after the last
	// sample: a sliver on a quiet host, but seconds of them on a loaded
	// one (TestCompareBinary sampled 74k of the fleet's 204k received).
	// The run's totals come from the counters as the fleet ended; the
	// points stay as sampled. Shards that exited no longer answer: their
	// totals stay at the last sample.
	if end, err := sampler.Scrape(ctx); err == nil {
		ser.Last = end
	}
	run := report.Run{Scenario: scenario, Repeat: rep, Started: started, Series: ser, Warnings: warnings}
	if drops0 != nil {
		if k, err := report.ReadKernelDrops(); err == nil {
			d := k.Sub(*drops0)
			run.KernelDrops = &d
		}
	}
	run.Warnings = append(run.Warnings, collapse(sum.Warnings, "fleet: ")...)
	if len(sum.Shards) > 0 {
		run.Warnings = append(run.Warnings, shardLine(sum))
	}
	if ctx.Err() != nil {
		run.Warnings = append(run.Warnings, "interrupted before its duration ended")
	}
	if js, err := json.Marshal(sum); err == nil {
		run.FleetSummary = js
	}
	r.input.Runs = append(r.input.Runs, run)
	r.results = append(r.results, RunResult{Scenario: scenario, Repeat: rep, Fleet: sum})
	fmt.Fprintf(r.out, "compare: %s done: %d logged in at peak, %d messages sent, %d received\n",
		label(scenario, rep), sum.PeakLoggedIn, sum.MessagesSent, sum.MessagesReceived)
	return nil
}

// collapse keeps the first of each kind of warning (the fleet repeats its
// saturation warning at every progress line, with new numbers) and says
// how often it came.
func collapse(warnings []string, prefix string) []string {
	const kindLen = 40
	kind := func(w string) string {
		if len(w) > kindLen {
			return w[:kindLen]
		}
		return w
	}
	count := map[string]int{}
	var order []string
	first := map[string]string{}
	for _, w := range warnings {
		k := kind(w)
		if count[k] == 0 {
			order = append(order, k)
			first[k] = w
		}
		count[k]++
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		w := prefix + first[k]
		if n := count[k]; n > 1 {
			w += fmt.Sprintf(" (first of %d such warnings)", n)
		}
		out = append(out, w)
	}
	return out
}

// baseline is the snapshot a run's counters start from: the relay as it
// is now, and the fleet before it started (counters at zero, its process
// CPU and the host's as they are now; summed over shards).
func (r *runner) baseline(ctx context.Context, fleetTargets []report.Target) report.Snapshot {
	var base report.Snapshot
	for _, ts := range [][]report.Target{fleetTargets, r.serverTargets()} {
		if len(ts) == 0 {
			continue
		}
		t := ts[0]
		s, err := report.NewSampler(report.SamplerConfig{Targets: ts, Interval: r.cfg.Interval})
		var snap report.Snapshot
		if err == nil {
			snap, err = s.Scrape(ctx)
		}
		if err != nil {
			// Without a baseline the sampler counts rates from its first
			// scrape, and the run reports the failed scrape.
			fmt.Fprintf(r.out, "compare: %s baseline: %v\n", t.Role, err)
			continue
		}
		if t.Role == report.RoleFleet {
			base.Fleet = snap.Fleet
		} else {
			base.Relay = snap.Relay
		}
	}
	base.At = time.Now()
	return base
}

// waitDrained polls the relay until it reports zero connections, for at
// most DrainTimeout; it returns a warning when the relay did not get there
// (or could not be asked), "" when it did.
func (r *runner) waitDrained(ctx context.Context, when string) string {
	if ctx.Err() != nil || r.relayURL == "" {
		// Interrupted: the user wants the report, not a wait. Without
		// server metrics there is no one to ask (the report says so).
		return ""
	}
	s, err := report.NewSampler(report.SamplerConfig{
		Targets:  r.serverTargets(),
		Interval: r.cfg.Interval,
	})
	if err != nil {
		return err.Error()
	}
	deadline := time.Now().Add(r.cfg.DrainTimeout)
	var last report.Snapshot
	var lastErr error
	for {
		last, lastErr = s.Scrape(ctx)
		if lastErr == nil && last.Relay.Connections == 0 {
			return ""
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if lastErr != nil {
		return fmt.Sprintf("relay not confirmed at 0 connections %s: %v", when, lastErr)
	}
	return fmt.Sprintf("relay not at 0 connections %s: %.0f still open after %v", when, last.Relay.Connections, r.cfg.DrainTimeout)
}

// prefixWriter prefixes every line (the fleet's progress) with the run it
// belongs to. Lines are written whole by the fleet; a partial one is
// prefixed once.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	mid    bool
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var buf []byte
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if line == "" {
			continue
		}
		if !p.mid {
			buf = append(buf, p.prefix...)
		}
		buf = append(buf, line...)
		p.mid = !strings.HasSuffix(line, "\n")
	}
	if _, err := p.w.Write(buf); err != nil {
		return 0, err
	}
	return len(b), nil
}

// DefaultOut is the report directory for a comparison started at t.
func DefaultOut(t time.Time) string {
	return "out/compare-" + t.Format("20060102-150405")
}
