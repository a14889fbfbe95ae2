package compare

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/launch"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/report"
)

// driver is what a comparison and a capacity search share: the config,
// the server's metrics, and how one fleet is run and sampled. All of its
// state is the driving goroutine's.
type driver struct {
	cfg       Config
	out       io.Writer
	log       *zap.Logger
	runner    launch.Runner
	relayURL  string // "": no server metrics (not the reprise relay)
	localHost bool   // server on this machine: kernel drops mean something
	// inProcess: the fleets run here, and every run plays loaded, the
	// run's source read and compiled once, by the first run.
	inProcess bool
	loaded    *profile.Loaded
}

// newDriver checks nothing: check comes first. It works out the server's
// metrics and reads them once: a server whose metrics were asked for and
// cannot be read fails here, before any run.
func newDriver(ctx context.Context, cfg Config) (*driver, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	d := &driver{cfg: cfg, out: cfg.Progress, log: cfg.Log, runner: cfg.Runner}
	if d.runner == nil {
		d.runner = launch.InProcess{}
		d.inProcess = true
	}
	host, err := hostPort(cfg.Fleet.Target)
	if err != nil {
		return nil, badf("--target %q: %v", cfg.Fleet.Target, err)
	}
	if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" {
		d.localHost = true
	}
	if d.relayURL, err = cfg.relayMetricsURL(); err != nil {
		return nil, err
	}
	if err := d.checkServerMetrics(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

// ErrServerMetrics marks server metrics that were asked for and could not
// be read.
var ErrServerMetrics = errors.New("server metrics")

// checkServerMetrics scrapes the server's metrics once: they must answer,
// and with the relay's figures.
func (d *driver) checkServerMetrics(ctx context.Context) error {
	if d.relayURL == "" {
		return nil
	}
	s, err := report.NewSampler(report.SamplerConfig{Targets: d.serverTargets(), Interval: d.cfg.Interval})
	if err != nil {
		return err
	}
	snap, err := s.Scrape(ctx)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrServerMetrics, err)
	}
	if snap.Relay.HostCPU.Total == 0 {
		return fmt.Errorf("%w: %s answered, but with none of the relay's metrics (relay_*): is it the relay's /metrics?", ErrServerMetrics, d.relayURL)
	}
	return nil
}

// serverTargets are the server's metrics to sample: none when it has no
// relay /metrics.
func (d *driver) serverTargets() []report.Target {
	if d.relayURL == "" {
		return nil
	}
	return []report.Target{{Role: report.RoleRelay, URL: d.relayURL}}
}

// noServerMetrics is the report's note for a run without server metrics;
// "" when the server is sampled.
func (d *driver) noServerMetrics() string {
	if d.relayURL != "" {
		return ""
	}
	return fmt.Sprintf("no server metrics: the target speaks --profile %s and --relay-metrics was not given, so the server's columns "+
		"(its messages in and delivered, send Gbps, its CPU, slow-consumer disconnects, connections between runs) are absent; "+
		"logins, latency, drops and CPU are the fleet's view", d.cfg.Fleet.Profile.Name)
}

// relayMetricsParam is the report's line for the server's metrics.
func (d *driver) relayMetricsParam() report.Param {
	if d.relayURL == "" {
		return report.Param{Name: "relay metrics", Value: "none (not the reprise relay; give --relay-metrics for a server that serves them)"}
	}
	return report.Param{Name: "relay metrics", Value: d.relayURL}
}

// relayProcessParam is the report's line on the relay child, if any.
func (d *driver) relayProcessParam() []report.Param {
	if d.cfg.RelayProcess == "" {
		return nil
	}
	return []report.Param{{Name: "relay process", Value: d.cfg.RelayProcess + "; its CPU and memory are its own, but it shares the host's CPUs with the fleet"}}
}

// sampledRun is one fleet run as sampled: its series from its start, and
// the fleet's own summary.
type sampledRun struct {
	start  time.Time
	series report.Series
	sum    fleet.Summary
}

// levelFunc handles a level the whole fleet waits at, on the driving
// goroutine, with the run's sampler and baseline; true lets the fleet go
// on.
type levelFunc func(ctx context.Context, l launch.Level, s *report.Sampler, base report.Snapshot) bool

// runFleet runs one fleet of fc: it prepares it, takes a baseline of
// every target before the fleet's clock starts, samples until sampleFor
// after the start (0: until the fleet ends), hands each level to onLevel,
// and returns what was sampled and the fleet's summary.
func (d *driver) runFleet(ctx context.Context, fc fleet.Config, sampleFor time.Duration, onLevel levelFunc) (sampledRun, error) {
	if d.inProcess {
		if d.loaded == nil {
			l, err := fc.Load()
			if err != nil {
				return sampledRun{}, err
			}
			d.loaded = l
		}
		fc.Loaded = d.loaded
	}
	fr, err := d.runner.Prepare(ctx, fc)
	if err != nil {
		return sampledRun{}, err
	}
	targets := append(d.serverTargets(), fr.Targets()...)
	sampler, err := report.NewSampler(report.SamplerConfig{Targets: targets, Interval: d.cfg.Interval})
	if err != nil {
		fr.Close()
		return sampledRun{}, err
	}
	// A level's snapshots must be had, however slowly a starved process
	// answers (a -race shard at a load of 35 per 2 CPUs took over the
	// sampler's 5 s): they wait longer than the series' scrapes.
	patient, err := report.NewSampler(report.SamplerConfig{Targets: targets, Interval: d.cfg.Interval, Timeout: levelScrapeTimeout(d.cfg.Interval)})
	if err != nil {
		fr.Close()
		return sampledRun{}, err
	}
	// The baseline is read before the start: read after it, a scrape that
	// a loaded host delayed past the first logins took them as the zero,
	// and the run counted one login fewer than the fleet made.
	base := d.baseline(ctx, fr.Targets())
	start, err := fr.Start(ctx)
	if err != nil {
		fr.Stop()
		_, werr := fr.Wait()
		return sampledRun{}, fmt.Errorf("the fleet did not start: %w", errors.Join(err, werr))
	}
	base.At = start
	sleep(ctx, time.Until(start))
	sampCtx, stopSampling := context.WithCancel(ctx)
	if sampleFor > 0 {
		// The last scrape comes just after the run's duration, when the
		// sends have stopped but the fleet is still draining (it waits for
		// 200 ms without deliveries before its clients leave).
		stopSampling()
		sampCtx, stopSampling = context.WithDeadline(ctx, start.Add(sampleFor))
	}
	defer stopSampling()
	serc := make(chan report.Series, 1)
	go func() { serc <- sampler.RunFrom(sampCtx, base) }()
	stopped := false
	for l := range fr.Levels() {
		switch {
		case stopped:
		case onLevel != nil && onLevel(ctx, l, patient, base):
			fr.Resume(l)
		default:
			// The decision is made: the series ends here, not with the
			// parts' exits (shards that exited answer no scrape).
			stopped = true
			stopSampling()
			fr.Stop()
		}
	}
	sum, runErr := fr.Wait()
	stopSampling()
	ser := <-serc
	// A fleet that no login reached ended early: what it ran is a run, and
	// the caller's check names it (and the report keeps it).
	if runErr != nil && !errors.Is(runErr, context.Canceled) && !errors.Is(runErr, fleet.ErrNoLogin) {
		return sampledRun{}, runErr
	}
	// Deliveries go on arriving during the fleet's drain, after the last
	// sample: a sliver on a quiet host, but seconds of them on a loaded
	// one. The run's totals come from the counters as the fleet ended.
	if end, err := sampler.Scrape(ctx); err == nil {
		ser.Last = end
	} else {
		// Shards that exited no longer answer: their counters as they
		// ended are in their merged summary.
		endTotals(&ser.Last.Fleet, sum)
	}
	return sampledRun{start: start, series: ser, sum: sum}, nil
}

// endTotals sets a snapshot's fleet counters to the fleet's own totals as
// it ended (its summary), for a fleet that can no longer be scraped.
func endTotals(v *report.FleetValues, s fleet.Summary) {
	failed, drops := 0.0, 0.0
	for _, n := range s.LoginsFailed {
		failed += float64(n)
	}
	for _, n := range s.Disconnects {
		drops += float64(n)
	}
	v.LoginAttempts, v.LoginsSucceeded, v.LoginsFailed = float64(s.LoginAttempts), float64(s.LoginsSucceeded), failed
	v.SentMessages, v.SentBytes = float64(s.MessagesSent), float64(s.BytesSent)
	v.ReceivedMessages, v.ReceivedBytes = float64(s.MessagesReceived), float64(s.BytesReceived)
	v.NumberedReceived, v.MessagesLost, v.Disconnects = float64(s.NumberedReceived), float64(s.MessagesLost), drops
}

// levelScrapeTimeout bounds one scrape of a level's snapshot: 30
// intervals, at least 15 s.
func levelScrapeTimeout(interval time.Duration) time.Duration {
	return max(30*interval, 15*time.Second)
}

// baseline is the snapshot a run's counters start from: the server as it
// is now, and the fleet before it started (counters at zero, its process
// CPU and the host's as they are now; summed over shards).
func (d *driver) baseline(ctx context.Context, fleetTargets []report.Target) report.Snapshot {
	var base report.Snapshot
	for _, ts := range [][]report.Target{fleetTargets, d.serverTargets()} {
		if len(ts) == 0 {
			continue
		}
		s, err := report.NewSampler(report.SamplerConfig{Targets: ts, Interval: d.cfg.Interval})
		var snap report.Snapshot
		if err == nil {
			snap, err = s.Scrape(ctx)
		}
		if err != nil {
			// Without a baseline the rates count from the first scrape,
			// and the run reports the failed scrape.
			fmt.Fprintf(d.out, "%s baseline: %v\n", ts[0].Role, err)
			continue
		}
		if ts[0].Role == report.RoleFleet {
			base.Fleet = snap.Fleet
		} else {
			base.Relay = snap.Relay
		}
	}
	return base
}

// checkRead is nil when the run read what it was asked to: a login, and
// the server's metrics when they were asked for.
func (d *driver) checkRead(what string, r sampledRun) error {
	if err := r.sum.CheckLoggedIn(); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if d.relayURL != "" && len(r.series.Points) == 0 {
		return fmt.Errorf("%s: %w at %s were never read during the run: %s", what, ErrServerMetrics, d.relayURL, orDash(r.series.LastError))
	}
	return nil
}

// runRecord is the report's record of a sampled run.
func runRecord(scenario string, rep, requested int, r sampledRun, warnings []string) report.Run {
	run := report.Run{Scenario: scenario, Repeat: rep, Requested: requested, Started: r.start, Series: r.series, Warnings: warnings}
	run.Warnings = append(run.Warnings, collapse(r.sum.Warnings, "fleet: ")...)
	if len(r.sum.Shards) > 0 { // each shard's CPU idle, start and saturation
		run.Warnings = append(run.Warnings, shardLine(r.sum))
	}
	if js, err := json.Marshal(r.sum); err == nil {
		run.FleetSummary = js
	}
	return run
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

// tlsLine says how many TLS handshakes the server took and at what rate
// it sustained them (the fleet's summary), beside the run's other figures.
func tlsLine(t *fleet.TLSSummary) string {
	hs := "none completed"
	if !t.HandshakeMS.None() {
		hs = fmt.Sprintf("p50 %.1f ms, p99 %.1f ms", t.HandshakeMS.P50, t.HandshakeMS.P99)
	}
	return fmt.Sprintf("tls: the server took %d handshakes (%d resumed, resumption %s) at %.0f/s, %d/s in its busiest second; handshake %s",
		t.Handshakes, t.Resumed, t.Resumption, t.RatePerS, t.PeakPerS, hs)
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

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sleep waits d or until ctx ends; false when ctx ended first.
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
