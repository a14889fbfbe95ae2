package report

import (
	"bytes"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
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
	// make demo on a loaded host: p99 over 100 ms from 22 s, and later,
	// from 45 s, slow-consumer disconnects: drops broke too.
	{"broken", "demo-loaded.csv", 200, "idle=off,fleet_idle=off,lag=off", "85",
		map[Reason]MarkState{ReasonLatency: MarkBroken, ReasonDisconnects: MarkBroken, ReasonLoginFailures: MarkPassed, ReasonSaturated: MarkOff}, []Cause{CauseFleetSaturated, CauseHostBusy}},
	// A server without stamps: latency could not be judged.
	{"not-judged", "small-nostamps.csv", 10, "idle=off,fleet_idle=off,lag=off", "10",
		map[Reason]MarkState{ReasonLatency: MarkNotJudged, ReasonPlateau: MarkPassed}, []Cause{CauseHostBusy}},
	// A host at load ~18 on 2 cores: no idle CPU from the first second,
	// the fleet and the relay using a fraction of a core. The relay CPU
	// objective broke on the host's other work: could not judge (it once
	// said "held ≥ 0", blaming the fleet).
	{"saturated-host", "roomcap.csv", 60, "", "?",
		map[Reason]MarkState{ReasonCPUIdle: MarkBroken, ReasonSaturated: MarkPassed, ReasonLoginFailures: MarkBroken, ReasonLatency: MarkPassed}, []Cause{CauseFleetSaturated, CauseHostBusy}},
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
			if !slices.Equal(causes, cc.health) {
				t.Errorf("health %v, want %v", causes, cc.health)
			}
			var buf bytes.Buffer
			if err := WriteCardsText(&buf, sum.Cards); err != nil {
				t.Fatal(err)
			}
			if err := WriteWarningsText(&buf, sum.WarningGroups); err != nil {
				t.Fatal(err)
			}
			testproc.Golden(t, filepath.Join("testdata", "card", cc.name+".golden"), buf.Bytes(), *update, "-update")
		})
	}
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

// TestWarningCause: the fleet's, the orchestration's and this package's
// warnings, in their own words, fall under one cause each.
func TestWarningCause(t *testing.T) {
	for _, tt := range []struct {
		line string
		want Cause
	}{
		{"fleet: WARNING: the fleet is saturated (fleet process 1.90 of 2 usable cores, other work 0.05 cores, host 3% idle, steal 0%, send lag p99 9ms): add fleet machines; results understate the server", CauseFleetSaturated},
		{"fleet: WARNING: this host is busy with other work, not the fleet (fleet process 0.10 of 2 usable cores, other work 1.80 cores, host 2% idle, steal 0%, send lag p99 40ms): the figures are unreliable", CauseHostBusy},
		{"fleet: WARNING: the fleet's sends went out late with CPU to spare (fleet process 0.20 of 2 usable cores, other work 0.10 cores, host 80% idle, steal 0%, send lag p99 12ms): the figures of those intervals are late, not the server's", CauseFleetLate},
		{"fleet: WARNING: shard 1/2's host was busy with other work (host_busy): the merged figures are unreliable", CauseHostBusy},
		{"fleet: WARNING: the fleet is behind its schedule (send lag p99 69.06ms > 5ms): results understate the server", CauseFleetSaturated},
		{"load generator saturated: fleet host CPU idle under 20% for 80 of 80 seconds; the relay's numbers are understated", CauseFleetSaturated},
		{"this host is busy with other work: at least 0.9 cores beside the fleet and the relay for 73 of 80 s; the figures are unreliable", CauseHostBusy},
		{"kernel drops on this host during the run (all processes, not only this run's sockets): 494 (UDP rcvbuf 494, UDP sndbuf 0, TCP listen 0, TCP backlog 0, softnet 0)", CauseKernelDrops},
		{"relay UDP receive drops: 12 datagrams found the relay's socket buffers full (it read too slowly): those sends never reached their rooms", CauseServerDropped},
		{"deliveries lost: 1.798% of the numbered room-wide casts never arrived (UDP loss; see loss_pct)", CauseLoss},
		{"1 scrapes failed; those seconds are missing from the series (last: context deadline exceeded)", CauseScrapes},
		{"fleet: WARNING: shard 0/1 began 21ms after the common start 2026-11-24T16:43:12Z: its schedule keeps that start (its first logins are late, not shifted)", CauseShards},
		{"relay still had 3 connections 10s after the run", CauseRun},
		{"interrupted: the report covers only the runs listed", CauseRun},
		{"fleet: WARNING: the login ramp takes 50s (200 clients, one every 250ms) but --duration is 10s", CauseOther},
	} {
		if got := warningCause(tt.line); got != tt.want {
			t.Errorf("%q: %v, want %v", tt.line, got, tt.want)
		}
	}
}
