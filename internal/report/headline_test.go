package report

import (
	"math"
	"strings"
	"testing"
)

// TestRunHeadline: the earliest of a plateau and the first breach decides
// how many users a compare run held.
func TestRunHeadline(t *testing.T) {
	mk := func(in, att, fail, slow, p99 []float64) Run {
		var pts []Point
		for i := range in {
			pts = append(pts, Point{T: float64(i + 1), LoggedIn: in[i], LoginAttempts: att[i], LoginFailures: fail[i],
				SlowConsumerDiscards: slow[i], FleetDisconnects: math.NaN(), LatencyP99Ms: p99[i], SendGbps: 1,
				RelayCPUIdlePct: 50, FleetCPUIdlePct: 80, ScheduleLagP99Ms: 1})
		}
		return Run{Scenario: "N:N", Requested: 100, Series: Series{Points: pts}}
	}
	z := make([]float64, 12)
	up := []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 100, 100}
	flat := []float64{10, 20, 30, 40, 50, 50, 50, 50, 50, 50, 50, 50}
	fast := []float64{5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5}
	tests := []struct {
		name   string
		run    Run
		held   float64
		reason Reason
		text   string
	}{
		{"all held", mk(up, up, z, z, fast), 100, ReasonAllHeld, "no limit reached: all 100 requested held"},
		{"plateau", mk(flat, up, []float64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, z, fast), 50, ReasonPlateau, "at plateau"},
		{"disconnects", mk(up, up, z, []float64{0, 0, 0, 0, 0, 0, 3, 5, 9, 9, 9, 9}, fast), 60, ReasonDisconnects, "3 logged-in clients lost"},
		{"sustained latency", mk(up, up, z, z, []float64{5, 5, 5, 500, 5, 5, 300, 300, 300, 5, 5, 5}), 60, ReasonLatency, "p99 300 ms > 100ms for 3 s"},
		{"login failures", mk(up, up, []float64{0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2}, z, fast), 80, ReasonLoginFailures, "2 of 80 logins failed"},
	}
	for _, tt := range tests {
		rs := AnalyzeRun(tt.run)
		h := RunHeadline(tt.run, rs, DefaultSLO())
		if float64(h.Held) != tt.held || h.Reason != tt.reason || h.Saturated {
			t.Errorf("%s: held %v (%v, saturated %v), want %v (%v)", tt.name, h.Held, h.Reason, h.Saturated, tt.held, tt.reason)
		}
		if !strings.Contains(h.Line(), tt.text) || !strings.HasPrefix(h.Line(), "N:N held ") {
			t.Errorf("%s: %q lacks %q", tt.name, h.Line(), tt.text)
		}
	}
}

// TestDisconnectsBeatAPlateauTheyEnd: the demo's run as the issue found
// it: 150 logged in at 47 s, 50 slow-consumer disconnects at 48 s (103
// left) while attempts went on. Logged-in was not flat from 47 s: the
// disconnects decide, at 48 s, and the plateau window ends at the drop.
func TestDisconnectsBeatAPlateauTheyEnd(t *testing.T) {
	var pts []Point
	for s := 40; s <= 60; s++ {
		in, att, slow := float64(min(150, 80+10*(s-40))), float64(min(200, 80+10*(s-40))), 0.0
		if s >= 48 {
			in, slow = 103, 50
		}
		pts = append(pts, Point{T: float64(s), LoggedIn: in, LoginAttempts: att, LoginFailures: 0, SlowConsumerDiscards: slow,
			FleetDisconnects: slow, LatencyP99Ms: 20, SendGbps: 1, RelayCPUIdlePct: 50, FleetCPUIdlePct: 80, ScheduleLagP99Ms: 1})
	}
	r := Run{Scenario: "N:N", Requested: 200, Series: Series{Points: pts}}
	rs := AnalyzeRun(r)
	h := RunHeadline(r, rs, DefaultSLO())
	if h.Reason != ReasonDisconnects || float64(h.AtS) != 48 || float64(h.Held) != 150 {
		t.Errorf("%s: want disconnects at 48 s, 150 held", h.Line())
	}
	if rs.Plateau.Detected || float64(rs.Plateau.WindowToS) != 47 {
		t.Errorf("plateau %+v: the window must end at the drop (47 s) and not count as flat", rs.Plateau)
	}
}
