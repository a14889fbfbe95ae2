package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/report"
)

// TestCompareRoomCapHeadline: compare on the bundled capture against a
// relay child capping rooms at 8 answers, for both scenarios, "login
// failures" with the 16 requested and at most the 8 the room holds; the
// host's CPU objectives are off (one loaded machine) and the headline says
// so, and Verify judges series.csv again to the same line.
func TestCompareRoomCapHeadline(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "report")
	res := runReplay(t, "compare", "--capture", bundledCapture(t), "--clients", "16", "--senders", "2", "--loop=12s,48s",
		"--login-interval", "100ms", "--duration", "5s", "--sample-interval", "500ms", "--drain-timeout", "10s",
		"--relay-flags", "--max-room-members 8", "--slo", "p99=off,idle=off,fleet_idle=off,lag=off", "--out", out)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, testprocTail(res.stderr))
	}
	sum, err := report.Verify(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range sum.Scenarios {
		h := sc.Headline
		line := h.Line()
		if h.Reason != report.ReasonLoginFailures || h.Requested != 16 || !(float64(h.Held) >= 1 && float64(h.Held) <= 8) {
			t.Errorf("%s: %q: want login failures, 16 requested, 1 to 8 held", sc.Scenario, line)
		}
		if !strings.Contains(line, "login failures at ") || !strings.Contains(line, "off: latency p99, relay CPU idle, load generator") ||
			strings.Contains(line, "relay CPU idle 0 %") {
			t.Errorf("%s: %q does not name the deciding second and the objectives off, or names an off figure", sc.Scenario, line)
		}
		if !strings.Contains(res.stdout, line) {
			t.Errorf("stdout lacks the headline %q", line)
		}
	}
}
