package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/launch"
	"github.com/reprise-harness/reprise/internal/report"
)

// CapacityResult is what a capacity search produced.
type CapacityResult struct {
	Dir         string
	Summary     report.Summary
	Capacity    report.Capacity
	Fleet       fleet.Summary
	Interrupted bool
}

// ErrNoLevel marks a search in which no level completed: it answered
// nothing.
var ErrNoLevel = errors.New("no level completed")

// search is one capacity search's state, the driving goroutine's: the
// fleet hands it each level (atLevel) on that goroutine too.
type search struct {
	*driver
	steps    []int
	scenario string
	// sameHost: a server on this host without metrics of its own, whose
	// host's CPU idle is the one the fleet measures.
	sameHost bool
	levels   []report.Level   // judged so far
	prevEnd  *report.Snapshot // the last judged level's end (nil: none yet)
}

// RunCapacity runs the search and writes its report. When ctx ends early
// (Ctrl-C) the fleet stops, and the answer covers the levels that
// completed. The error is set when the search could not run, read
// nothing (no login, no server metrics that were asked for, no level
// completed), or the report could not be written.
func RunCapacity(ctx context.Context, cfg Config) (CapacityResult, error) {
	if err := cfg.CheckCapacity(); err != nil {
		return CapacityResult{}, err
	}
	d, err := newDriver(ctx, cfg)
	if err != nil {
		return CapacityResult{}, err
	}
	s := &search{driver: d, steps: levels(cfg.Start, cfg.Step, cfg.Max), scenario: scenarioName(cfg.Fleet)}
	s.sameHost = d.relayURL == "" && d.localHost
	fmt.Fprintf(d.out, "capacity: %s, levels %v, hold %v each, objectives %s\n", s.scenario, s.steps, cfg.Hold, cfg.SLO.String())
	r, err := d.runFleet(ctx, s.fleetConfig(), 0, s.atLevel)
	if err != nil {
		return CapacityResult{}, err
	}
	res, err := s.write(ctx, r)
	if err != nil || res.Interrupted {
		return res, err
	}
	if err := r.sum.CheckLoggedIn(); err != nil {
		return res, fmt.Errorf("capacity: %w", err)
	}
	if len(s.levels) == 0 {
		why := "the fleet ended before its first level was judged"
		if r.series.LastError != "" {
			why = "the metrics did not answer at the first level's hold: " + r.series.LastError
		}
		return res, fmt.Errorf("capacity: %w: %s", ErrNoLevel, why)
	}
	return res, d.checkRead("capacity", r)
}

// levels are the client counts of each step: start, start+step, ..., max.
func levels(start, step, max int) []int {
	var out []int
	for n := start; n < max; n += step {
		out = append(out, n)
	}
	return append(out, max)
}

// goOn is the decision at a judged level: the search goes on while the
// level held and it was not the last.
func goOn(l report.Level, max int) bool { return l.OK() && l.Clients < max }

// searchBound bounds a search's fleet in case a level never ends: the
// ramp, its pauses, every hold twice, and time for slow scrapes.
func searchBound(f fleet.Config, steps []int, hold time.Duration) time.Duration {
	clients := steps[len(steps)-1]
	return time.Duration(clients)*f.LoginInterval + time.Duration(len(steps))*(2*hold+10*time.Second) +
		time.Duration(clients/max(f.PauseEvery, 1))*f.Pause
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

// fleetConfig is the search's fleet: Max clients whose ramp waits at
// every level.
func (s *search) fleetConfig() fleet.Config {
	fc := s.cfg.Fleet
	fc.Clients, fc.Levels = s.cfg.Max, s.steps
	// For the progress line's time to the last login: each level waits its hold and a last scrape.
	fc.LevelHold = s.cfg.Hold + 2*s.cfg.Interval
	fc.Duration = searchBound(fc, s.steps, s.cfg.Hold)
	fc.Out = launch.Prefixed(s.out, "[fleet] ")
	fc.Log = s.log.Named("fleet")
	return fc
}

// atLevel holds and judges a level the whole fleet waits at; true lets
// the fleet go on to the next.
func (s *search) atLevel(ctx context.Context, l launch.Level, smp *report.Sampler, base report.Snapshot) bool {
	start := base
	if s.prevEnd != nil {
		start = *s.prevEnd
	}
	lv, end, err := holdLevel(ctx, smp, l.At, s.cfg.Hold, s.cfg.Interval, levelFrame{start: start, t0: base.At, clients: l.Attempts, sameHost: s.sameHost}, s.cfg.SLO)
	if err != nil {
		if ctx.Err() == nil {
			fmt.Fprintf(s.out, "capacity: level %d not judged: %v\n", l.Attempts, err)
		}
		return false // interrupted, or the metrics stopped answering
	}
	s.levels = append(s.levels, lv)
	s.prevEnd = &end
	printLevel(s.out, lv)
	return goOn(lv, s.cfg.Max)
}

// levelFrame is what a level is judged against: the snapshot it starts
// from, the run's start, its clients, and whether the server shares the
// fleet's host.
type levelFrame struct {
	start    report.Snapshot
	t0       time.Time
	clients  int
	sameHost bool
}

// window is the level's window of samples: from its start through the
// snapshot a quarter into the hold (h) to the hold's end (e).
func (f levelFrame) window(h, e report.Snapshot) report.LevelWindow {
	since := func(t time.Time) float64 { return t.Sub(f.t0).Seconds() }
	return report.LevelWindow{Clients: f.clients, Start: f.start, Hold: h, End: e,
		FromS: since(f.start.At), HoldFromS: since(h.At), ToS: since(e.At), ServerOnFleetHost: f.sameHost}
}

// holdLevel holds a level whose ramp ended at rampEnd: it samples a
// quarter into the hold (the last logins settle first) and at its end,
// and judges the level. The error says why it could not: ctx ended, or
// the metrics did not answer.
func holdLevel(ctx context.Context, s *report.Sampler, rampEnd time.Time, hold, interval time.Duration, f levelFrame, slo report.SLO) (report.Level, report.Snapshot, error) {
	// A level must not be lost to slow answers on a busy host: each
	// snapshot is tried again for as long as a hold, at least 30
	// intervals (a shard built with -race on a host at a load of 35 per
	// 2 CPUs took over 5 s, the sampler's timeout, to answer).
	patience := max(hold, 30*interval)
	h, err := scrapeAt(ctx, s, rampEnd.Add(hold/4), interval, patience)
	if err != nil {
		return report.Level{}, h, err
	}
	e, err := scrapeAt(ctx, s, rampEnd.Add(hold), interval, patience)
	if err != nil {
		return report.Level{}, e, err
	}
	return report.EvaluateLevel(f.window(h, e), slo), e, nil
}

// scrapeAt takes a snapshot at t, trying again every half interval while
// a scrape fails, for at most patience.
func scrapeAt(ctx context.Context, s *report.Sampler, t time.Time, interval, patience time.Duration) (report.Snapshot, error) {
	if !sleep(ctx, time.Until(t)) {
		return report.Snapshot{}, ctx.Err()
	}
	for {
		snap, err := s.Scrape(ctx)
		if err == nil {
			return snap, nil
		}
		if time.Since(t) > patience || !sleep(ctx, interval/2) {
			return snap, err
		}
	}
}

// write decides the answer from the judged levels and the series, and
// writes the report.
func (s *search) write(ctx context.Context, r sampledRun) (CapacityResult, error) {
	cfg := s.cfg
	capa := report.Decide(s.scenario, cfg.Max, s.levels, r.series.Points, cfg.SLO)
	run := runRecord(s.scenario, 1, cfg.Max, r, nil)
	if len(r.sum.Shards) > 0 {
		fmt.Fprintln(s.out, "capacity: "+shardLine(r.sum))
	}
	if r.sum.TLS != nil {
		fmt.Fprintln(s.out, "capacity: "+tlsLine(r.sum.TLS))
	}
	res := CapacityResult{Dir: cfg.Out, Capacity: capa, Fleet: r.sum, Interrupted: ctx.Err() != nil}
	in := report.Input{
		Title:     fmt.Sprintf("reprise capacity: %s, %d to %d clients by %d, hold %v", s.scenario, cfg.Start, cfg.Max, cfg.Step, cfg.Hold),
		Generated: time.Now(),
		Params:    append(s.params(), cfg.Params...),
		Runs:      []report.Run{run},
		SLO:       &cfg.SLO,
		Capacity:  &capa,
	}
	if w := s.noServerMetrics(); w != "" {
		in.Warnings = append(in.Warnings, w)
		if cfg.SLO.MinIdlePct >= 0 && !s.sameHost {
			in.Warnings = append(in.Warnings, "objective idle skipped: the server's host CPU is neither sampled nor this host's")
		}
	}
	if res.Interrupted {
		in.Warnings = append(in.Warnings, "interrupted: the answer covers only the levels listed")
	}
	sum, err := report.Write(cfg.Out, in)
	res.Summary = sum
	return res, err
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

func (s *search) params() []report.Param {
	cfg := s.cfg
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
		s.relayMetricsParam(),
		{Name: "fleet", Value: s.runner.Describe()},
		{Name: "sampling interval", Value: cfg.Interval.String()},
	}
	return append(p, s.relayProcessParam()...)
}
