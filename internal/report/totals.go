package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
)

// Totals are a run's end figures as a load generator reports them with no
// series behind them: what plain `replay` and `replay merge` answer from.
// cmd/replay fills them from the fleet's summary (the report reads
// summaries, not the fleet), with the verdict the run exits with.
type Totals struct {
	// Scenario names the card: "replay", "merged 2 shards", "shard 0/2".
	Scenario  string
	Requested int
	// LoggedIn are the logins that succeeded, PeakLoggedIn the most
	// clients logged in at once.
	LoggedIn, PeakLoggedIn int64
	// LoginsFailed and Cut count failed logins and logged-in clients lost,
	// by reason.
	LoginsFailed, Cut map[string]int64
	// Loss is how the deliveries owed were judged: LossJudged false says
	// why not in LossWhy (nothing numbered, a shard's loss is the merge's,
	// --max-loss off: LossOff).
	LossJudged bool
	LossOff    bool
	LossWhy    string
	// Saturated counts the progress intervals the fleet found limited, by
	// load kind (fleet, host_busy, lag).
	Saturated map[string]int
	// Warnings are the run's warning lines, as the fleet wrote them.
	Warnings []string
	// Failed is the run's verdict as its exit code has it: nil when the
	// run held. The card's reason is this verdict, never a second one.
	Failed *Failure
}

// Failure is a verdict that a run failed: the objective and the line the
// run exits with.
type Failure struct {
	Objective Reason
	Text      string
}

// Load kinds of Totals.Saturated, as the fleet's summary names them.
const (
	loadFleet    = "fleet"
	loadHostBusy = "host_busy"
	loadLag      = "lag"
)

// totalsObjectives are what a run without a series judges: its logins,
// the clients it kept, the deliveries it got, and whether the load
// generator kept up. Latency, the server's CPU and a plateau need a
// series (compare, capacity).
var totalsObjectives = []Reason{ReasonDisconnects, ReasonLoginFailures, ReasonLoss, ReasonSaturated}

// TotalsCard is the answer card of a run without a series. The number is
// the clients it held at once; what decided it is the run's verdict
// (Failed) or, for a run that held, what kept it below what was asked.
func TotalsCard(t Totals) Card {
	c := Card{Scenario: t.Scenario, Held: Num(t.PeakLoggedIn), Number: fmt.Sprint(t.PeakLoggedIn), Reason: ReasonAllHeld,
		BrokeAt: Num(math.NaN()), Health: []Badge{}}
	cut := sumCounts(t.Cut)
	failed := sumCounts(t.LoginsFailed)
	broken := map[Reason]string{}
	if cut > 0 {
		broken[ReasonDisconnects] = fmt.Sprintf("%d of %d logged-in clients cut (%s)", cut, t.LoggedIn, byReasonText(t.Cut))
	}
	if failed > 0 || t.LoggedIn == 0 {
		broken[ReasonLoginFailures] = fmt.Sprintf("%d of %d requested logged in (failed: %s)", t.LoggedIn, t.Requested, byReasonText(t.LoginsFailed))
	}
	switch f := t.Failed; {
	case f != nil && f.Objective == ReasonLoginFailures:
		c.Held, c.Number, c.Reason, c.DecidedBy = 0, "0", f.Objective, f.Text
		broken[f.Objective] = f.Text
	case f != nil && f.Objective == ReasonDisconnects:
		c.Held, c.Number, c.Reason, c.DecidedBy = 0, "0", f.Objective, f.Text
		c.BrokeAt = Num(t.PeakLoggedIn)
		broken[f.Objective] = f.Text
	case f != nil:
		c.Held, c.Number, c.Reason = Num(math.NaN()), fmt.Sprintf("< %d", t.PeakLoggedIn), f.Objective
		c.BrokeAt = Num(t.PeakLoggedIn)
		c.DecidedBy = fmt.Sprintf("broke at %d users: %s", t.PeakLoggedIn, f.Text)
		broken[f.Objective] = f.Text
	case cut > 0:
		held := max(t.PeakLoggedIn-cut, 0)
		c.Held, c.Number, c.Reason = Num(held), fmt.Sprint(held), ReasonDisconnects
		c.DecidedBy = "lost " + broken[ReasonDisconnects]
	case failed > 0 || t.LoggedIn < int64(t.Requested):
		c.Reason = ReasonLoginFailures
		c.DecidedBy = broken[ReasonLoginFailures]
		if failed == 0 {
			c.DecidedBy = fmt.Sprintf("%d of %d requested logged in (the others were not attempted in the run's time)", t.LoggedIn, t.Requested)
		}
	default:
		c.DecidedBy = fmt.Sprintf("no limit reached: all %d requested held", t.Requested)
	}
	if n := t.Saturated[loadFleet]; n > 0 {
		broken[ReasonSaturated] = fmt.Sprintf("saturated in %d progress interval%s: the number is a lower bound", n, plural(n))
		if c.Held > 0 {
			c.Number = "≥ " + c.Number
		}
	}
	for _, r := range totalsObjectives {
		m := Mark{Objective: r, State: MarkPassed}
		switch {
		case r == ReasonLoss && t.LossOff:
			m.State, m.Why = MarkOff, t.LossWhy
		case r == ReasonLoss && !t.LossJudged && broken[r] == "":
			m.State, m.Why = MarkNotJudged, t.LossWhy
		case broken[r] != "":
			m.State, m.Why = MarkBroken, broken[r]
		}
		c.Marks = append(c.Marks, m)
	}
	c.Health = totalsHealth(t)
	return c
}

// totalsHealth are a run's health badges: its warnings by cause, and the
// intervals its fleet found limited even when no line said so.
func totalsHealth(t Totals) []Badge {
	held := map[Cause]string{}
	if n := t.Saturated[loadFleet]; n > 0 {
		held[CauseFleetSaturated] = fmt.Sprintf("%d progress interval%s", n, plural(n))
	}
	if n := t.Saturated[loadHostBusy]; n > 0 {
		held[CauseHostBusy] = fmt.Sprintf("%d progress interval%s", n, plural(n))
	}
	if n := t.Saturated[loadLag]; n > 0 {
		held[CauseFleetLate] = fmt.Sprintf("%d progress interval%s", n, plural(n))
	}
	for _, w := range t.Warnings {
		if c := warningCause(w); c.Health() {
			if _, ok := held[c]; !ok {
				held[c] = ""
			}
		}
	}
	out := []Badge{}
	for _, c := range slices.Sorted(maps.Keys(held)) {
		out = append(out, Badge{Cause: c, Text: c.String(), Anchor: c.Anchor(), Held: held[c]})
	}
	return out
}

func sumCounts(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// byReasonText is counts by reason as "none" or "a=1 b=2", in key order.
func byReasonText(m map[string]int64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
