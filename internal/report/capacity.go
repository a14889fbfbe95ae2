package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// LevelWindow is what a capacity search measured of one level: snapshots
// at the start of the level's ramp, at the start of its hold and at the
// hold's end, and the seconds since the run's start of each.
type LevelWindow struct {
	Clients               int // clients requested up to this level
	Start, Hold, End      Snapshot
	FromS, HoldFromS, ToS float64
	// ServerOnFleetHost: the server runs on the fleet's host and has no
	// metrics of its own, so the fleet's host CPU idle is the server
	// host's too (the idle objective is judged on it).
	ServerOnFleetHost bool
}

// Breach is one objective a level broke.
type Breach struct {
	Reason Reason `json:"reason"`
	Text   string `json:"text"`
}

// Level is one step of a capacity search: what the relay did with Clients
// requested, over the level's hold (latency, CPU, send rate) or the whole
// level (logins, drops).
type Level struct {
	Clients            int      `json:"clients"`
	LoggedIn           Num      `json:"logged_in"`
	Attempts           Num      `json:"login_attempts"`
	LoginFailPct       Num      `json:"login_fail_pct"` // pending at the hold's end count as failed
	Drops              Num      `json:"drops"`          // slow-consumer and other disconnects
	SlowConsumer       Num      `json:"slow_consumer_disconnects"`
	LatencyP50Ms       Num      `json:"latency_p50_ms"`
	LatencyP99Ms       Num      `json:"latency_p99_ms"`
	ScheduleLagP99Ms   Num      `json:"schedule_lag_p99_ms"`
	SendGbps           Num      `json:"send_gbps"`
	RelayCPUIdlePct    Num      `json:"relay_cpu_idle_pct"`
	RelayProcessCPUPct Num      `json:"relay_process_cpu_pct"`
	FleetProcessCPUPct Num      `json:"fleet_process_cpu_pct"`
	FleetCPUIdlePct    Num      `json:"fleet_cpu_idle_pct"`
	FromS              Num      `json:"from_s"`
	HoldFromS          Num      `json:"hold_from_s"`
	ToS                Num      `json:"to_s"`
	Saturated          bool     `json:"saturated"`
	Breaches           []Breach `json:"breaches"`
	// PastRange names the latency and lag fields past the histograms'
	// range ("> 60 s"): null in JSON, as no number is known.
	PastRange []string `json:"past_range,omitempty"`
}

// OK reports whether the level kept every objective.
func (l Level) OK() bool { return len(l.Breaches) == 0 }

// EvaluateLevel computes a level's figures and checks them against slo.
func EvaluateLevel(w LevelWindow, slo SLO) Level {
	nan := Num(math.NaN())
	l := Level{Clients: w.Clients, FromS: Num(w.FromS), HoldFromS: Num(w.HoldFromS), ToS: Num(w.ToS),
		LoggedIn: nan, Attempts: nan, LoginFailPct: nan, Drops: nan, SlowConsumer: nan, LatencyP50Ms: nan,
		LatencyP99Ms: nan, ScheduleLagP99Ms: nan, SendGbps: nan, RelayCPUIdlePct: nan, RelayProcessCPUPct: nan,
		FleetProcessCPUPct: nan, FleetCPUIdlePct: nan, Breaches: []Breach{}}
	s, h, e := w.Start, w.Hold, w.End
	drops := 0.0
	if s.Fleet.Present && h.Fleet.Present && e.Fleet.Present {
		l.LoggedIn = Num(e.Fleet.LoggedIn)
		att := delta(s.Fleet.LoginAttempts, e.Fleet.LoginAttempts)
		l.Attempts = Num(att)
		if att > 0 {
			ok := delta(s.Fleet.LoginsSucceeded, e.Fleet.LoginsSucceeded)
			l.LoginFailPct = Num(100 * math.Max(0, att-ok) / att)
		}
		drops += delta(s.Fleet.Disconnects, e.Fleet.Disconnects)
		lat := HistogramDelta(h.Fleet.Latency, e.Fleet.Latency)
		l.LatencyP50Ms, l.LatencyP99Ms = Num(1000*Quantile(0.5, lat)), Num(1000*Quantile(0.99, lat))
		l.ScheduleLagP99Ms = Num(1000 * Quantile(0.99, HistogramDelta(h.Fleet.ScheduleLag, e.Fleet.ScheduleLag)))
		l.PastRange = pastRange(namedNum{"latency_p50_ms", l.LatencyP50Ms}, namedNum{"latency_p99_ms", l.LatencyP99Ms},
			namedNum{"schedule_lag_p99_ms", l.ScheduleLagP99Ms})
		l.FleetCPUIdlePct = Num(idlePct(h.Fleet.HostCPU, e.Fleet.HostCPU))
		// Rates over the span each endpoint's readings cover, as in Derive.
		if dt := roleDT(h.At, e.At, h.Fleet.At, e.Fleet.At); dt > 0 && e.Fleet.ProcessCPUSeconds > 0 {
			l.FleetProcessCPUPct = Num(fleetProcessCPUPct(h.Fleet, e.Fleet, dt))
		}
	}
	if s.Relay.Present && h.Relay.Present && e.Relay.Present {
		sc := delta(s.Relay.SlowConsumerDisconnects, e.Relay.SlowConsumerDisconnects)
		l.SlowConsumer = Num(sc)
		// A slow consumer the relay cut is also a client the fleet lost:
		// count each once, the larger view.
		drops = math.Max(drops, sc)
		l.RelayCPUIdlePct = Num(idlePct(h.Relay.HostCPU, e.Relay.HostCPU))
		if dt := relaySpan(h, e); dt > 0 {
			l.SendGbps = Num(delta(h.Relay.SentBytes, e.Relay.SentBytes) * 8 / 1e9 / dt)
			l.RelayProcessCPUPct = Num(100 * delta(h.Relay.ProcessCPUSeconds, e.Relay.ProcessCPUSeconds) / dt)
		}
	}
	if w.ServerOnFleetHost && !(s.Relay.Present && h.Relay.Present && e.Relay.Present) {
		l.RelayCPUIdlePct = l.FleetCPUIdlePct
	}
	if s.Fleet.Present || s.Relay.Present {
		l.Drops = Num(drops)
	}
	l.Breaches = levelBreaches(l, slo)
	l.Saturated = (slo.MinFleetIdlePct > 0 && float64(l.FleetCPUIdlePct) < slo.MinFleetIdlePct) ||
		(slo.MaxLagP99 > 0 && float64(l.ScheduleLagP99Ms) > ms(slo.MaxLagP99.Seconds()))
	if l.Saturated {
		l.Breaches = append(l.Breaches, Breach{ReasonSaturated, "load generator saturated (" + saturationFigures(l.FleetCPUIdlePct, l.ScheduleLagP99Ms, slo) + ")"})
	}
	return l
}

func ms(seconds float64) float64 { return 1000 * seconds }

// levelBreaches lists the objectives l broke, in Reason order. NaN
// figures (not measured) break nothing.
func levelBreaches(l Level, slo SLO) []Breach {
	b := []Breach{}
	if slo.MaxDrops >= 0 && float64(l.Drops) > float64(slo.MaxDrops) {
		b = append(b, Breach{ReasonDisconnects, fmt.Sprintf("%.0f logged-in clients lost (%s slow-consumer disconnects)", float64(l.Drops), fmtNum(l.SlowConsumer, 0))})
	}
	if slo.MaxLoginFailPct >= 0 && float64(l.LoginFailPct) > slo.MaxLoginFailPct {
		b = append(b, Breach{ReasonLoginFailures, fmt.Sprintf("%.0f%% of %.0f logins failed (limit %s)", float64(l.LoginFailPct), float64(l.Attempts), fmtPct(slo.MaxLoginFailPct))})
	}
	if slo.P99 > 0 && float64(l.LatencyP99Ms) > ms(slo.P99.Seconds()) {
		b = append(b, Breach{ReasonLatency, fmt.Sprintf("latency p99 %s > %v", fmtMs(l.LatencyP99Ms, 1), slo.P99)})
	}
	if slo.MinIdlePct >= 0 && float64(l.RelayCPUIdlePct) < slo.MinIdlePct {
		b = append(b, Breach{ReasonCPUIdle, fmt.Sprintf("relay host CPU idle %.0f %% < %s", float64(l.RelayCPUIdlePct), fmtPct(slo.MinIdlePct))})
	}
	return b
}

// Capacity is a capacity search's answer: the users the relay held under
// the objectives, why the search stopped, and every level it ran.
type Capacity struct {
	Scenario  string `json:"scenario"`
	Requested int    `json:"requested"` // --max
	Held      Num    `json:"held"`
	Reason    Reason `json:"reason"`
	Detail    string `json:"detail"`
	Saturated bool   `json:"saturated"`
	BrokeAt   int    `json:"broke_at"` // clients of the breaking level; 0: none broke
	SLO       string `json:"slo"`
	Answer    string `json:"answer"`
	// Coverage: which objectives the levels judged, which they could
	// not, which were off.
	Coverage Coverage `json:"coverage"`
	Levels   []Level  `json:"levels"`
}

// Decide answers a capacity search from its levels (the last one is where
// it stopped) and the run's samples. A level broken by latency, drops or
// CPU idle during its ramp is placed within the level: the clients logged
// in just before the first sample of the level that broke the same
// objective, between the previous level's and this one's; broken only
// once all its clients were in, the previous level's count stands.
func Decide(scenario string, requested int, levels []Level, pts []Point, slo SLO) (c Capacity) {
	c = Capacity{Scenario: scenario, Requested: requested, Held: Num(math.NaN()), Reason: ReasonAllHeld,
		SLO: slo.String(), Levels: levels, Coverage: coverage(slo, levelsMeasure(levels))}
	if len(levels) == 0 {
		c.Answer = fmt.Sprintf("%s: no level completed", scenario)
		return c
	}
	defer func() { c.Answer += "; " + c.Coverage.String() }()
	k := len(levels) - 1
	for i, l := range levels {
		if !l.OK() {
			k = i
			break
		}
	}
	last := levels[k]
	if last.OK() {
		c.Held, c.Saturated = last.LoggedIn, last.Saturated
		c.Answer = fmt.Sprintf("%s: held %s; all %d requested held", scenario, heldText(c, last, slo), requested)
		if last.Clients < requested {
			c.Detail = fmt.Sprintf("stopped at %d of %d requested (interrupted)", last.Clients, requested)
			c.Answer = fmt.Sprintf("%s: held %s; %s", scenario, heldText(c, last, slo), c.Detail)
		}
		return c
	}
	c.BrokeAt = last.Clients
	b := last.Breaches[0]
	c.Reason, c.Detail = b.Reason, b.Text
	lo, good := 0.0, Level{}
	if k > 0 {
		good = levels[k-1]
		lo = nz(float64(good.LoggedIn))
	}
	hi := float64(last.Clients)
	switch b.Reason {
	case ReasonLoginFailures:
		c.Held = Num(clamp(nz(float64(last.LoggedIn)), lo, hi))
	case ReasonSaturated:
		c.Held = Num(lo)
	default:
		// A breach once the whole level was in (during its hold) places
		// nothing inside the level: the previous level is what held.
		if x, at := crossing(pts, last, b.Reason, slo, lo); at < hi {
			c.Held = Num(clamp(x, lo, hi))
		} else {
			c.Held = Num(lo)
		}
	}
	c.Saturated = last.Saturated || good.Saturated
	ref := good
	if k == 0 {
		ref = last
	}
	c.Answer = fmt.Sprintf("%s: held %s; broke at %d: %s", scenario, heldText(c, ref, slo), last.Clients, b.Text)
	return c
}

// heldText is "150 users (p99 41 ms, 0 drops, idle 23 %)", or "≥ 150
// users (load generator saturated: add fleet machines; ...)".
func heldText(c Capacity, l Level, slo SLO) string {
	if c.Saturated {
		return fmt.Sprintf("≥ %s users (load generator saturated: add fleet machines; %s)", fmtNum(c.Held, 0), figures(l, slo))
	}
	return fmt.Sprintf("%s users (%s)", fmtNum(c.Held, 0), figures(l, slo))
}

// figures are a level's measured p99, drops and relay CPU idle, each only
// when its objective is on.
func figures(l Level, slo SLO) string {
	var parts []string
	if slo.on(ReasonLatency) {
		parts = append(parts, "p99 "+fmtMs(l.LatencyP99Ms, 0))
	}
	if slo.on(ReasonDisconnects) {
		parts = append(parts, fmtNum(l.Drops, 0)+" drops")
	}
	if slo.on(ReasonCPUIdle) {
		parts = append(parts, "idle "+fmtNum(l.RelayCPUIdlePct, 0)+" %")
	}
	if slo.on(ReasonLoginFailures) {
		parts = append(parts, fmtNum(l.LoginFailPct, 0)+" % logins failed")
	}
	return strings.Join(parts, ", ")
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// crossing is the clients logged in just before the first sample of level
// l that broke the objective of reason r, and at that sample; fallback and
// +Inf when none did.
func crossing(pts []Point, l Level, r Reason, slo SLO, fallback float64) (before, at float64) {
	prev, drops0 := fallback, 0.0
	for _, p := range pts {
		d := math.Max(nz(p.SlowConsumerDiscards), nz(p.FleetDisconnects))
		if p.T < float64(l.FromS) {
			drops0 = d
			if !math.IsNaN(p.LoggedIn) {
				prev = math.Max(fallback, p.LoggedIn)
			}
			continue
		}
		if p.T > float64(l.ToS) {
			break
		}
		var broke bool
		switch r {
		case ReasonLatency:
			broke = p.LatencyP99Ms > ms(slo.P99.Seconds())
		case ReasonDisconnects:
			broke = d-drops0 > float64(max(slo.MaxDrops, 0))
		case ReasonCPUIdle:
			broke = p.RelayCPUIdlePct < slo.MinIdlePct
		}
		if broke {
			return prev, nz(p.LoggedIn)
		}
		if !math.IsNaN(p.LoggedIn) {
			prev = p.LoggedIn
		}
	}
	return fallback, math.Inf(1)
}

// WriteLevels prints the answer and the per-level table for a terminal.
func WriteLevels(w io.Writer, c Capacity) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Logged in is the total at the level's end; attempts, failures and
	// drops are the level's own: the header says which.
	fmt.Fprintln(tw, "clients\tlogged in (total)\tattempts (level)\tlogin fail % (level)\tdrops (level)\tp50 ms\tp99 ms\trelay send Gbps\trelay idle %\trelay CPU %\tfleet CPU %\tfleet idle %\tlag p99 ms\t")
	for _, l := range c.Levels {
		result := "held"
		if !l.OK() {
			result = "broke: " + l.Breaches[0].Reason.String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t  %s\n", l.Clients, fmtNum(l.LoggedIn, 0),
			fmtNum(l.Attempts, 0), fmtNum(l.LoginFailPct, 1), fmtNum(l.Drops, 0), fmtMsCell(l.LatencyP50Ms, 1), fmtMsCell(l.LatencyP99Ms, 1),
			fmtNum(l.SendGbps, 4), fmtNum(l.RelayCPUIdlePct, 0), fmtNum(l.RelayProcessCPUPct, 0),
			fmtNum(l.FleetProcessCPUPct, 0), fmtNum(l.FleetCPUIdlePct, 0), fmtMsCell(l.ScheduleLagP99Ms, 1), result)
	}
	if _, err := fmt.Fprintln(w, c.Answer); err != nil {
		return fmt.Errorf("write levels: %w", err)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write levels: %w", err)
	}
	return nil
}
