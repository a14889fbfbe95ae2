package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Cause is why a warning was given: one cause, however many runs, shards
// and progress lines repeated it in their own words. Its String is the
// warning group's heading and the health badge's words; Anchor is the
// group's id in index.html, which the badges link to.
type Cause int

// Causes, in the order the warnings show them: the run's health first
// (what makes the answer's figures suspect), then how it was measured.
const (
	CauseFleetSaturated Cause = iota // the load generator could not keep up
	CauseFleetLate                   // its sends went out late with CPU to spare
	CauseHostBusy                    // the fleet's host did other work
	CauseServerDropped               // the server dropped traffic or cut clients
	CauseLoss                        // deliveries never arrived
	CauseKernelDrops                 // the host's kernel dropped packets
	CauseScrapes                     // samples are missing
	CauseShards                      // how the fleet's shards started
	CauseRun                         // the run itself: interrupted, not drained
	CauseOther                       // anything not known above, verbatim
)

var causeNames = [...]string{"fleet saturated", "fleet sends late", "host busy with other work", "server dropped traffic",
	"deliveries lost", "kernel drops", "samples missing", "fleet shards", "the run", "other"}

func (c Cause) String() string {
	if c < 0 || int(c) >= len(causeNames) {
		return "cause(" + strconv.Itoa(int(c)) + ")"
	}
	return causeNames[c]
}

// MarshalText writes the cause's words (summary.json).
func (c Cause) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads them back.
func (c *Cause) UnmarshalText(b []byte) error {
	for i, n := range causeNames {
		if n == string(b) {
			*c = Cause(i)
			return nil
		}
	}
	return fmt.Errorf("unknown cause %q", b)
}

// Anchor is the cause's warning group's id in index.html.
func (c Cause) Anchor() string { return "warn-" + strings.ReplaceAll(c.String(), " ", "-") }

// Health says whether the cause is about the run's health (a badge on
// the answer card) rather than how it was measured.
func (c Cause) Health() bool { return c <= CauseLoss }

// Advice is what to do about the cause.
func (c Cause) Advice() string {
	switch c {
	case CauseFleetSaturated:
		return "add fleet machines (--shards) or give each fleet fewer clients: the server may hold more than the answer says"
	case CauseFleetLate:
		return "the fleet's sends went out late with CPU to spare (timers, GC pauses): give each fleet process fewer clients (--shards); those seconds' figures are the fleet's lateness, not the server's"
	case CauseHostBusy:
		return "run on a host with nothing else busy, or put the fleet on its own host: the figures are unreliable"
	case CauseServerDropped:
		return "the server refused, cut or dropped traffic: check its limits (rate limit, room size, socket buffers, slow-consumer policy)"
	case CauseLoss:
		return "deliveries the server should have made never arrived: check the server's drops and the host's kernel drops"
	case CauseKernelDrops:
		return "host-wide counters: raise the socket buffers (net.core.rmem_max) or read faster; other processes count too"
	case CauseScrapes:
		return "those seconds are missing from the series and charts: check that /metrics answers within the sampling interval"
	case CauseShards:
		return "shards that start late keep their schedule: compare their start skew with the login interval"
	case CauseRun:
		return "the report covers only what ran: run again to completion"
	}
	return "read the lines below"
}

// causeWords tell a warning's cause from its words: warnings come as text
// from the fleet's summary (the report reads summaries, not the fleet),
// from the orchestration and from this package. The first match wins, so
// the more specific words come first.
var causeWords = []struct {
	cause Cause
	words []string
}{
	{CauseHostBusy, []string{"busy with other work", "host is busy"}},
	{CauseKernelDrops, []string{"kernel drops"}},
	{CauseScrapes, []string{"scrapes failed", "scrape failed"}},
	{CauseServerDropped, []string{"udp receive drops", "rate-limited", "rate limited", "rejected", "slow-consumer", "slow consumer", "server dropped"}},
	{CauseLoss, []string{"deliveries lost", "lost", "received nothing", "none arrived"}},
	{CauseFleetLate, []string{"went out late with cpu to spare"}},
	{CauseFleetSaturated, []string{"saturated", "behind its schedule", "schedule lag", "add fleet machines"}},
	{CauseShards, []string{"shard"}},
	{CauseRun, []string{"interrupted", "stopped early", "still had", "drain", "no server metrics", "skipped"}},
}

// warningCause is the cause of one warning line.
func warningCause(w string) Cause {
	lw := strings.ToLower(w)
	for _, cw := range causeWords {
		for _, word := range cw.words {
			if strings.Contains(lw, word) {
				return cw.cause
			}
		}
	}
	return CauseOther
}

// WarningGroup is every warning of one cause, said once: for how long it
// held in each run it touched, what to do, and the lines as given.
type WarningGroup struct {
	Cause Cause `json:"cause"`
	// Held is how long or how much, per run: "N:N #1: 80 of 80 s".
	Held []string `json:"held"`
	// Scenarios are the scenarios it touched; empty: the whole report.
	Scenarios []string `json:"scenarios"`
	Advice    string   `json:"advice"`
	// Lines are the warnings as their sources wrote them, each once.
	Lines []string `json:"lines"`
}

// Anchor is the group's id in index.html.
func (g WarningGroup) Anchor() string { return g.Cause.Anchor() }

// HeldText is Held in one line.
func (g WarningGroup) HeldText() string { return strings.Join(g.Held, "; ") }

// groupWarnings sorts a report's warnings by cause, each cause once, in
// Cause order: the report's own (global), then each run's, whose figures
// say how long the cause held.
func groupWarnings(global []string, runs []RunStats) []WarningGroup {
	byCause := map[Cause]*WarningGroup{}
	get := func(c Cause) *WarningGroup {
		g := byCause[c]
		if g == nil {
			g = &WarningGroup{Cause: c, Advice: c.Advice(), Held: []string{}, Scenarios: []string{}, Lines: []string{}}
			byCause[c] = g
		}
		return g
	}
	addLine := func(g *WarningGroup, line string) {
		if !slices.Contains(g.Lines, line) {
			g.Lines = append(g.Lines, line)
		}
	}
	for _, w := range global {
		addLine(get(warningCause(w)), w)
	}
	for _, rs := range runs {
		name := fmt.Sprintf("%s #%d", rs.Scenario, rs.Repeat)
		touched := map[Cause]bool{}
		for _, w := range rs.Warnings {
			c := warningCause(w)
			if c == CauseFleetSaturated && !(rs.FleetSaturatedS > 0) && rs.HostBusyS > 0 && !strings.Contains(w, "usable cores") {
				// A warning from the host's idle alone said the fleet was
				// starved; the samples say the host's other work starved
				// it. (A fleet that read its own CPU, "… of N usable
				// cores", is believed.)
				c = CauseHostBusy
			}
			addLine(get(c), name+": "+w)
			touched[c] = true
		}
		// Health found in the samples, even when no line said it.
		for c, held := range runHealth(rs) {
			touched[c] = true
			get(c).Held = append(get(c).Held, name+": "+held)
		}
		for c := range touched {
			g := get(c)
			if !slices.Contains(g.Scenarios, rs.Scenario) {
				g.Scenarios = append(g.Scenarios, rs.Scenario)
			}
		}
	}
	var out []WarningGroup
	for c := Cause(0); c <= CauseOther; c++ {
		if g := byCause[c]; g != nil {
			out = append(out, *g)
		}
	}
	return out
}

// runHealth is how long or how much each health cause held in one run,
// from its figures: seconds saturated and busy, what the server dropped,
// the deliveries lost.
func runHealth(rs RunStats) map[Cause]string {
	out := map[Cause]string{}
	of := fmtNum(rs.SampledS, 0)
	if s := float64(rs.FleetSaturatedS); s > 0 {
		out[CauseFleetSaturated] = fmt.Sprintf("%.0f of %s s from %s s", s, of, fmtNum(rs.FleetSaturatedFromS, 0))
	}
	if s := float64(rs.HostBusyS); s > 0 {
		out[CauseHostBusy] = fmt.Sprintf("%.0f of %s s from %s s, at least %s cores of other work", s, of, fmtNum(rs.HostBusyFromS, 0), fmtNum(rs.HostOtherCoresMax, 1))
	}
	var dropped []string
	if v := float64(rs.RejectedFrames); v > 0 {
		dropped = append(dropped, fmt.Sprintf("%.0f frames rejected", v))
	}
	if v := float64(rs.RelayUDPReceiveDrops); v > 0 {
		dropped = append(dropped, fmt.Sprintf("%.0f datagrams dropped unread", v))
	}
	if v := float64(rs.SlowConsumerDisconnects); v > 0 {
		dropped = append(dropped, fmt.Sprintf("%.0f slow consumers cut", v))
	}
	if len(dropped) > 0 {
		out[CauseServerDropped] = strings.Join(dropped, ", ")
	}
	if l := float64(rs.LossPct); l > 0 {
		out[CauseLoss] = fmt.Sprintf("%.3f %% of numbered deliveries", l)
	}
	return out
}

// hostBusyCores is the least the fleet's host spent on work other than
// the fleet and the server in one sample, in cores: its busy share less
// what the two processes used, counting the host as one CPU (more CPUs
// only make the other work larger, so this is a lower bound, whatever the
// host). NaN when the host's idle was not read. A point that carries the
// host's own figure (HostOtherCores, from the fleet's /proc/stat reading)
// gives that instead.
func hostBusyCores(p Point) float64 {
	if !math.IsNaN(p.HostOtherCores) {
		return p.HostOtherCores
	}
	if math.IsNaN(p.FleetCPUIdlePct) {
		return math.NaN()
	}
	own := (nz(p.FleetProcessCPUPct) + nz(p.RelayProcessCPUPct)) / 100
	return math.Max(0, (100-p.FleetCPUIdlePct)/100-own)
}

// healthSLO is the load generator's limits the run's health is judged
// by, whatever --slo turned off: health is apart from the answer.
var healthSLO = SLO{MinFleetIdlePct: saturatedCPUIdlePct, MaxLagP99: saturatedLagP99}

// healthSeconds counts, over a run's samples, the seconds the fleet was
// saturated by its own work (isSaturated by healthSLO: starved while its
// host was not measured busy with other work) and the seconds the host was busy with other work, each
// with the first second it was seen, and the most other work seen.
func healthSeconds(pts []Point) (sat, satFrom, busy, busyFrom, otherMax Num) {
	nan := Num(math.NaN())
	sat, satFrom, busy, busyFrom, otherMax = 0, nan, 0, nan, nan
	prevT := 0.0
	for _, p := range pts {
		dt := p.T - prevT
		prevT = p.T
		other := hostBusyCores(p)
		if !math.IsNaN(other) && (math.IsNaN(float64(otherMax)) || other > float64(otherMax)) {
			otherMax = Num(other)
		}
		if hostBusyMeasured(p) {
			busy += Num(dt)
			if math.IsNaN(float64(busyFrom)) {
				busyFrom = Num(p.T)
			}
			continue
		}
		if isSaturated(p, healthSLO) {
			sat += Num(dt)
			if math.IsNaN(float64(satFrom)) {
				satFrom = Num(p.T)
			}
		}
	}
	return sat, satFrom, busy, busyFrom, otherMax
}

// WriteWarningsText prints the warning groups for a terminal, each cause
// once: "warning: fleet saturated (N:N #1: 80 of 80 s from 1 s): add
// fleet machines ...". Lines of no known cause are printed as given.
func WriteWarningsText(w io.Writer, groups []WarningGroup) error {
	for _, g := range groups {
		line := "warning: " + g.Cause.String()
		if len(g.Held) > 0 {
			line += " (" + g.HeldText() + ")"
		}
		line += ": " + g.Advice
		if n := len(g.Lines); n > 0 && g.Cause != CauseOther {
			line += fmt.Sprintf(" [%d line%s in the report]", n, plural(n))
		}
		if g.Cause == CauseOther {
			line = "warning: " + strings.Join(g.Lines, "\nwarning: ")
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return fmt.Errorf("write warnings: %w", err)
		}
	}
	return nil
}
