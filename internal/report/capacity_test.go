package report

import (
	"math"
	"strings"
	"testing"
	"time"
)

// level is a judged level with the figures a test cares about.
func level(clients int, loggedIn, failPct, drops, p99, idle, fleetIdle float64, from, to float64) Level {
	nan := Num(math.NaN())
	l := Level{Clients: clients, LoggedIn: Num(loggedIn), Attempts: Num(clients), LoginFailPct: Num(failPct),
		Drops: Num(drops), SlowConsumer: Num(drops), LatencyP50Ms: nan, LatencyP99Ms: Num(p99),
		ScheduleLagP99Ms: Num(1), SendGbps: Num(0.1), RelayCPUIdlePct: Num(idle), RelayProcessCPUPct: nan,
		FleetProcessCPUPct: nan, FleetCPUIdlePct: Num(fleetIdle), FromS: Num(from), HoldFromS: Num(to - 2), ToS: Num(to)}
	slo := DefaultSLO()
	l.Breaches = levelBreaches(l, slo)
	l.Saturated = fleetIdle < slo.MinFleetIdlePct
	if l.Saturated {
		l.Breaches = append(l.Breaches, Breach{ReasonSaturated, "saturated"})
	}
	return l
}

// ramp is one point per second: logged-in climbing by perS up to the
// level clients, p99 and drops as given per second.
func points(loggedIn, p99, drops []float64) []Point {
	var out []Point
	for i := range loggedIn {
		out = append(out, Point{T: float64(i + 1), LoggedIn: loggedIn[i], LatencyP99Ms: p99[i], SlowConsumerDiscards: drops[i],
			FleetDisconnects: drops[i], LoginAttempts: loggedIn[i], LoginFailures: 0, RelayCPUIdlePct: 50})
	}
	return out
}

func TestDecide(t *testing.T) {
	slo := DefaultSLO()
	// Levels of 50 and 100: the first from 0 to 5 s, the second from 5 to
	// 10 s; logged-in climbs 10 per second.
	in := []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	calm := make([]float64, 10)
	slow := []float64{5, 5, 5, 5, 5, 5, 5, 150, 300, 300} // over 100 ms from 8 s (80 in)
	dropAt := []float64{0, 0, 0, 0, 0, 0, 0, 0, 2, 4}     // first drop at 9 s (90 in)
	tests := []struct {
		name    string
		levels  []Level
		pts     []Point
		held    float64
		reason  Reason
		sat     bool
		brokeAt int
		answer  string
	}{
		{"all held", []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 100, 0, 0, 5, 50, 60, 5, 10)},
			points(in, calm, calm), 100, ReasonAllHeld, false, 0, "N:N: held 100 users (p99 5 ms, 0 drops, idle 50 %, 0 % logins failed); all 100 requested held; judged: plateau, drops, login failures, latency p99, relay CPU idle, load generator"},
		{"login failures", []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 64, 36, 0, 5, 50, 60, 5, 10)},
			points(in, calm, calm), 64, ReasonLoginFailures, false, 100, "N:N: held 64 users (p99 5 ms, 0 drops, idle 50 %, 0 % logins failed); broke at 100: 36% of 100 logins failed"},
		{"latency placed in the level", []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 100, 0, 0, 250, 50, 60, 5, 10)},
			points(in, slow, calm), 70, ReasonLatency, false, 100, "broke at 100: latency p99 250.0 ms > 100ms"},
		{"drops placed in the level", []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 96, 0, 4, 5, 50, 60, 5, 10)},
			points(in, calm, dropAt), 80, ReasonDisconnects, false, 100, "broke at 100: 4 logged-in clients lost"},
		{"latency only once the whole level was in: the level before", []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 100, 0, 0, 250, 50, 60, 5, 10)},
			points(in, []float64{5, 5, 5, 5, 5, 5, 5, 5, 5, 300}, calm), 50, ReasonLatency, false, 100, "held 50 users"},
		{"latency with no second over it: the level before", []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 100, 0, 0, 250, 50, 60, 5, 10)},
			points(in, calm, calm), 50, ReasonLatency, false, 100, "held 50 users"},
		{"saturated fleet", []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 100, 0, 0, 5, 50, 5, 5, 10)},
			points(in, calm, calm), 50, ReasonSaturated, true, 100, "held ≥ 50 users (load generator saturated: add fleet machines;"},
		{"first level breaks", []Level{level(50, 50, 0, 0, 250, 50, 60, 0, 5)},
			points(in[:5], slow[5:], calm[:5]), 20, ReasonLatency, false, 50, "held 20 users"},
	}
	for _, tt := range tests {
		c := Decide("N:N", 100, tt.levels, tt.pts, slo)
		if float64(c.Held) != tt.held || c.Reason != tt.reason || c.Saturated != tt.sat || c.BrokeAt != tt.brokeAt {
			t.Errorf("%s: held %v reason %v saturated %v broke at %d; want %v, %v, %v, %d", tt.name, c.Held, c.Reason,
				c.Saturated, c.BrokeAt, tt.held, tt.reason, tt.sat, tt.brokeAt)
		}
		if !strings.Contains(c.Answer, tt.answer) {
			t.Errorf("%s: answer %q lacks %q", tt.name, c.Answer, tt.answer)
		}
	}
}

// TestEvaluateLevel judges a level from three snapshots: logins and drops
// over the whole level, latency and CPU over the hold.
func TestEvaluateLevel(t *testing.T) {
	bounds := []float64{0.01, 0.1, 1, math.Inf(1)}
	snap := func(at time.Duration, attempts, ok, lat0, lat1, slow, idle, total float64) Snapshot {
		var s Snapshot
		s.At = synthBase.Add(at)
		s.Fleet = FleetValues{Present: true, At: s.At, LoggedIn: ok, LoginAttempts: attempts, LoginsSucceeded: ok,
			Latency: Histogram{Bounds: bounds, Counts: []float64{lat0, lat0 + lat1, lat0 + lat1, lat0 + lat1}, Count: lat0 + lat1},
			HostCPU: CPUTimes{Idle: idle, Total: total}}
		s.Relay = RelayValues{Present: true, At: s.At, SlowConsumerDisconnects: slow, HostCPU: CPUTimes{Idle: idle, Total: total}}
		return s
	}
	start := snap(0, 50, 50, 1000, 0, 1, 0, 0)
	hold := snap(5*time.Second, 100, 98, 1000, 0, 1, 5, 10)
	end := snap(10*time.Second, 100, 99, 1000, 1000, 3, 6, 20) // half the hold's deliveries over 10 ms
	l := EvaluateLevel(LevelWindow{Clients: 100, Start: start, Hold: hold, End: end, FromS: 0, HoldFromS: 5, ToS: 10}, DefaultSLO())
	if float64(l.LoginFailPct) != 2 || float64(l.Drops) != 2 || float64(l.LoggedIn) != 99 || float64(l.RelayCPUIdlePct) != 10 {
		t.Errorf("level %+v", l)
	}
	if p99 := float64(l.LatencyP99Ms); p99 < 10 || p99 > 100 {
		t.Errorf("p99 over the hold %v ms, want in the 10-100 ms bucket", p99)
	}
	var reasons []Reason
	for _, b := range l.Breaches {
		reasons = append(reasons, b.Reason)
	}
	if len(reasons) != 3 || reasons[0] != ReasonDisconnects || reasons[1] != ReasonLoginFailures || reasons[2] != ReasonSaturated {
		t.Errorf("breaches %v, want disconnects, login failures, saturated (idle 10 %% is not under 10 %%; the fleet's is under 20 %%)", l.Breaches)
	}

	// A server without metrics: its columns are absent and break nothing,
	// except the host CPU idle of a server on the fleet's host, which is
	// the fleet's.
	for _, sameHost := range []bool{false, true} {
		w := LevelWindow{Clients: 100, Start: start, Hold: hold, End: end, FromS: 0, HoldFromS: 5, ToS: 10, ServerOnFleetHost: sameHost}
		for _, s := range []*Snapshot{&w.Start, &w.Hold, &w.End} {
			s.Relay = RelayValues{}
		}
		l := EvaluateLevel(w, SLO{P99: time.Second, MaxDrops: -1, MaxLoginFailPct: -1, MinIdlePct: 50})
		idle := float64(l.RelayCPUIdlePct)
		if !math.IsNaN(float64(l.SendGbps)) || !math.IsNaN(float64(l.SlowConsumer)) || (sameHost && idle != 10) || (!sameHost && !math.IsNaN(idle)) {
			t.Errorf("no server metrics, same host %v: send %v slow consumer %v idle %v", sameHost, l.SendGbps, l.SlowConsumer, idle)
		}
		if broke := len(l.Breaches) > 0 && l.Breaches[0].Reason == ReasonCPUIdle; broke != sameHost {
			t.Errorf("no server metrics, same host %v: breaches %v", sameHost, l.Breaches)
		}
	}
}

// TestCapacityReportCaptions: a capacity search's report has its own
// words: no side-by-side of scenarios, no N:N-versus-1:N captions, holds
// called holds, and the levels table says which columns are the level's
// own and which are totals.
func TestCapacityReportCaptions(t *testing.T) {
	in := synthInput()
	in.Runs = in.Runs[:1]
	levels := []Level{level(30, 30, 0, 0, 5, 50, 60, 0, 5), level(60, 55, 8, 0, 5, 50, 60, 5, 10)}
	c := Decide("N:N", 60, levels, in.Runs[0].Series.Points, DefaultSLO())
	in.Capacity = &c
	var buf strings.Builder
	if err := WriteHTML(&buf, Analyze(in)); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	for _, bad := range []string{"Side by side", "N:N should", "1:N linear", "ramp pause"} {
		if strings.Contains(html, bad) {
			t.Errorf("a capacity report says %q", bad)
		}
	}
	for _, want := range []string{"The whole search", "grey bands are the levels", "logged in (total at the level's end)", "login attempts (this level)", "5 s rolling mean"} {
		if !strings.Contains(html, want) {
			t.Errorf("a capacity report lacks %q", want)
		}
	}
	var text strings.Builder
	if err := WriteLevels(&text, c); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "logged in (total)") || !strings.Contains(text.String(), "attempts (level)") {
		t.Errorf("levels table:\n%s", text.String())
	}
}

// TestOffObjectiveNamesNoFigure: with fleet_idle=off, a level the load
// generator's schedule lag saturated says so without the fleet's CPU idle
// (the "load generator saturated (fleet host CPU idle 0 %)" with
// fleet_idle=off), and the answer's figures leave out what is off.
func TestOffObjectiveNamesNoFigure(t *testing.T) {
	slo := DefaultSLO()
	if err := slo.Set("fleet_idle=off,idle=off,p99=off"); err != nil {
		t.Fatal(err)
	}
	l := level(20, 20, 0, 0, 5, 0, 0, 0, 5)
	l.ScheduleLagP99Ms = 40
	l.Breaches = levelBreaches(l, slo)
	l.Saturated = isSaturated(Point{FleetCPUIdlePct: float64(l.FleetCPUIdlePct), ScheduleLagP99Ms: float64(l.ScheduleLagP99Ms)}, slo)
	if l.Saturated {
		l.Breaches = append(l.Breaches, Breach{ReasonSaturated, "load generator saturated (" + saturationFigures(l.FleetCPUIdlePct, l.ScheduleLagP99Ms, slo) + ")"})
	}
	c := Decide("N:N", 40, []Level{l}, nil, slo)
	if c.Reason != ReasonSaturated || c.BrokeAt != 20 {
		t.Fatalf("answer %q: want broken at 20 by the load generator", c.Answer)
	}
	for _, off := range []string{"fleet host CPU idle", "idle 0 %", "p99 5 ms"} {
		if strings.Contains(c.Answer, off) {
			t.Errorf("answer %q names %q, whose objective is off", c.Answer, off)
		}
	}
	if !strings.Contains(c.Answer, "schedule lag p99 40.0 ms") || !strings.Contains(c.Answer, "off: latency p99, relay CPU idle") {
		t.Errorf("answer %q", c.Answer)
	}
}
