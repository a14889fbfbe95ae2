package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// The scale runs of issue 4 ("Speed and scale") take minutes and most of
// the machine, so they run only with REPRISE_SCALE=1, on binaries built
// without the race detector:
//
//	REPRISE_SCALE=1 go test ./cmd/replay -run Scale -v -timeout 10m

func scaleBins(t *testing.T) map[string]string {
	t.Helper()
	if os.Getenv("REPRISE_SCALE") == "" {
		t.Skip("scale run: set REPRISE_SCALE=1 (takes minutes and the whole machine)")
	}
	return testproc.BuildT(t, testproc.Options{}, "relay", "replay")
}

// poseScript is a VR-like session: the join, then from 1 s traced 72 Hz
// othercast poses of 96 payload bytes for 10 s.
func poseScript() []timedFrame {
	fr := []timedFrame{join()}
	payload := make([]byte, 96)
	for i := 0; i < 720; i++ {
		at := time.Second + time.Duration(i)*time.Second/72
		fr = append(fr, timedFrame{at, wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Payload: payload})})
	}
	return fr
}

func startScaleRelay(t *testing.T, sb map[string]string) *testproc.Relay {
	t.Helper()
	return testproc.StartRelay(t, sb["relay"], "--idle-timeout", "10m")
}

// runScale starts replay and returns its process and its metrics address.
func runScale(t *testing.T, sb map[string]string, args ...string) (*exec.Cmd, string, *strings.Builder) {
	t.Helper()
	cmd := exec.Command(sb["replay"], append([]string{"--metrics", "127.0.0.1:0", "--progress-interval", "5s"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	metrics := ""
	for sc.Scan() {
		if m := regexp.MustCompile(`metrics http://(\S+)/metrics`).FindStringSubmatch(sc.Text()); m != nil {
			metrics = m[1]
			break
		}
	}
	go func() {
		for sc.Scan() {
			t.Log(sc.Text())
		}
	}()
	return cmd, metrics, &out
}

func metric(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return -1
}

func rssKiB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	m := regexp.MustCompile(`VmRSS:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func stopScale(t *testing.T, cmd *exec.Cmd, sumPath string) fleet.Summary {
	t.Helper()
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("replay: %v", err)
	}
	s, _ := readSummary(t, sumPath)
	return s
}

// TestScaleReceiveOnly10k: one replay process holds 10,000 receive-only
// clients against a relay process; RSS per client must stay ≤ 40 KiB.
func TestScaleReceiveOnly10k(t *testing.T) {
	sb := scaleBins(t)
	const n = 10000
	r := startScaleRelay(t, sb)
	path := writeCapture(t, poseScript())
	sumPath := filepath.Join(t.TempDir(), "summary.json")
	cmd, maddr, _ := runScale(t, sb, "--capture", path, "--target", r.TCP, "--clients", fmt.Sprint(n), "--receive-only",
		"--room-size", "100", "--login-interval", "200us", "--summary", sumPath)
	base := rssKiB(cmd.Process.Pid)
	deadline := time.Now().Add(90 * time.Second)
	for metric(maddr, "replay_clients_logged_in") < n && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	rss := rssKiB(cmd.Process.Pid)
	s := stopScale(t, cmd, sumPath)
	perClient := float64(rss) / float64(s.PeakLoggedIn)
	t.Logf("SCALE receive-only: %d logged in (%d attempts, failed %v), replay RSS %d KiB (at start %d KiB) = %.1f KiB per client",
		s.PeakLoggedIn, s.LoginAttempts, s.LoginsFailed, rss, base, perClient)
	if s.PeakLoggedIn != n {
		t.Errorf("peak logged in %d, want %d", s.PeakLoggedIn, n)
	}
	if perClient > 40 {
		t.Errorf("%.1f KiB RSS per client, want ≤ 40", perClient)
	}
}

// TestScaleNN16x32: 512 clients in 16 rooms of 32, all looping 72 Hz
// poses: the fleet's schedule lag p99 must stay ≤ 2 ms.
func TestScaleNN16x32(t *testing.T) {
	sb := scaleBins(t)
	r := startScaleRelay(t, sb)
	path := writeCapture(t, poseScript())
	sumPath := filepath.Join(t.TempDir(), "summary.json")
	dur := 30 * time.Second
	if d, err := time.ParseDuration(os.Getenv("REPRISE_SCALE_DURATION")); err == nil {
		dur = d
	}
	clients := "512"
	if c := os.Getenv("REPRISE_SCALE_CLIENTS"); c != "" {
		clients = c
	}
	cmd, _, out := runScale(t, sb, "--capture", path, "--target", r.TCP, "--clients", clients, "--room-size", "32",
		"--loop", "1s,11s", "--login-interval", "2ms", "--summary", sumPath, "--duration", dur.String())
	before := relayMetric(t, r, "relay_delivered_messages_total")
	start := time.Now()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("replay: %v", err)
	}
	delivered := relayMetric(t, r, "relay_delivered_messages_total") - before
	var s fleet.Summary
	b, _ := os.ReadFile(sumPath)
	json.Unmarshal(b, &s)
	secs := time.Since(start).Seconds()
	t.Logf("SCALE N:N 16x32: sent %d msgs (%.0f/s), received %d (%.0f/s), relay delivered %.0f/s, latency p50 %.2f p99 %.2f ms, schedule lag p50 %.3f p99 %.3f ms, disconnects %v, warnings %d\n%s",
		s.MessagesSent, float64(s.MessagesSent)/s.DurationS, s.MessagesReceived, float64(s.MessagesReceived)/s.DurationS,
		delivered/secs, s.LatencyMS.P50, s.LatencyMS.P99, s.ScheduleLagMS.P50, s.ScheduleLagMS.P99, s.Disconnects, len(s.Warnings), out)
	if s.ScheduleLagMS.P99 > 2 {
		t.Errorf("schedule lag p99 %.3f ms, want ≤ 2", s.ScheduleLagMS.P99)
	}
}
