package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/launch"
	"github.com/reprise-harness/reprise/internal/report"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// runReplay runs the replay binary with args as they are.
func runReplay(t *testing.T, args ...string) result {
	t.Helper()
	cmd := exec.Command(bins["replay"], args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	began := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), code: cmd.ProcessState.ExitCode(), took: time.Since(began)}
	if err != nil && r.code <= 0 {
		t.Fatalf("run replay: %v", err)
	}
	return r
}

// lastLine is the last line of s: the error a command exits with.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestDriveRefusesBeforeStarting: compare and capacity check every flag
// before anything starts: no relay child, no report folder.
func TestDriveRefusesBeforeStarting(t *testing.T) {
	t.Parallel()
	capture := writeCapture(t, castScript())
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"compare without duration", []string{"compare", "--clients", "4", "--senders", "1"}, "--duration is required"},
		{"compare senders = clients", []string{"compare", "--clients", "4", "--senders", "4", "--duration", "2s"}, "--senders 4"},
		{"compare metrics", []string{"compare", "--clients", "4", "--senders", "1", "--duration", "2s", "--metrics", "127.0.0.1:0"}, "--metrics: compare sets it itself"},
		{"compare bad log level", []string{"compare", "--clients", "4", "--senders", "1", "--duration", "2s", "--log-level", "loud"}, "--log-level"},
		{"compare bad loop", []string{"compare", "--clients", "4", "--senders", "1", "--duration", "2s", "--loop", "5s"}, "--loop"},
		{"relay metrics not an address", []string{"compare", "--clients", "4", "--senders", "1", "--duration", "2s", "--relay-metrics", "9400"}, "want host:port"},
		{"relay metrics without target", []string{"compare", "--clients", "4", "--senders", "1", "--duration", "2s", "--relay-metrics", "127.0.0.1:9400"}, "--relay-metrics goes with --target"},
		{"target without port", []string{"compare", "--clients", "4", "--senders", "1", "--duration", "2s", "--target", "127.0.0.1"}, "--target"},
		{"capacity clients", []string{"capacity", "--clients", "4"}, "--clients: capacity sets it itself"},
		{"capacity no hold", []string{"capacity", "--hold", "0s"}, "--hold 0s"},
		{"capacity max below start", []string{"capacity", "--start", "10", "--max", "5"}, "--start 10"},
		{"capacity shards without local", []string{"capacity", "--shards", "2"}, "add --local"},
		{"capacity profile without target", []string{"capacity", "--profile", "mqtt"}, "needs --target"},
		{"k8s key log", []string{"compare", "--k8s", "--relay", "--tls-keylog", tlsKeys, "--clients", "4", "--senders", "1", "--duration", "2s"}, "--tls-keylog with --k8s: the pods get only the capture"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report")
			res := runReplay(t, append(append([]string{}, tc.args...), "--capture", capture, "--out", out)...)
			if res.code != 2 || !strings.Contains(lastLine(res.stderr), tc.msg) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", res.code, res.stderr, tc.msg)
			}
			if strings.Contains(res.stderr, "relay child pid") {
				t.Errorf("a relay child was started before the refusal:\n%s", res.stderr)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("report folder %s created before the refusal", out)
			}
		})
	}
}

// TestCompareRelayMetricsHostPort: --relay-metrics takes host:port, the
// form --target takes; the report samples the relay there, with each
// run's requested count.
func TestCompareRelayMetricsHostPort(t *testing.T) {
	t.Parallel()
	r := startRelay(t, "--log-level", "warn")
	out := filepath.Join(t.TempDir(), "report")
	res := runReplay(t, "compare", "--capture", writeCapture(t, castScript()), "--clients", "6", "--senders", "2", "--loop=200ms,300ms",
		"--login-interval", "20ms", "--duration", "2s", "--sample-interval", "500ms", "--drain-timeout", "5s",
		"--target", r.TCP, "--relay-metrics", r.Metrics, "--out", out)
	if res.code != 0 {
		t.Fatalf("exit %d\n%s", res.code, testprocTail(res.stderr))
	}
	sum, err := report.Verify(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range sum.Runs {
		t.Logf("%s: %d samples, %d scrape errors, warnings %q", rs.Scenario, rs.Samples, rs.ScrapeErrors, rs.Warnings)
		if rs.Samples == 0 || !(float64(rs.RelaySentBytes) > 0) {
			t.Errorf("%s: %d samples, %d scrape errors, relay sent %v bytes: the relay was not read at %s", rs.Scenario, rs.Samples, rs.ScrapeErrors, rs.RelaySentBytes, r.Metrics)
		}
	}
	for _, sc := range sum.Scenarios {
		if sc.Headline.Requested != 6 || strings.Contains(sc.Headline.Line(), "all 0 requested") {
			t.Errorf("%s: headline %q requested %d, want 6", sc.Scenario, sc.Headline.Line(), sc.Headline.Requested)
		}
	}
	// The end line's peak is the table's.
	for _, rs := range sum.Runs {
		want := fmt.Sprintf("%s #%d done: %.0f logged in at peak", rs.Scenario, rs.Repeat, float64(rs.MaxLoggedIn))
		if !strings.Contains(res.stderr, want) {
			t.Errorf("stderr lacks %q (the table's max logged in):\n%s", want, testprocTail(res.stderr))
		}
	}
}

// TestDriveServerMetricsUnreadable: server metrics that were asked for
// and do not answer, or answer with something else, end the command at
// once: exit 1, one line naming the address and what came back.
func TestDriveServerMetricsUnreadable(t *testing.T) {
	t.Parallel()
	r := startRelay(t, "--log-level", "warn")
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# HELP up fine\n# TYPE up gauge\nup 1")
	}))
	defer page.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	capture := writeCapture(t, castScript())
	for _, tc := range []struct {
		name, metrics, msg string
	}{
		{"nothing listens", closed, closed},
		{"not the relay's", page.Listener.Addr().String(), "none of the relay's metrics"},
		{"the relay's own port", r.TCP, r.TCP},
	} {
		for _, cmd := range []string{"compare", "capacity"} {
			args := []string{cmd, "--capture", capture, "--target", r.TCP, "--relay-metrics", tc.metrics, "--out", filepath.Join(t.TempDir(), "report")}
			if cmd == "compare" {
				args = append(args, "--clients", "4", "--senders", "1", "--duration", "2s")
			}
			res := runReplay(t, args...)
			if line := lastLine(res.stderr); res.code != 1 || !strings.Contains(line, tc.msg) || !strings.Contains(line, "server metrics") {
				t.Errorf("%s: %s: exit %d, stderr %q; want 1 and a line naming %q", tc.name, cmd, res.code, res.stderr, tc.msg)
			}
		}
	}
}

// silentServer accepts TCP connections and never answers, until the test
// ends.
func silentServer(t *testing.T) string {
	t.Helper()
	return testproc.ServeTCP(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
}

// TestNoLoginExits1: a target that accepts TCP and never answers makes
// replay, compare and capacity exit 1 with one line saying no client
// logged in; compare and capacity still write their report, and
// capacity's messages are its own.
func TestNoLoginExits1(t *testing.T) {
	t.Parallel()
	silent := silentServer(t)
	r := startRelay(t, "--log-level", "warn") // metrics to read; its port takes no fleet
	capture := writeCapture(t, castScript())
	common := []string{"--capture", capture, "--target", silent, "--login-timeout", "500ms", "--login-interval", "20ms"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"replay", []string{"--clients", "3", "--duration", "2s", "--metrics", "off"}},
		{"compare", []string{"compare", "--clients", "3", "--senders", "1", "--duration", "2s", "--relay-metrics", r.Metrics,
			"--sample-interval", "500ms", "--drain-timeout", "1s"}},
		{"capacity", []string{"capacity", "--start", "2", "--step", "2", "--max", "4", "--hold", "1s", "--relay-metrics", r.Metrics,
			"--sample-interval", "500ms", "--slo", "p99=off,idle=off,fleet_idle=off,lag=off,login_fail=off,drops=off"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := filepath.Join(t.TempDir(), "report")
			args := append(append([]string{}, tc.args...), common...)
			if tc.name != "replay" {
				args = append(args, "--out", out)
			}
			start := time.Now()
			res := runReplay(t, args...)
			line := lastLine(res.stderr)
			if res.code != 1 || !strings.Contains(line, "no client logged in") || !strings.Contains(line, silent) {
				t.Errorf("exit %d, last line %q; want 1 and no client logged in at %s\n%s", res.code, line, silent, testprocTail(res.stderr))
			}
			if tc.name == "capacity" && strings.Contains(res.stderr, "compare:") {
				t.Errorf("capacity says compare:\n%s", res.stderr)
			}
			if tc.name != "replay" {
				if _, err := os.Stat(filepath.Join(out, report.SummaryFile)); err != nil {
					t.Errorf("no report of the empty run: %v", err)
				}
			}
			t.Logf("%s: %v: %s", tc.name, time.Since(start).Round(time.Millisecond), line)
		})
	}
}

// TestCapacityNoLevelExits1: a search whose server stops answering its
// metrics before the first level is judged answers nothing: exit 1.
func TestCapacityNoLevelExits1(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	served := 0
	r := startRelay(t, "--log-level", "warn")
	// A proxy of the relay's /metrics that answers its first two scrapes
	// (the check at start and the baseline) and then only 503.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		served++
		n := served
		mu.Unlock()
		if n > 2 {
			http.Error(w, "gone", http.StatusServiceUnavailable)
			return
		}
		resp, err := http.Get("http://" + r.Metrics + "/metrics")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		w.Write(b.Bytes())
	}))
	defer proxy.Close()
	out := filepath.Join(t.TempDir(), "report")
	res := runReplay(t, "capacity", "--capture", writeCapture(t, castScript()), "--target", r.TCP, "--relay-metrics", proxy.URL,
		"--start", "2", "--step", "2", "--max", "4", "--hold", "1s", "--login-interval", "20ms", "--sample-interval", "500ms",
		"--out", out, "--slo", "p99=off,idle=off,fleet_idle=off,lag=off")
	if line := lastLine(res.stderr); res.code != 1 || !strings.Contains(line, "no level completed") {
		t.Errorf("exit %d, last line %q; want 1 and no level completed\n%s", res.code, line, testprocTail(res.stderr))
	}
	var sum report.Summary
	if b, err := os.ReadFile(filepath.Join(out, report.SummaryFile)); err != nil || json.Unmarshal(b, &sum) != nil {
		t.Errorf("no report: %v", err)
	}
}

func testprocTail(s string) string {
	lines := strings.Split(s, "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return strings.Join(lines, "\n")
}

// TestShardCommand: a shard's command line is the fleet flags given, the
// run's own clients, senders, target and duration, and the shard's
// metrics, barrier, summary and levels, in the flags replay defines.
func TestShardCommand(t *testing.T) {
	f := fleet.DefaultConfig()
	f.Target, f.Clients, f.Senders, f.Duration, f.Levels = "127.0.0.1:7400", 80, 2, time.Minute, []int{20, 40}
	name, args := shardCommand("/bin/replay", []string{"--capture=x.pcap", "--loop=12s,48s"})(launch.ShardRun{
		Fleet: f, Shard: fleet.Shard{Index: 1, Count: 2}, Metrics: "127.0.0.1:9501", MetricsFD: 3, Barrier: "127.0.0.1:9502", Summary: "/tmp/s-1.json"})
	want := "--capture=x.pcap --loop=12s,48s --target 127.0.0.1:7400 --clients 80 --senders 2 --receive-only=false --duration 1m0s " +
		"--metrics 127.0.0.1:9501 --shard 1/2 --barrier 127.0.0.1:9502 --barrier-serve=false --summary /tmp/s-1.json --levels 20,40 --metrics-fd 3"
	if name != "/bin/replay" || strings.Join(args, " ") != want {
		t.Errorf("got %s %s\nwant /bin/replay %s", name, strings.Join(args, " "), want)
	}
	// Every flag it writes is one replay's run command defines.
	cmd := newRunCmd(&state{stdout: io.Discard, stderr: io.Discard})
	if err := cmd.ParseFlags(args); err != nil {
		t.Errorf("replay does not parse its shard command line: %v", err)
	}
}
