package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// PlateauMinS is how long logged-in clients must stay flat while login
// attempts go on for a plateau: shorter flats are a ramp's noise.
const PlateauMinS = 5

// sustain is how many consecutive samples a latency breach must last in a
// run's series: one slow second is an outlier, not a limit.
const sustain = 3

// Headline is the answer for one scenario: how many users the relay held
// and why it stopped there.
type Headline struct {
	Scenario  string `json:"scenario"`
	Requested int    `json:"requested"`
	// Held is how many users the relay held: the plateau, the clients
	// logged in just before the first breach, or everyone.
	Held   Num    `json:"held"`
	Reason Reason `json:"reason"`
	Detail string `json:"detail"`
	// Saturated: the load generator was saturated where it was decided,
	// so Held is a lower bound.
	Saturated bool `json:"saturated"`
	// HostBusy: the fleet's host was busy with other work where a
	// latency, relay CPU or disconnect objective decided the answer
	// (hostBusyNear): those figures are the host's, not the server's, and
	// the answer could not be judged. Everyone held, a refusal and its
	// plateau stand.
	HostBusy bool `json:"host_busy"`
	AtS      Num  `json:"at_s"`
	// BrokeAt is who was logged in at the sample that broke the deciding
	// objective; NaN when none broke (all held, a plateau, saturation).
	BrokeAt Num `json:"broke_at"`
	// FiguresAt says where SendGbps and RelayCPUIdlePct were taken: "at
	// plateau", "at peak" (logged-in near its maximum), or "just before"
	// the breach (the 3 samples before it).
	FiguresAt       string `json:"figures_at"`
	SendGbps        Num    `json:"send_gbps"`
	RelayCPUIdlePct Num    `json:"relay_cpu_idle_pct"`
	// Coverage: which objectives were judged, which could not be, which
	// were off.
	Coverage Coverage `json:"coverage"`
	// AlsoBroke are the other objectives that broke in the run, after the
	// one that decided (or anywhere, when none did), each its first
	// breach: an objective kept only until the answer is not one kept.
	AlsoBroke []Breach `json:"also_broke"`
}

// Number is Held as the headline writes it: "≥ N" when saturated, "?"
// when it could not be judged.
func (h Headline) Number() string {
	if math.IsNaN(float64(h.Held)) || h.HostBusy {
		return "?"
	}
	if h.Saturated {
		return fmt.Sprintf("≥ %.0f", float64(h.Held))
	}
	return fmt.Sprintf("%.0f", float64(h.Held))
}

// Why is the objective that decided with its detail and time, the
// figures at that point, and which objectives were judged.
func (h Headline) Why() string {
	why := h.Reason.String()
	switch {
	case h.Reason == ReasonAllHeld && h.Requested > 0:
		why = fmt.Sprintf("no limit reached: all %d requested held", h.Requested)
	case h.Reason == ReasonAllHeld:
		why = "no limit reached"
	case !math.IsNaN(float64(h.AtS)):
		why += fmt.Sprintf(" at %.0f s", float64(h.AtS))
	}
	if h.Detail != "" {
		why += ": " + h.Detail
	}
	if h.Saturated && h.Reason != ReasonSaturated {
		why += "; load generator saturated: add fleet machines"
	}
	if h.HostBusy {
		why = couldNotJudge + "; " + why
	}
	figures := "relay send " + fmtNum(h.SendGbps, 3) + " Gbps"
	if !slices.Contains(h.Coverage.Off, ReasonCPUIdle) {
		figures += ", relay CPU idle " + fmtNum(h.RelayCPUIdlePct, 0) + " %"
	}
	return fmt.Sprintf("%s; %s %s; %s", why, figures, h.FiguresAt, h.Coverage)
}

func fmtNum(n Num, digits int) string {
	if math.IsNaN(float64(n)) {
		return "-"
	}
	return fmt.Sprintf("%.*f", digits, float64(n))
}

// Line is the headline of one scenario on its own: "N:N held 167 users
// (plateau: ...)".
func (h Headline) Line() string {
	return fmt.Sprintf("%s held %s users (%s)", h.Scenario, h.Number(), h.Why())
}

// HeadlineText is the report's first line: "N:N held 167 users (...), 1:N
// held 200 (...)".
func HeadlineText(hs []Headline) string {
	var parts []string
	for i, h := range hs {
		users := ""
		if i == 0 {
			users = " users"
		}
		parts = append(parts, fmt.Sprintf("%s held %s%s (%s)", h.Scenario, h.Number(), users, h.Why()))
	}
	return strings.Join(parts, ", ")
}

// RunHeadline decides how many users one run's relay held, from its
// samples alone: the earliest of a plateau (logged-in flat for
// PlateauMinS while attempts went on), the first disconnects or login
// failures past the objectives, and the first latency p99 over slo.P99 or
// relay host CPU idle under slo.MinIdlePct for sustain samples (at one
// sample, a breach beats the plateau: it is why logins stopped counting).
// With none of them everyone requested was held, or, when the load
// generator was saturated for sustain samples, at least the most seen
// logged in. Objectives slo turns off decide nothing; those whose figure
// was never measured are named as not judged.
func RunHeadline(r Run, rs RunStats, slo SLO) Headline {
	pts := r.Series.Points
	h := Headline{Scenario: r.Scenario, Requested: r.Requested, Held: rs.MaxLoggedIn, Reason: ReasonAllHeld,
		AtS: Num(math.NaN()), BrokeAt: Num(math.NaN()), FiguresAt: "at peak", SendGbps: rs.PlateauSendGbps, RelayCPUIdlePct: rs.PlateauCPUIdlePct,
		Coverage: coverage(slo, pointsMeasure(pts))}
	event := len(pts) // index of the deciding sample; len: none
	if pl := rs.Plateau; pl.Detected {
		for i, p := range pts {
			if p.T >= float64(pl.WindowFromS) {
				event = i
				break
			}
		}
		h.Reason, h.Held, h.AtS, h.FiguresAt = ReasonPlateau, pl.LoggedIn, pl.WindowFromS, "at plateau"
		h.Detail = fmt.Sprintf("logged-in flat from %.0f s while attempts went on to %.0f", float64(pl.WindowFromS),
			float64(pl.AttemptsAt+pl.AttemptsAfter))
	}
	if b, ok := firstBreach(pts, slo); ok && b.idx <= event {
		event = b.idx
		h.Reason, h.Detail, h.AtS = b.reason, b.detail, Num(pts[b.idx].T)
		h.Held = Num(heldBefore(pts, b))
		h.BrokeAt = Num(pts[b.idx].LoggedIn)
		// The figures of the last seconds before the breach.
		lo := max(0, b.idx-3)
		hi := max(b.idx, lo+1)
		h.SendGbps = meanOf(col(pts[lo:hi], func(p Point) float64 { return p.SendGbps }))
		h.RelayCPUIdlePct = meanOf(col(pts[lo:hi], func(p Point) float64 { return p.RelayCPUIdlePct }))
		h.FiguresAt = fmt.Sprintf("just before (%.0f s)", pts[b.idx].T)
	}
	if h.Reason == ReasonAllHeld && !math.IsNaN(float64(rs.MaxLoggedIn)) && int(rs.MaxLoggedIn) < r.Requested && r.Requested > 0 {
		h.Detail = fmt.Sprintf("the run ended with %.0f of %d logged in, before any limit", float64(rs.MaxLoggedIn), r.Requested)
	}
	h.AlsoBroke = alsoBroke(pts, slo, h.Reason)
	h.Saturated = saturatedNear(pts, min(event, len(pts)-1), slo)
	switch h.Reason {
	case ReasonLatency, ReasonCPUIdle, ReasonDisconnects:
		// Figures a busy host bends; a refusal (login failures, the
		// plateau they make) is the server's whatever the host.
		h.HostBusy = hostBusyNear(pts, min(event, len(pts)-1))
	}
	if h.Reason == ReasonAllHeld {
		// Nothing broke, but a saturated load generator may have hidden
		// what would have: "all held" would claim too much.
		if i, ok := sustainedSaturation(pts, slo); ok {
			h.Reason, h.Saturated, h.AtS = ReasonSaturated, true, Num(pts[i].T)
			h.Detail = saturationFigures(Num(pts[i].FleetCPUIdlePct), Num(pts[i].ScheduleLagP99Ms), slo) + fmt.Sprintf(" for %d s: add fleet machines", sustain)
		}
	}
	return h
}

// sustainedSaturation is the first of sustain samples in a row that show
// the load generator saturated.
func sustainedSaturation(pts []Point, slo SLO) (int, bool) {
	run := 0
	for i, p := range pts {
		if !isSaturated(p, slo) {
			run = 0
			continue
		}
		if run++; run == sustain {
			return i - sustain + 1, true
		}
	}
	return 0, false
}

// alsoBroke are the first breaches of each objective other than decided
// in a run's samples (the load generator's: sustained saturation), in
// Reason order.
func alsoBroke(pts []Point, slo SLO, decided Reason) []Breach {
	out := []Breach{}
	for _, r := range []Reason{ReasonDisconnects, ReasonLoginFailures, ReasonLatency, ReasonCPUIdle} {
		if r == decided || !slo.on(r) {
			continue
		}
		if b, ok := firstBreach(pts, slo.only(r)); ok {
			out = append(out, Breach{r, fmt.Sprintf("at %.0f s: %s", pts[b.idx].T, b.detail)})
		}
	}
	if decided != ReasonSaturated {
		if i, ok := sustainedSaturation(pts, slo); ok {
			out = append(out, Breach{ReasonSaturated, fmt.Sprintf("at %.0f s: %s for %d s", pts[i].T,
				saturationFigures(Num(pts[i].FleetCPUIdlePct), Num(pts[i].ScheduleLagP99Ms), slo), sustain)})
		}
	}
	return out
}

// only is slo with every server objective but r off.
func (s SLO) only(r Reason) SLO {
	o := SLO{MaxDrops: -1, MaxLoginFailPct: -1, MinIdlePct: -1}
	switch r {
	case ReasonDisconnects:
		o.MaxDrops = s.MaxDrops
	case ReasonLoginFailures:
		o.MaxLoginFailPct = s.MaxLoginFailPct
	case ReasonLatency:
		o.P99 = s.P99
	case ReasonCPUIdle:
		o.MinIdlePct = s.MinIdlePct
	}
	return o
}

// breach is the first sample that broke an objective.
type breach struct {
	reason Reason
	idx    int
	detail string
}

// firstBreach scans a run's samples for the first that breaks slo's
// disconnect, login failure or (sustained) latency or relay CPU idle
// objective.
func firstBreach(pts []Point, slo SLO) (breach, bool) {
	over, busy := 0, 0
	for i, p := range pts {
		drops := math.Max(nz(p.SlowConsumerDiscards), nz(p.FleetDisconnects))
		if slo.MaxDrops >= 0 && drops > float64(slo.MaxDrops) {
			return breach{ReasonDisconnects, i, fmt.Sprintf("%.0f logged-in client%s lost (%.0f slow-consumer disconnect%s)", drops, plural(int(drops)),
				nz(p.SlowConsumerDiscards), plural(int(nz(p.SlowConsumerDiscards))))}, true
		}
		if slo.MaxLoginFailPct >= 0 && nz(p.LoginFailures) > 0 && p.LoginAttempts > 0 &&
			100*p.LoginFailures/p.LoginAttempts > slo.MaxLoginFailPct {
			return breach{ReasonLoginFailures, i, fmt.Sprintf("%.0f of %.0f logins failed", p.LoginFailures, p.LoginAttempts)}, true
		}
		if slo.P99 > 0 && p.LatencyP99Ms > float64(slo.P99.Milliseconds()) {
			over++
			if over == sustain {
				j := i - sustain + 1
				return breach{ReasonLatency, j, fmt.Sprintf("p99 %s > %v for %d s", fmtMs(Num(pts[j].LatencyP99Ms), 0), slo.P99, sustain)}, true
			}
		} else {
			over = 0
		}
		if slo.MinIdlePct >= 0 && p.RelayCPUIdlePct < slo.MinIdlePct {
			busy++
			if busy == sustain {
				j := i - sustain + 1
				return breach{ReasonCPUIdle, j, fmt.Sprintf("relay host CPU idle %.0f %% < %s for %d s", pts[j].RelayCPUIdlePct, fmtPct(slo.MinIdlePct), sustain)}, true
			}
		} else {
			busy = 0
		}
	}
	return breach{}, false
}

// heldBefore is how many were logged in when b happened: those who got in
// for login failures, those logged in the sample before for the others.
func heldBefore(pts []Point, b breach) float64 {
	held := 0.0
	end := b.idx
	if b.reason == ReasonLoginFailures {
		end++
	}
	for _, p := range pts[:end] {
		if !math.IsNaN(p.LoggedIn) {
			held = p.LoggedIn
		}
	}
	return held
}

// saturatedNear: most of the few samples up to i show the fleet's host CPU
// idle under, or its schedule lag over, slo's load generator limits.
func saturatedNear(pts []Point, i int, slo SLO) bool {
	if i < 0 {
		return false
	}
	lo := max(0, i-4)
	n, busy := 0, 0
	for _, p := range pts[lo : i+1] {
		n++
		if isSaturated(p, slo) {
			busy++
		}
	}
	return n > 0 && 2*busy > n
}

// isSaturated: the fleet's host CPU idle under, or its schedule lag over,
// slo's load generator limits, while the host was not busy with other
// work: a busy host starves the fleet without the fleet being the limit,
// and adding fleet machines would not help.
func isSaturated(p Point, slo SLO) bool {
	starved := (slo.MinFleetIdlePct > 0 && p.FleetCPUIdlePct < slo.MinFleetIdlePct) ||
		(slo.MaxLagP99 > 0 && p.ScheduleLagP99Ms > float64(slo.MaxLagP99.Microseconds())/1000)
	return starved && !hostBusyMeasured(p)
}

// hostBusyMeasured: the sample shows the fleet's host busy with other
// work, measured: the host's own figure, or its busy share less the
// fleet's and the server's CPU when both were read (unread, their CPU
// would pass for other work).
func hostBusyMeasured(p Point) bool {
	if math.IsNaN(p.HostOtherCores) && (math.IsNaN(p.FleetProcessCPUPct) || math.IsNaN(p.RelayProcessCPUPct)) {
		return false
	}
	return hostBusyCores(p) >= hostBusyMinCores
}

// couldNotJudge opens the reason of an answer decided where the host was
// busy with other work.
const couldNotJudge = "could not judge: this host was busy with other work where the answer was decided (its figures are the host's, not the server's)"

// hostBusyNear: most of the few samples up to i show the fleet's host
// busy with other work (hostBusyCores).
func hostBusyNear(pts []Point, i int) bool {
	if i < 0 {
		return false
	}
	lo := max(0, i-4)
	n, busy := 0, 0
	for _, p := range pts[lo : i+1] {
		n++
		if hostBusyMeasured(p) {
			busy++
		}
	}
	return n > 0 && 2*busy > n
}

// col is get's measured values over pts.
func col(pts []Point, get func(Point) float64) []float64 {
	var v []float64
	for _, p := range pts {
		if x := get(p); !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	return v
}

func nz(v float64) float64 {
	if math.IsNaN(v) {
		return 0
	}
	return v
}

// scenarioHeadline is the headline of a scenario's median run by held
// users (the lower one of an even count).
func scenarioHeadline(hs []Headline) Headline {
	sorted := append([]Headline(nil), hs...)
	sort.SliceStable(sorted, func(i, j int) bool { return float64(sorted[i].Held) < float64(sorted[j].Held) })
	return sorted[(len(sorted)-1)/2]
}
