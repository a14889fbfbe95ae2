package launch

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestSummaryFromLog: a shard pod's log is its progress lines and its
// summary as the last JSON line (--summary -); the summary is found
// after any other line, and a log without one says so.
func TestSummaryFromLog(t *testing.T) {
	sum, err := os.ReadFile("../fleet/testdata/shard-summary.json")
	if err != nil {
		t.Fatal(err)
	}
	var line bytes.Buffer
	for _, l := range strings.Split(string(sum), "\n") {
		line.WriteString(strings.TrimSpace(l))
	}
	progress := "5s logged in 10 / attempted 10 / failed 0 | clients sent 1 msg/s\n"
	for _, tc := range []struct {
		name, log string
		ok        bool
	}{
		{"summary last", progress + line.String() + "\n", true},
		{"summary then a line", progress + line.String() + "\nreplay: stopped\n", true},
		{"no newline at the end", line.String(), true},
		{"cut short", progress + line.String()[:200] + "\n", false},
		{"none", progress, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := SummaryFromLog([]byte(tc.log))
			if tc.ok != (err == nil) {
				t.Fatalf("err %v, want ok %v", err, tc.ok)
			}
			if tc.ok && (s.ClientsRequested != 10 || s.LoginsSucceeded != 10) {
				t.Errorf("read %d/%d clients, want 10/10", s.LoginsSucceeded, s.ClientsRequested)
			}
		})
	}
}
