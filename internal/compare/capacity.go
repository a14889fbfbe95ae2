package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
)

// CapacityConfig is one capacity search (`replay capacity`): one fleet
// whose ramp steps up Start, Start+Step, ... Max clients, holding each
// level for Hold, until a level breaks SLO.
type CapacityConfig struct {
	// Fleet is the run: capture, loop, senders or receive-only, ramp
	// (login interval, pauses), target (required). Its Clients, Duration,
	// Levels, LevelHold and Metrics are set here.
	Fleet            fleet.Config
	Start, Step, Max int
	Hold             time.Duration
	SLO              report.SLO
	// Out, RelayMetrics, RelayProcess, Interval, Progress, Log and Params
	// are as in Config.
	Out          string
	RelayMetrics string
	RelayProcess string
	Interval     time.Duration
	Progress     io.Writer
	Log          *zap.Logger
	Params       []report.Param
	// Shards, Exe and RunArgs run the fleet as local shard processes, as
	// in Config: they wait a fixed time at each level (fleet.LevelWait)
	// and this process judges each level on their common schedule.
	Shards  int
	Exe     string
	RunArgs []string
}

// CapacityResult is what a capacity search produced.
type CapacityResult struct {
	Dir         string
	Summary     report.Summary
	Capacity    report.Capacity
	Fleet       fleet.Summary
	Interrupted bool
}

func (c *CapacityConfig) check() error {
	switch {
	case c.Fleet.Target == "":
		return fmt.Errorf("%w: no target: start a relay and pass its address", ErrBadConfig)
	case c.Start < 1 || c.Step < 1 || c.Max < c.Start:
		return fmt.Errorf("%w: --start %d --step %d --max %d: want 1 <= start <= max and step >= 1", ErrBadConfig, c.Start, c.Step, c.Max)
	case c.Hold <= 0:
		return fmt.Errorf("%w: --hold %v: must be positive", ErrBadConfig, c.Hold)
	case c.Out == "":
		return fmt.Errorf("%w: no output directory", ErrBadConfig)
	case c.Shards > 1 && c.Exe == "":
		return fmt.Errorf("%w: --shards needs the replay binary", ErrBadConfig)
	}
	return nil
}

// levels are the client counts of each step: Start, Start+Step, ..., Max.
func (c *CapacityConfig) levels() []int {
	var out []int
	for n := c.Start; n < c.Max; n += c.Step {
		out = append(out, n)
	}
	return append(out, c.Max)
}

// scenarioName says what the clients do.
func scenarioName(f fleet.Config) string {
	switch {
	case f.ReceiveOnly:
		return "receive-only"
	case f.Senders > 0:
		return OneN
	}
	return NN
}

// fleetDone is the fleet's return.
type fleetDone struct {
	sum fleet.Summary
	err error
}

// RunCapacity runs the search and writes its report. When ctx ends early
// (Ctrl-C) the fleet stops, and the answer covers the levels that
// completed.
func RunCapacity(ctx context.Context, cfg CapacityConfig) (CapacityResult, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if err := cfg.check(); err != nil {
		return CapacityResult{}, err
	}
	r := &runner{cfg: Config{Fleet: cfg.Fleet, RelayMetrics: cfg.RelayMetrics, Interval: cfg.Interval,
		Shards: cfg.Shards, Exe: cfg.Exe, RunArgs: cfg.RunArgs}, out: cfg.Progress, log: cfg.Log}
	if err := r.useTarget(); err != nil {
		return CapacityResult{}, err
	}
	steps := cfg.levels()
	scenario := scenarioName(cfg.Fleet)
	fc := cfg.Fleet
	fc.Clients, fc.Levels = cfg.Max, steps
	// A bound in case a level never ends: the ramp, every hold, and time
	// for slow scrapes.
	fc.Duration = time.Duration(cfg.Max)*fc.LoginInterval + time.Duration(len(steps))*(2*cfg.Hold+10*time.Second) +
		time.Duration(cfg.Max/max(fc.PauseEvery, 1))*fc.Pause
	fc.Metrics = "" // sampled in process
	fc.Out = &prefixWriter{w: cfg.Progress, prefix: "[fleet] "}
	fc.Log = cfg.Log.Named("fleet")
	fctx, stopFleet := context.WithCancel(ctx)
	defer stopFleet()
	sampCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	var sampler *report.Sampler
	var base report.Snapshot
	var levels []report.Level // written by the ramp's goroutine until the fleet returns
	levelStart := &base
	// A server on this host without metrics of its own: its host's CPU
	// idle is the one the fleet measures.
	sameHost := r.relayURL == "" && r.localHost
	judge := func(rctx context.Context, n int) bool {
		l, end, ok := holdLevel(rctx, sampler, cfg.Hold, cfg.Interval, *levelStart, base.At, n, cfg.SLO, sameHost)
		if !ok {
			return false // interrupted or the relay stopped answering
		}
		levels = append(levels, l)
		printLevel(cfg.Progress, l)
		if !l.OK() || n == cfg.Max {
			stopSampling()
			stopFleet()
			return false
		}
		levelStart = &end
		return true
	}
	if cfg.Shards > 1 {
		// The shards cannot wait for this process: each waits the hold
		// and time for the last scrape at every level.
		fc.LevelWait = cfg.Hold + 2*cfg.Interval
	} else {
		fc.AtLevel = func(rctx context.Context, n int) { judge(rctx, n) }
	}
	fr, err := r.newFleet(fctx, fc, "capacity")
	if err != nil {
		return CapacityResult{}, err
	}
	fmt.Fprintf(cfg.Progress, "capacity: %s, levels %v, hold %v each, objectives %s\n", scenario, steps, cfg.Hold, cfg.SLO.String())
	sampler, err = report.NewSampler(report.SamplerConfig{
		Targets:  append(append([]report.Target(nil), fr.targets...), r.serverTargets()...),
		Interval: cfg.Interval,
	})
	if err != nil {
		fr.close()
		return CapacityResult{}, err
	}
	var start time.Time
	if fr.start != nil {
		if start, err = fr.start(ctx); err != nil {
			stopFleet()
			_, runErr := fr.run(ctx)
			return CapacityResult{}, fmt.Errorf("capacity: shards did not start: %w", errors.Join(err, runErr))
		}
	}
	base = r.baseline(ctx, fr.targets)
	if fr.start != nil {
		// Shards: their counters are zero until their common start.
		time.Sleep(time.Until(start))
	} else {
		start = time.Now().Add(200 * time.Millisecond)
	}
	base.At = start
	serc := make(chan report.Series, 1)
	go func() { serc <- sampler.RunFrom(sampCtx, base) }()
	judged := make(chan struct{})
	if cfg.Shards > 1 {
		// The shards reach level k at LevelAt(k) on their common clock.
		go func() {
			defer close(judged)
			for k, n := range fc.Levels {
				if !sleep(fctx, time.Until(start.Add(fc.LevelAt(k)))) || !judge(fctx, n) {
					return
				}
			}
		}()
	} else {
		close(judged)
	}
	var fsum fleet.Summary
	var ferr error
	if fr.start != nil {
		fsum, ferr = fr.run(fctx)
	} else {
		fsum, ferr = fr.runAt(fctx, start)
	}
	stopSampling()
	stopFleet() // a shard that ended early ends the judging too
	<-judged
	ser := <-serc
	if ferr != nil && !errors.Is(ferr, context.Canceled) {
		return CapacityResult{}, ferr
	}
	fd := fleetDone{fsum, ferr}
	capa := report.Decide(scenario, cfg.Max, levels, ser.Points, cfg.SLO)
	run := report.Run{Scenario: scenario, Repeat: 1, Requested: cfg.Max, Started: start, Series: ser}
	run.Warnings = append(run.Warnings, collapse(fd.sum.Warnings, "fleet: ")...)
	if len(fd.sum.Shards) > 0 { // each shard's CPU idle, start and saturation
		run.Warnings = append(run.Warnings, shardLine(fd.sum))
		fmt.Fprintln(cfg.Progress, "capacity: "+shardLine(fd.sum))
	}
	if js, err := json.Marshal(fd.sum); err == nil {
		run.FleetSummary = js
	}
	res := CapacityResult{Dir: cfg.Out, Capacity: capa, Fleet: fd.sum, Interrupted: ctx.Err() != nil}
	in := report.Input{
		Title:     fmt.Sprintf("reprise capacity: %s, %d to %d clients by %d, hold %v", scenario, cfg.Start, cfg.Max, cfg.Step, cfg.Hold),
		Generated: time.Now(),
		Params:    append(r.capacityParams(cfg), cfg.Params...),
		Runs:      []report.Run{run},
		SLO:       &cfg.SLO,
		Capacity:  &capa,
	}
	if w := r.noServerMetrics(); w != "" {
		in.Warnings = append(in.Warnings, w)
		if cfg.SLO.MinIdlePct >= 0 && !sameHost {
			in.Warnings = append(in.Warnings, "objective idle skipped: the server's host CPU is neither sampled nor this host's")
		}
	}
	if res.Interrupted {
		in.Warnings = append(in.Warnings, "interrupted: the answer covers only the levels listed")
	}
	sum, err := report.Write(cfg.Out, in)
	res.Summary = sum
	if err != nil {
		return res, fmt.Errorf("capacity: %w", err)
	}
	return res, nil
}

// holdLevel holds a level whose ramp just ended: it samples a quarter into
// the hold (the last logins settle first) and at its end, and judges the
// level from its start (the previous level's end) to there. False when ctx
// ended first or the relay did not answer.
func holdLevel(ctx context.Context, s *report.Sampler, hold, interval time.Duration, start report.Snapshot, t0 time.Time,
	clients int, slo report.SLO, sameHost bool) (report.Level, report.Snapshot, bool) {
	rampEnd := time.Now()
	h, ok := scrapeAt(ctx, s, rampEnd.Add(hold/4), interval)
	if !ok {
		return report.Level{}, h, false
	}
	e, ok := scrapeAt(ctx, s, rampEnd.Add(hold), interval)
	if !ok {
		return report.Level{}, e, false
	}
	since := func(t time.Time) float64 { return t.Sub(t0).Seconds() }
	l := report.EvaluateLevel(report.LevelWindow{Clients: clients, Start: start, Hold: h, End: e,
		FromS: since(start.At), HoldFromS: since(h.At), ToS: since(e.At), ServerOnFleetHost: sameHost}, slo)
	return l, e, true
}

// scrapeAt takes a snapshot at t, trying again for a few intervals when a
// scrape fails (a level must not be lost to one slow answer).
func scrapeAt(ctx context.Context, s *report.Sampler, t time.Time, interval time.Duration) (report.Snapshot, bool) {
	if !sleep(ctx, time.Until(t)) {
		return report.Snapshot{}, false
	}
	for try := 0; ; try++ {
		snap, err := s.Scrape(ctx)
		if err == nil {
			return snap, true
		}
		if try == 4 || !sleep(ctx, interval/2) {
			return snap, false
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func printLevel(w io.Writer, l report.Level) {
	result := "held"
	if !l.OK() {
		result = "BROKE: " + l.Breaches[0].Text
		for _, b := range l.Breaches[1:] {
			result += "; " + b.Text
		}
	}
	fmt.Fprintf(w, "capacity: level %d: %s logged in, login failures %s %%, drops %s, p99 %s ms, relay idle %s %%, fleet idle %s %%: %s\n",
		l.Clients, num(l.LoggedIn, 0), num(l.LoginFailPct, 1), num(l.Drops, 0), num(l.LatencyP99Ms, 1),
		num(l.RelayCPUIdlePct, 0), num(l.FleetCPUIdlePct, 0), result)
}

func num(n report.Num, digits int) string {
	return strconv.FormatFloat(float64(n), 'f', digits, 64)
}

func (r *runner) capacityParams(cfg CapacityConfig) []report.Param {
	f := cfg.Fleet
	p := []report.Param{
		{Name: "capture", Value: f.Capture},
		{Name: "levels", Value: fmt.Sprintf("%d to %d clients by %d, each held %v", cfg.Start, cfg.Max, cfg.Step, cfg.Hold)},
		{Name: "objectives (--slo)", Value: cfg.SLO.String()},
		{Name: "senders", Value: sendersText(f.Senders)},
		{Name: "receive only", Value: strconv.FormatBool(f.ReceiveOnly)},
		{Name: "loop", Value: orDash(f.Loop)},
		{Name: "login interval", Value: f.LoginInterval.String()},
		{Name: "pause", Value: fmt.Sprintf("%v every %d logins", f.Pause, f.PauseEvery)},
		{Name: "target", Value: f.Target},
		r.relayMetricsParam(),
		{Name: "sampling interval", Value: cfg.Interval.String()},
	}
	if cfg.RelayProcess != "" {
		p = append(p, report.Param{Name: "relay process", Value: cfg.RelayProcess + "; its CPU and memory are its own, but it shares the host's CPUs with the fleet"})
	}
	return p
}
