package compare

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// repoRoot is two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// TestCompareBinary builds the real relay and replay binaries and runs
// `replay compare` on the bundled capture against the relay child replay
// starts, as `make demo` does but small: 24 clients, 4 senders, 4 s per
// scenario.
func TestCompareBinary(t *testing.T) {
	root := repoRoot(t)
	capture := filepath.Join(root, "captures", "vr-session.pcap")
	if _, err := os.Stat(capture); err != nil {
		t.Fatalf("bundled capture: %v", err)
	}
	bin := bins["replay"]
	out := filepath.Join(t.TempDir(), "report")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "compare", "--capture", capture, "--clients", "24", "--senders", "4",
		"--loop=1s,39s", "--login-interval", "50ms", "--duration", "4s", "--sample-interval", "500ms",
		"--drain-timeout", "5s", "--out", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("replay compare: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	// The end of the run prints the table and where the report is.
	for _, want := range []string{"N:N (1 run)", "1:N (1 run)", "peak relay send", "report: " + filepath.Join(out, report.IndexFile)} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout.String())
		}
	}
	sum, err := report.Verify(out)
	if err != nil {
		t.Fatal(err)
	}
	// The relay ran as replay's child: announced, logged into the report
	// folder, and gone once replay exited.
	m := regexp.MustCompile(`relay child pid (\d+) on `).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("no relay child announced:\n%s", stderr.String())
	}
	if _, err := os.Stat("/proc/" + m[1]); err == nil {
		t.Errorf("relay child pid %s still exists after replay exited", m[1])
	}
	if b, err := os.ReadFile(filepath.Join(out, "relay.log")); err != nil || !strings.Contains(string(b), "relay stopped") {
		t.Errorf("relay.log in the report folder: %v\n%s", err, b)
	}
	if len(sum.Runs) != 2 || sum.Runs[0].Scenario != NN || sum.Runs[1].Scenario != OneN {
		t.Fatalf("runs: %+v", sum.Runs)
	}
	for _, rs := range sum.Runs {
		// summary.json keeps the fleet's own summary of each run: the
		// sampled figures must agree with it.
		var fs fleet.Summary
		if err := json.Unmarshal(rs.FleetSummary, &fs); err != nil {
			t.Fatalf("%s: fleet summary: %v", rs.Scenario, err)
		}
		if float64(rs.LoginsSucceeded) != float64(fs.LoginsSucceeded) || float64(rs.MaxLoggedIn) != float64(fs.PeakLoggedIn) ||
			float64(rs.LoginAttempts) != float64(fs.LoginAttempts) || float64(rs.MessagesSent) != float64(fs.MessagesSent) {
			t.Errorf("%s: sampled logins %v/%v max %v sent %v; fleet %d/%d peak %d sent %d", rs.Scenario,
				rs.LoginsSucceeded, rs.LoginAttempts, rs.MaxLoggedIn, rs.MessagesSent,
				fs.LoginsSucceeded, fs.LoginAttempts, fs.PeakLoggedIn, fs.MessagesSent)
		}
		if got, want := float64(rs.MessagesReceived), float64(fs.MessagesReceived); want == 0 || math.Abs(got-want) > 0.02*want {
			t.Errorf("%s: sampled %v received, fleet %v", rs.Scenario, got, want)
		}
		if fs.PeakLoggedIn != 24 {
			t.Errorf("%s: peak logged in %d, want 24", rs.Scenario, fs.PeakLoggedIn)
		}
	}
	if nn, on := float64(sum.Runs[0].PlateauSendGbps), float64(sum.Runs[1].PlateauSendGbps); !(on < nn) {
		t.Errorf("at 24 clients 1:N sends %v Gbps, N:N %v: want 1:N lower", on, nn)
	}
}

// TestCompareBinaryShards: `replay compare --shards 2 --local` runs each
// scenario as two shard processes; the sampled figures (every shard's
// metrics summed) agree with the merged summary, which names both shards
// with their CPU idle.
func TestCompareBinaryShards(t *testing.T) {
	root := repoRoot(t)
	capture := filepath.Join(root, "captures", "vr-session.pcap")
	bin := bins["replay"]
	out := filepath.Join(t.TempDir(), "report")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "compare", "--capture", capture, "--clients", "16", "--senders", "4",
		"--loop=1s,39s", "--login-interval", "50ms", "--duration", "4s", "--sample-interval", "500ms",
		"--drain-timeout", "5s", "--out", out, "--shards", "2", "--local")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("replay compare: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	sum, err := report.Verify(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Runs) != 2 {
		t.Fatalf("runs: %+v", sum.Runs)
	}
	for _, rs := range sum.Runs {
		var fs fleet.Summary
		if err := json.Unmarshal(rs.FleetSummary, &fs); err != nil {
			t.Fatalf("%s: fleet summary: %v", rs.Scenario, err)
		}
		if len(fs.Shards) != 2 || fs.Shards[0].Shard != "0/2" || fs.Shards[1].Shard != "1/2" || fs.LoginsSucceeded != 16 {
			t.Fatalf("%s: merged summary: logins %d, shards %+v", rs.Scenario, fs.LoginsSucceeded, fs.Shards)
		}
		if float64(rs.LoginsSucceeded) != float64(fs.LoginsSucceeded) || float64(rs.MessagesSent) != float64(fs.MessagesSent) {
			t.Errorf("%s: sampled logins %v sent %v; merged %d sent %d", rs.Scenario, rs.LoginsSucceeded, rs.MessagesSent, fs.LoginsSucceeded, fs.MessagesSent)
		}
		if !strings.Contains(strings.Join(rs.Warnings, "\n"), "fleet ran as 2 shards") {
			t.Errorf("%s: no shard line in the run's warnings %q", rs.Scenario, rs.Warnings)
		}
	}
	if !strings.Contains(stderr.String(), "shard 1/2]") {
		t.Errorf("no shard progress in stderr:\n%s", testproc.Tail(stderr.String(), 20))
	}
}
