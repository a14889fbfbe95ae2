package report

import (
	"fmt"
	"math"
	"strings"
)

// Coverage says, for an answer, which objectives were judged, which were
// on but could not be (their figure was never measured: no latency
// stamps, no server metrics), and which --slo turned off. An answer names
// all three, so an objective that could not be judged never passes in
// silence.
type Coverage struct {
	Judged    []Reason   `json:"judged"`
	NotJudged []Unjudged `json:"not_judged"`
	Off       []Reason   `json:"off"`
}

// Unjudged is an objective that was on but had nothing to judge.
type Unjudged struct {
	Objective Reason `json:"objective"`
	Why       string `json:"why"`
}

// objectives are what a headline can check, in Reason order; plateau is
// judged whenever logins were measured, the load generator's own limits
// (fleet_idle, lag) are one objective.
var objectives = []Reason{ReasonPlateau, ReasonDisconnects, ReasonLoginFailures, ReasonLatency, ReasonCPUIdle, ReasonSaturated}

// objectiveName is how an answer names an objective (not a breach).
func objectiveName(r Reason) string {
	switch r {
	case ReasonDisconnects:
		return "drops"
	case ReasonLatency:
		return "latency p99"
	case ReasonSaturated:
		return "load generator"
	case ReasonLoss:
		return "deliveries"
	}
	return r.String()
}

// on reports whether slo checks objective r.
func (s SLO) on(r Reason) bool {
	switch r {
	case ReasonDisconnects:
		return s.MaxDrops >= 0
	case ReasonLoginFailures:
		return s.MaxLoginFailPct >= 0
	case ReasonLatency:
		return s.P99 > 0
	case ReasonCPUIdle:
		return s.MinIdlePct >= 0
	case ReasonSaturated:
		return s.MinFleetIdlePct > 0 || s.MaxLagP99 > 0
	}
	return true
}

// measures says whether an answer had the figure objective r is judged
// on.
type measures func(r Reason) bool

// coverage sorts the objectives by slo and what was measured.
func coverage(slo SLO, measured measures) Coverage {
	c := Coverage{Judged: []Reason{}, NotJudged: []Unjudged{}, Off: []Reason{}}
	for _, r := range objectives {
		switch {
		case !slo.on(r):
			c.Off = append(c.Off, r)
		case measured(r):
			c.Judged = append(c.Judged, r)
		default:
			c.NotJudged = append(c.NotJudged, Unjudged{r, unmeasuredWhy(r)})
		}
	}
	return c
}

// unmeasuredWhy is why objective r had no figure.
func unmeasuredWhy(r Reason) string {
	switch r {
	case ReasonLatency:
		return "no latency stamps: no delivery carried its send time"
	case ReasonCPUIdle:
		return "no server metrics: its host CPU was not read"
	case ReasonDisconnects:
		return "neither the fleet's nor the server's disconnects were read"
	case ReasonSaturated:
		return "the fleet's host CPU and schedule lag were not read"
	}
	return "logins were not read"
}

// pointsMeasure: which objectives a run's samples can judge.
func pointsMeasure(pts []Point) measures {
	seen := func(get func(Point) float64) bool {
		for _, p := range pts {
			if !math.IsNaN(get(p)) {
				return true
			}
		}
		return false
	}
	return func(r Reason) bool {
		switch r {
		case ReasonPlateau:
			return seen(func(p Point) float64 { return p.LoggedIn }) && seen(func(p Point) float64 { return p.LoginAttempts })
		case ReasonDisconnects:
			return seen(func(p Point) float64 { return p.SlowConsumerDiscards }) || seen(func(p Point) float64 { return p.FleetDisconnects })
		case ReasonLoginFailures:
			return seen(func(p Point) float64 { return p.LoginAttempts })
		case ReasonLatency:
			return seen(func(p Point) float64 { return p.LatencyP99Ms })
		case ReasonCPUIdle:
			return seen(func(p Point) float64 { return p.RelayCPUIdlePct })
		case ReasonSaturated:
			return seen(func(p Point) float64 { return p.FleetCPUIdlePct }) || seen(func(p Point) float64 { return p.ScheduleLagP99Ms })
		}
		return false
	}
}

// levelsMeasure: which objectives a capacity search's levels judged.
func levelsMeasure(levels []Level) measures {
	seen := func(get func(Level) Num) bool {
		for _, l := range levels {
			if !math.IsNaN(float64(get(l))) {
				return true
			}
		}
		return false
	}
	return func(r Reason) bool {
		switch r {
		case ReasonPlateau, ReasonLoginFailures:
			return seen(func(l Level) Num { return l.Attempts })
		case ReasonDisconnects:
			return seen(func(l Level) Num { return l.Drops })
		case ReasonLatency:
			return seen(func(l Level) Num { return l.LatencyP99Ms })
		case ReasonCPUIdle:
			return seen(func(l Level) Num { return l.RelayCPUIdlePct })
		case ReasonSaturated:
			return seen(func(l Level) Num { return l.FleetCPUIdlePct }) || seen(func(l Level) Num { return l.ScheduleLagP99Ms })
		}
		return false
	}
}

// String is the answer's closing clause: "judged: plateau, drops, ...;
// not judged: latency p99 (no latency stamps: ...); off: relay CPU idle".
func (c Coverage) String() string {
	names := func(rs []Reason) string {
		var s []string
		for _, r := range rs {
			s = append(s, objectiveName(r))
		}
		return strings.Join(s, ", ")
	}
	parts := []string{"judged: " + names(c.Judged)}
	if len(c.Judged) == 0 {
		parts[0] = "judged: nothing"
	}
	if len(c.NotJudged) > 0 {
		var s []string
		for _, u := range c.NotJudged {
			s = append(s, fmt.Sprintf("%s (%s)", objectiveName(u.Objective), u.Why))
		}
		parts = append(parts, "not judged: "+strings.Join(s, ", "))
	}
	if len(c.Off) > 0 {
		parts = append(parts, "off: "+names(c.Off))
	}
	return strings.Join(parts, "; ")
}

// saturationFigures are a load generator's figures of the limits that
// are on: an objective turned off never names its figure.
func saturationFigures(fleetIdlePct, lagP99Ms Num, slo SLO) string {
	var s []string
	if slo.MinFleetIdlePct > 0 {
		s = append(s, "fleet host CPU idle "+fmtNum(fleetIdlePct, 0)+" %")
	}
	if slo.MaxLagP99 > 0 {
		s = append(s, "schedule lag p99 "+fmtMs(lagP99Ms, 1))
	}
	return strings.Join(s, ", ")
}
