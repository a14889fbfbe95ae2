package report

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// cardCase is one recorded run (testdata/headline, written by replay
// compare on this project's 2-core machine) judged under one --slo: the
// four cases an answer card must tell apart.
type cardCase struct {
	name, file string
	requested  int
	slo        string
	// Expected on the card: its number, the state of each objective
	// named, and the health badges (causes), in order.
	number string
	marks  map[Reason]MarkState
	health []Cause
}

var cardCases = []cardCase{
	// 10 clients, everything held, the load generator's limits off. All
	// four were recorded on a shared host: its other work shows as health.
	{"held", "small.csv", 10, "idle=off,fleet_idle=off,lag=off", "10",
		map[Reason]MarkState{ReasonPlateau: MarkPassed, ReasonLatency: MarkPassed, ReasonCPUIdle: MarkOff}, []Cause{CauseHostBusy}},
	// make demo on a loaded host: p99 over 100 ms from 22 s.
	{"broken", "demo-loaded.csv", 200, "idle=off,fleet_idle=off,lag=off", "85",
		map[Reason]MarkState{ReasonLatency: MarkBroken, ReasonDisconnects: MarkPassed, ReasonSaturated: MarkOff}, []Cause{CauseFleetSaturated, CauseHostBusy}},
	// A server without stamps: latency could not be judged.
	{"not-judged", "small-nostamps.csv", 10, "idle=off,fleet_idle=off,lag=off", "10",
		map[Reason]MarkState{ReasonLatency: MarkNotJudged, ReasonPlateau: MarkPassed}, []Cause{CauseHostBusy}},
	// A host at load ~18 on 2 cores: no idle CPU from the first second,
	// the fleet and the relay using a fraction of a core.
	{"saturated-host", "roomcap.csv", 60, "", "≥ 0",
		map[Reason]MarkState{ReasonCPUIdle: MarkBroken, ReasonSaturated: MarkBroken}, []Cause{CauseFleetSaturated, CauseHostBusy}},
}

// cardInput is a case's report input.
func (cc cardCase) input(t *testing.T) Input {
	t.Helper()
	r := readRecorded(t, cc.file, "N:N")
	r.Requested = cc.requested
	slo := DefaultSLO()
	if err := slo.Set(cc.slo); err != nil {
		t.Fatal(err)
	}
	return Input{Title: "reprise compare: " + cc.name, Generated: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC),
		Runs: []Run{r}, SLO: &slo, Params: []Param{{"fixture", "testdata/headline/" + cc.file}, {"slo", slo.String()}}}
}

// TestCardGolden: each case's card and warnings, as the terminal prints
// them, against testdata/card/NAME.golden; the card's number and reason
// are the headline's (one source), its marks and health the expected.
func TestCardGolden(t *testing.T) {
	for _, cc := range cardCases {
		t.Run(cc.name, func(t *testing.T) {
			sum := Analyze(cc.input(t))
			if len(sum.Cards) != 1 {
				t.Fatalf("%d cards, want 1", len(sum.Cards))
			}
			card, h := sum.Cards[0], sum.Scenarios[0].Headline
			if card.Number != h.Number() || card.Reason != h.Reason || card.Held != h.Held {
				t.Errorf("card %q (%v) is not the headline's %q (%v)", card.Number, card.Reason, h.Number(), h.Reason)
			}
			if card.Number != cc.number {
				t.Errorf("card number %q, want %q", card.Number, cc.number)
			}
			for _, m := range card.Marks {
				if want, ok := cc.marks[m.Objective]; ok && m.State != want {
					t.Errorf("%s: %v (%s), want %v", m.Name(), m.State, m.Why, want)
				}
			}
			var causes []Cause
			for _, b := range card.Health {
				causes = append(causes, b.Cause)
			}
			if !equalCauses(causes, cc.health) {
				t.Errorf("health %v, want %v", causes, cc.health)
			}
			var buf bytes.Buffer
			if err := WriteCardsText(&buf, sum.Cards); err != nil {
				t.Fatal(err)
			}
			if err := WriteWarningsText(&buf, sum.WarningGroups); err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("testdata", "card", cc.name+".golden"), buf.Bytes())
		})
	}
}

func equalCauses(a, b []Cause) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCardSaysWhatDecidedIt: a broken card names the users it broke at,
// when, and the objective with its figure; every objective gets one mark.
func TestCardSaysWhatDecidedIt(t *testing.T) {
	sum := Analyze(cardCases[1].input(t))
	card := sum.Cards[0]
	if !strings.HasPrefix(card.DecidedBy, "broke at ") || !strings.Contains(card.DecidedBy, "users (22 s): latency p99 ") {
		t.Errorf("decided by %q: want the users and second it broke at and the latency figure", card.DecidedBy)
	}
	if len(card.Marks) != len(objectives) {
		t.Errorf("%d marks, want one per objective (%d)", len(card.Marks), len(objectives))
	}
	if card.Title() != "held 85 users" {
		t.Errorf("title %q", card.Title())
	}
}

// TestCapacityCard: a capacity search's card is its answer (Decide): the
// users held, the level that broke and its objective, that objective's
// mark broken and the rest passed.
func TestCapacityCard(t *testing.T) {
	in := []float64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100}
	slow := []float64{5, 5, 5, 5, 5, 5, 5, 150, 300, 300}
	levels := []Level{level(50, 50, 0, 0, 5, 50, 60, 0, 5), level(100, 100, 0, 0, 250, 50, 60, 5, 10)}
	capa := Decide("N:N", 100, levels, points(in, slow, make([]float64, 10)), DefaultSLO())
	sum := Analyze(Input{Runs: []Run{{Scenario: "N:N", Repeat: 1, Requested: 100, Series: Series{Points: points(in, slow, make([]float64, 10))}}}, Capacity: &capa})
	if len(sum.Cards) != 1 {
		t.Fatalf("%d cards, want the search's one", len(sum.Cards))
	}
	c := sum.Cards[0]
	if c.Title() != "held 70 users" || c.DecidedBy != "broke at 100 users: latency p99 250.0 ms > 100ms" || float64(c.BrokeAt) != 100 {
		t.Errorf("card %q, %q, broke at %v", c.Title(), c.DecidedBy, c.BrokeAt)
	}
	for _, m := range c.Marks {
		want := MarkPassed
		if m.Objective == ReasonLatency {
			want = MarkBroken
		}
		if m.State != want {
			t.Errorf("%s: %v, want %v", m.Name(), m.State, want)
		}
	}
}
