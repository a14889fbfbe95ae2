package report

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Card is the answer to one scenario at a glance: the users it held, the
// one thing that decided it, a mark for every objective and the run's
// health apart from the answer. It is built from the headline (RunHeadline)
// or the capacity search's answer (Decide), the same values the one-line
// headline is written from, so the card and the line never disagree;
// index.html and the terminal are two renderings of it.
type Card struct {
	Scenario string `json:"scenario"`
	// Held and Number are the users held, Number as written ("85",
	// "≥ 49": the load generator was saturated there, so a lower bound).
	Held   Num    `json:"held"`
	Number string `json:"number"`
	// DecidedBy is what decided it in one line: "broke at 100 users
	// (22 s): latency p99 464 ms > 100ms for 3 s".
	DecidedBy string `json:"decided_by"`
	Reason    Reason `json:"reason"`
	// BrokeAt is the users logged in where an objective broke; NaN when
	// none did.
	BrokeAt Num `json:"broke_at"`
	// Marks are every objective, in Reason order: passed, broken, could
	// not judge (and why) or off.
	Marks []Mark `json:"marks"`
	// Health is what made the run's figures suspect, whatever the
	// answer: each badge links to its warning group.
	Health []Badge `json:"health"`
}

// Title is the card's large line: "held 85 users".
func (c Card) Title() string {
	return fmt.Sprintf("held %s user%s", c.Number, plural(int(nz(float64(c.Held)))))
}

// MarkState is what an answer says of one objective.
type MarkState int

// Mark states, as the card's marks read.
const (
	MarkPassed    MarkState = iota // judged, and kept up to the answer
	MarkBroken                     // judged, and broken where the answer was decided
	MarkNotJudged                  // on, but nothing measured its figure
	MarkOff                        // --slo turned it off
)

var markNames = [...]string{"passed", "broken", "could not judge", "off"}

func (s MarkState) String() string {
	if s < 0 || int(s) >= len(markNames) {
		return "mark(" + strconv.Itoa(int(s)) + ")"
	}
	return markNames[s]
}

// Symbol is the state's sign on the card and the terminal.
func (s MarkState) Symbol() string {
	switch s {
	case MarkPassed:
		return "✓"
	case MarkBroken:
		return "✗"
	case MarkNotJudged:
		return "?"
	}
	return "–"
}

// Class is the state's CSS class in index.html.
func (s MarkState) Class() string {
	switch s {
	case MarkPassed:
		return "passed"
	case MarkBroken:
		return "broken"
	case MarkNotJudged:
		return "notjudged"
	}
	return "off"
}

// MarshalText writes the state's words (summary.json).
func (s MarkState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads them back.
func (s *MarkState) UnmarshalText(b []byte) error {
	for i, n := range markNames {
		if n == string(b) {
			*s = MarkState(i)
			return nil
		}
	}
	return fmt.Errorf("unknown mark %q", b)
}

// Mark is one objective's state on a card, with why it could not be
// judged or the figure that broke it. Broken is broken anywhere in the
// run: the one that decided, or later ("also broke at 3 s: ...").
type Mark struct {
	Objective Reason    `json:"objective"`
	State     MarkState `json:"state"`
	Why       string    `json:"why,omitempty"`
}

// Name is how the card names the objective.
func (m Mark) Name() string { return objectiveName(m.Objective) }

// Badge is one health finding on a card: its words and the warning
// group (index.html anchor) that holds the evidence.
type Badge struct {
	Cause  Cause  `json:"cause"`
	Text   string `json:"text"`
	Anchor string `json:"anchor"`
	// Held is how long or how much, in the card's runs.
	Held string `json:"held"`
}

// HeadlineCard is the card of a compare scenario's headline.
func HeadlineCard(h Headline) Card {
	c := Card{Scenario: h.Scenario, Held: h.Held, Number: h.Number(), Reason: h.Reason, BrokeAt: h.BrokeAt, Health: []Badge{}}
	c.DecidedBy = headlineDecided(h)
	if h.HostBusy {
		c.DecidedBy = couldNotJudge + "; " + c.DecidedBy
	}
	broken := map[Reason]string{}
	if h.Reason != ReasonAllHeld {
		broken[h.Reason] = h.Detail
	}
	for _, b := range h.AlsoBroke {
		broken[b.Reason] = "also broke " + b.Text
	}
	if h.Saturated && h.Reason != ReasonSaturated {
		broken[ReasonSaturated] = "saturated where the answer was decided: the number is a lower bound"
	}
	c.Marks = marks(h.Coverage, broken)
	return c
}

// headlineDecided is the card's line for what decided a headline.
func headlineDecided(h Headline) string {
	switch h.Reason {
	case ReasonAllHeld:
		if h.Detail != "" {
			return "no limit reached: " + h.Detail
		}
		if h.Requested > 0 {
			return fmt.Sprintf("no limit reached: all %d requested held", h.Requested)
		}
		return "no limit reached"
	case ReasonPlateau:
		return fmt.Sprintf("logins plateaued at %s s: %s", fmtNum(h.AtS, 0), h.Detail)
	case ReasonSaturated:
		return fmt.Sprintf("the load generator could not keep up from %s s: %s", fmtNum(h.AtS, 0), h.Detail)
	}
	at := fmt.Sprintf("broke at %s s", fmtNum(h.AtS, 0))
	if !math.IsNaN(float64(h.BrokeAt)) {
		at = fmt.Sprintf("broke at %s users (%s s)", fmtNum(h.BrokeAt, 0), fmtNum(h.AtS, 0))
	}
	return at + ": " + breachWords(h.Reason, h.Detail)
}

// breachWords names the objective before a detail that does not: "p99
// 190 ms > 100ms" is "latency p99 190 ms > 100ms".
func breachWords(r Reason, detail string) string {
	if r == ReasonLatency && strings.HasPrefix(detail, "p99") {
		return "latency " + detail
	}
	return detail
}

// CapacityCard is the card of a capacity search's answer.
func CapacityCard(c Capacity) Card {
	card := Card{Scenario: c.Scenario, Held: c.Held, Number: fmtNum(c.Held, 0), Reason: c.Reason, BrokeAt: Num(math.NaN()), Health: []Badge{}}
	if c.BrokeAt > 0 {
		card.BrokeAt = Num(c.BrokeAt)
	}
	if c.Saturated {
		card.Number = "≥ " + card.Number
	}
	broken := map[Reason]string{}
	switch {
	case len(c.Levels) == 0:
		card.Number, card.DecidedBy = "?", "no level completed"
	case c.BrokeAt == 0:
		card.DecidedBy = fmt.Sprintf("no limit reached: all %d requested held", c.Requested)
		if c.Detail != "" {
			card.DecidedBy = "no limit reached: " + c.Detail
		}
	default:
		card.DecidedBy = fmt.Sprintf("broke at %d users: %s", c.BrokeAt, c.Detail)
		for _, l := range c.Levels {
			if l.Clients == c.BrokeAt {
				for _, b := range l.Breaches {
					broken[b.Reason] = b.Text
				}
			}
		}
	}
	if c.Saturated {
		if _, ok := broken[ReasonSaturated]; !ok {
			broken[ReasonSaturated] = "saturated where the answer was decided: the number is a lower bound"
		}
	}
	card.Marks = marks(c.Coverage, broken)
	return card
}

// marks are every objective's mark from an answer's coverage and the
// objectives it found broken (with their figure).
func marks(cov Coverage, broken map[Reason]string) []Mark {
	var out []Mark
	for _, r := range objectives {
		m := Mark{Objective: r, State: MarkPassed}
		switch {
		case slices.Contains(cov.Off, r):
			m.State = MarkOff
		case notJudged(cov, r) != "":
			m.State, m.Why = MarkNotJudged, notJudged(cov, r)
		case broken[r] != "":
			m.State, m.Why = MarkBroken, broken[r]
		}
		out = append(out, m)
	}
	return out
}

func notJudged(cov Coverage, r Reason) string {
	for _, u := range cov.NotJudged {
		if u.Objective == r {
			return u.Why
		}
	}
	return ""
}

// Cards are a report's answer cards: the capacity search's, or one per
// compare scenario from its headline, each with the health badges of the
// warning groups that touched its scenario.
func Cards(s Summary) []Card {
	var cards []Card
	if s.Capacity != nil {
		cards = append(cards, CapacityCard(*s.Capacity))
	} else {
		for _, sc := range s.Scenarios {
			cards = append(cards, HeadlineCard(sc.Headline))
		}
	}
	for i := range cards {
		for _, g := range s.WarningGroups {
			if !g.Cause.Health() || (len(g.Scenarios) > 0 && !slices.Contains(g.Scenarios, cards[i].Scenario) && s.Capacity == nil) {
				continue
			}
			var held []string
			for _, h := range g.Held {
				if s.Capacity != nil || strings.HasPrefix(h, cards[i].Scenario+" #") {
					held = append(held, h)
				}
			}
			cards[i].Health = append(cards[i].Health, Badge{Cause: g.Cause, Text: g.Cause.String(), Anchor: g.Anchor(), Held: strings.Join(held, "; ")})
		}
	}
	return cards
}

// WriteCardsText prints the cards for a terminal: the same shape as the
// page, in plain text.
//
//	N:N  held 85 users
//	     broke at 100 users (22 s): latency p99 464 ms > 100ms for 3 s
//	     objectives: ✓ plateau  ✓ drops  ✗ latency p99  ? relay CPU idle (no server metrics: ...)  – load generator
//	     health: fleet saturated · server dropped traffic (see the warnings)
func WriteCardsText(w io.Writer, cards []Card) error {
	width := 0
	for _, c := range cards {
		width = max(width, len([]rune(c.Scenario)))
	}
	for _, c := range cards {
		pad := strings.Repeat(" ", width+2)
		lines := []string{
			fmt.Sprintf("%-*s  %s", width, c.Scenario, c.Title()),
			pad + c.DecidedBy,
			pad + "objectives: " + marksText(c.Marks),
		}
		if len(c.Health) > 0 {
			var hs []string
			for _, b := range c.Health {
				hs = append(hs, b.Text)
			}
			lines = append(lines, pad+"health: "+strings.Join(hs, " · ")+" (see the warnings)")
		}
		if _, err := fmt.Fprintln(w, strings.Join(lines, "\n")); err != nil {
			return fmt.Errorf("write answer: %w", err)
		}
	}
	return nil
}

// marksText is the marks in one line: "✓ plateau  ✗ latency p99  ?
// relay CPU idle (why)  – load generator".
func marksText(ms []Mark) string {
	var parts []string
	for _, m := range ms {
		p := m.State.Symbol() + " " + m.Name()
		if m.State == MarkNotJudged {
			p += " (could not judge: " + m.Why + ")"
		}
		if at, _, ok := strings.Cut(m.Why, ":"); ok && m.State == MarkBroken && strings.HasPrefix(at, "also broke ") {
			p += " (" + at + ")"
		}
		if m.State == MarkOff {
			p += " (off)"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "  ")
}
