package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// answerCard is the answer card a replay printed after its summary table,
// in the figures that do not depend on the machine: the health line (a
// loaded host is a badge), the load generator's mark and the "≥" it puts
// before a number (a starved fleet's number is a lower bound) are left
// out, and with mask its numbers are N.
func answerCard(out string, mask bool) string {
	var b strings.Builder
	in := false
	for _, l := range strings.Split(out, "\n") {
		title := cardTitle.MatchString(l)
		switch {
		case title:
			in = true
		case !in || !strings.HasPrefix(l, " "):
			in = false
			continue
		case strings.Contains(l, "health: "):
			continue
		}
		l = loadMark.ReplaceAllString(l, "· load generator")
		l = strings.Replace(l, "held ≥ ", "held ", 1)
		if mask {
			l = maskNumbers(l)
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

var (
	cardTitle = regexp.MustCompile(`^(replay|shard \d+/\d+|merged \d+ shards)  +held `)
	loadMark  = regexp.MustCompile(`[✓✗?–] load generator`)
)

// goldenAnswer compares got with testdata/answer/name.golden
// (-update-broken rewrites it).
func goldenAnswer(t *testing.T, name, got string) {
	t.Helper()
	want := string(testproc.ReadGolden(t, filepath.Join("testdata", "answer", name+".golden"), []byte(got), *updateBroken, "-update-broken"))
	if got != want {
		t.Errorf("answer card:\n%s\nwant:\n%s", got, want)
	}
}

// TestAnswerIsTheVerdict: the card of a run without a series takes its
// reason from the error the run exits with (one source), and its number
// from what the run held.
func TestAnswerIsTheVerdict(t *testing.T) {
	held := fleet.Summary{ClientsRequested: 4, LoginAttempts: 4, LoginsSucceeded: 4, PeakLoggedIn: 4,
		Deliveries: fleet.Deliveries{Expected: 100, Received: 100, Receivers: 4}}
	lossy := held
	lossy.Deliveries = fleet.Deliveries{Expected: 100, Received: 90, Lost: 10, LossPercent: 10, Receivers: 4}
	cut := held
	cut.Disconnects = map[string]int64{"closed_by_relay": 4}
	someCut := held
	someCut.Disconnects = map[string]int64{"slow_consumer": 1}
	refused := held
	refused.LoginsSucceeded, refused.PeakLoggedIn, refused.LoginsFailed = 0, 0, map[string]int64{"refused": 4}
	fewer := held
	fewer.LoginsSucceeded, fewer.PeakLoggedIn, fewer.LoginsFailed = 3, 3, map[string]int64{"timeout": 1}
	shard := lossy
	shard.Shard = "0/2"
	saturated := held
	saturated.Saturation = map[string]int{"fleet": 2}
	cases := []struct {
		name    string
		sum     fleet.Summary
		maxLoss float64
		title   string
		reason  report.Reason
		states  string // the marks: drops, logins, deliveries, load generator
	}{
		{"held", held, 1, "held 4 users", report.ReasonAllHeld, "passed passed passed passed"},
		{"lossy", lossy, 1, "held < 4 users", report.ReasonLoss, "passed passed broken passed"},
		{"lossy, --max-loss off", lossy, -1, "held 4 users", report.ReasonAllHeld, "passed passed off passed"},
		{"all cut", cut, 1, "held 0 users", report.ReasonDisconnects, "broken passed passed passed"},
		{"one cut", someCut, 1, "held 3 users", report.ReasonDisconnects, "broken passed passed passed"},
		{"none logged in", refused, 1, "held 0 users", report.ReasonLoginFailures, "passed broken passed passed"},
		{"one login failed", fewer, 1, "held 3 users", report.ReasonLoginFailures, "passed broken passed passed"},
		{"a shard's loss", shard, 1, "held 4 users", report.ReasonAllHeld, "passed passed could not judge passed"},
		{"fleet saturated", saturated, 1, "held ≥ 4 users", report.ReasonAllHeld, "passed passed passed broken"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			verdict := tc.sum.Check(tc.maxLoss)
			card := report.TotalsCard(totalsOf(tc.sum, tc.maxLoss, verdict))
			if card.Title() != tc.title || card.Reason != tc.reason {
				t.Errorf("card %q (%v), want %q (%v)", card.Title(), card.Reason, tc.title, tc.reason)
			}
			var states []string
			for _, m := range card.Marks {
				states = append(states, m.State.String())
			}
			if got := strings.Join(states, " "); got != tc.states {
				t.Errorf("marks %s, want %s", got, tc.states)
			}
			if verdict != nil {
				line := strings.TrimPrefix(verdict.Error(), fleet.ErrBrokenServer.Error()+": ")
				if !strings.HasSuffix(card.DecidedBy, line) {
					t.Errorf("decided by %q: not the verdict %q", card.DecidedBy, verdict)
				}
			}
			var buf bytes.Buffer
			if err := writeAnswer(&buf, tc.sum, tc.maxLoss, verdict); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(buf.String(), "replay  "+card.Title()+"\n") && !strings.HasPrefix(buf.String(), "shard 0/2  "+card.Title()+"\n") {
				t.Errorf("printed:\n%s", buf.String())
			}
		})
	}
	// An error that is no verdict on the server decides no card.
	if f := failureOf(errors.New("read capture: short")); f != nil {
		t.Errorf("a run's own error made a verdict: %+v", f)
	}
}
