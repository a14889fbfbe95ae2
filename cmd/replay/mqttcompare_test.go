package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/report"
)

// readReport reads a report directory's summary.json and checks that its
// other files were written.
func readReport(t *testing.T, dir string) report.Summary {
	t.Helper()
	for _, f := range []string{report.SeriesFile, report.IndexFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("report file: %v", err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, report.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	var sum report.Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	return sum
}

// noServerMetricsNote checks that a report says its server columns are
// absent.
func noServerMetricsNote(t *testing.T, sum report.Summary) {
	t.Helper()
	for _, w := range sum.Warnings {
		if strings.HasPrefix(w, "no server metrics") {
			return
		}
	}
	t.Errorf("the report does not say the server's metrics are absent: warnings %q", sum.Warnings)
}

// TestMQTTCapacityCompare runs `replay capacity` and `replay compare`
// against mosquitto, which serves no relay /metrics: the search must
// answer from the fleet's own figures (logins, latency, drops, this
// host's CPU idle), and both reports must say the server columns are
// absent rather than fail on scrapes.
func TestMQTTCapacityCompare(t *testing.T) {
	t.Parallel()
	tcp, _, _ := startMosquitto(t)
	target := fmt.Sprintf("127.0.0.1:%d", tcp)
	capPath := recordThrough(t, target, python(t), filepath.Join("testdata", "mqttclient.py"), "LISTEN_PORT", "tcp", "20")
	loop := suggestedLoopOf(t, "mqtt", capPath)

	t.Run("capacity", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "capacity")
		stdout, err := execReplay("capacity", "--profile", "mqtt", "--capture", capPath, "--target", target, "--out", out,
			"--loop", loop, "--senders", "5", "--login-interval", "5ms", "--start", "10", "--step", "10", "--max", "30",
			"--hold", "2s", "--sample-interval", "500ms", "--progress-interval", "1m",
			// The fleet shares two loaded cores with five other builds:
			// the search is about the broker, not this machine's load.
			"--slo", "fleet_idle=off,lag=off,idle=off,p99<2s")
		if err != nil {
			t.Fatalf("replay capacity: %v\n%s", err, stdout)
		}
		sum := readReport(t, out)
		c := sum.Capacity
		if c == nil || len(c.Levels) == 0 || math.IsNaN(float64(c.Held)) || c.Held < 10 {
			t.Fatalf("capacity against mosquitto held no level:\n%s", stdout)
		}
		if c.Reason.String() == "" || !strings.Contains(stdout, "held") {
			t.Errorf("no answer with a reason:\n%s", stdout)
		}
		for _, l := range c.Levels {
			if float64(l.LoggedIn) != float64(l.Clients) || !math.IsNaN(float64(l.SendGbps)) {
				t.Errorf("level %d: %v logged in, send %v Gbps (want every client in, and no server figure)", l.Clients, l.LoggedIn, l.SendGbps)
			}
			// mosquitto runs on this host: its host CPU idle is measured.
			if math.IsNaN(float64(l.RelayCPUIdlePct)) {
				t.Errorf("level %d: no host CPU idle for a server on this host", l.Clients)
			}
		}
		noServerMetricsNote(t, sum)
		t.Logf("capacity: %s", c.Answer)
	})

	t.Run("compare", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "compare")
		stdout, err := execReplay("compare", "--profile", "mqtt", "--capture", capPath, "--target", target, "--out", out,
			"--clients", "20", "--senders", "4", "--loop", loop, "--login-interval", "5ms", "--duration", "3s",
			"--sample-interval", "500ms", "--progress-interval", "1m")
		if err != nil {
			t.Fatalf("replay compare: %v\n%s", err, stdout)
		}
		sum := readReport(t, out)
		if len(sum.Runs) != 2 {
			t.Fatalf("%d runs in the report, want N:N and 1:N:\n%s", len(sum.Runs), stdout)
		}
		for _, r := range sum.Runs {
			if float64(r.MaxLoggedIn) != 20 {
				t.Errorf("%s: %v logged in at most, want 20", r.Scenario, r.MaxLoggedIn)
			}
		}
		noServerMetricsNote(t, sum)
	})
}
