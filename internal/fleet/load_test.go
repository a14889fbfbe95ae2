package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestLoadCPU measures the fleet's own cost as separate processes: the
// relay and replay binaries on 127.0.0.1, N:N rooms of 32 clients looping
// 72 Hz traced poses (96-byte payloads). It reports the replay process's
// CPU seconds per million messages (sent + received) over a steady window,
// its schedule lag (whole run, from the summary) and the machine load. It
// takes the whole machine for tens of seconds, so it runs only with
// REPRISE_SCALE=1:
//
//	REPRISE_SCALE=1 REPRISE_LOAD_ROOMS=16 go test ./internal/fleet -run LoadCPU -v
//
// REPRISE_LOAD_BIN names a directory holding relay and replay binaries to
// measure instead of building this tree (to compare against an older
// build); REPRISE_LOAD_WINDOW sets the measured window (default 10s).
func TestLoadCPU(t *testing.T) {
	if os.Getenv("REPRISE_SCALE") == "" {
		t.Skip("load run: set REPRISE_SCALE=1 (takes the whole machine)")
	}
	var bins map[string]string
	if dir := os.Getenv("REPRISE_LOAD_BIN"); dir != "" {
		bins = map[string]string{"relay": filepath.Join(dir, "relay"), "replay": filepath.Join(dir, "replay")}
	} else {
		bins = testproc.BuildT(t, testproc.Options{}, "relay", "replay")
	}
	rooms := envInt(t, "REPRISE_LOAD_ROOMS", 16)
	window := 10 * time.Second
	if d, err := time.ParseDuration(os.Getenv("REPRISE_LOAD_WINDOW")); err == nil {
		window = d
	}
	const warmup = 3 * time.Second
	// REPRISE_LOAD_PROGRESS=1s logs replay's progress lines (lag p99 and
	// CPU idle per interval).
	progress := "1m"
	if p := os.Getenv("REPRISE_LOAD_PROGRESS"); p != "" {
		progress = p
	}
	n := rooms * 32
	relayAddr := testproc.StartRelay(t, bins["relay"], "--metrics", "off", "--idle-timeout", "10m", "--log-level", "warn").TCP
	pcap := writePoseCapture(t)
	sumPath := filepath.Join(t.TempDir(), "summary.json")
	args := []string{"--capture", pcap, "--target", relayAddr, "--clients", strconv.Itoa(n), "--room-size", "32",
		"--loop", "1s,11s", "--login-interval", "2ms", "--metrics", "127.0.0.1:0", "--progress-interval", progress,
		"--summary", sumPath, "--duration", (warmup + window + 2*time.Second + time.Duration(n)*2*time.Millisecond).String()}
	if p := os.Getenv("REPRISE_LOAD_CPUPROFILE"); p != "" {
		args = append(args, "--cpuprofile", p)
	}
	cmd := exec.Command(bins["replay"], args...)
	cmd.Stdout = io.Discard
	p := testproc.StartCmd(t, cmd)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := p.WaitOutput(ctx, p.Stderr, regexp.MustCompile(`metrics http://(\S+)/metrics`))
	if err != nil {
		t.Fatal(err)
	}
	maddr := m[1]
	for deadline := time.Now().Add(time.Minute); scrape(maddr, "replay_clients_logged_in") < float64(n); {
		if time.Now().After(deadline) {
			t.Fatalf("not all %d clients logged in after a minute", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(warmup)
	load := loadAvg()
	cpu0, msgs0, wait0 := procCPU(t, cmd.Process.Pid), scrapeMsgs(maddr), runQueueWait(cmd.Process.Pid)
	t0 := time.Now()
	time.Sleep(window)
	cpu1, msgs1, wait1 := procCPU(t, cmd.Process.Pid), scrapeMsgs(maddr), runQueueWait(cmd.Process.Pid)
	el := time.Since(t0).Seconds()
	if os.Getenv("REPRISE_LOAD_GOSCHED") != "" {
		t.Log(scrapeLines(maddr, "go_sched_latencies_seconds"))
	}
	// The replay runs to its --duration; a minute more is a hang.
	err = p.Wait(warmup + window + 2*time.Second + time.Duration(n)*2*time.Millisecond + time.Minute)
	for _, l := range linesAfter(p.Stderr.String(), m[0]) {
		if progress != "1m" || strings.HasPrefix(l, "DIAG") {
			t.Log(l)
		}
	}
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	var s Summary
	b, err := os.ReadFile(sumPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	msgs := msgs1 - msgs0
	t.Logf("LOAD %dx32 load %s | msgs %.0f/s | replay cpu %.2f cores, %.3f s per M msgs, runnable but not running %.2f thread-s/s | lag p50 %.3f p99 %.3f ms | latency p50 %.2f p99 %.2f ms | backpressure %d | disconnects %v",
		rooms, load, msgs/el, (cpu1-cpu0)/el, (cpu1-cpu0)/msgs*1e6, (wait1-wait0)/el, s.ScheduleLagMS.P50, s.ScheduleLagMS.P99,
		s.LatencyMS.P50, s.LatencyMS.P99, s.SendsDelayed, s.Disconnects)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// linesAfter returns the lines of out after the first one holding mark.
func linesAfter(out, mark string) []string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i, l := range lines {
		if strings.Contains(l, mark) {
			return lines[i+1:]
		}
	}
	return nil
}

// writePoseCapture writes a VR-like session: the join, then from 1 s
// traced 72 Hz othercast poses of 96 payload bytes for 10 s.
func writePoseCapture(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "poses.pcap")
	w, err := capture.Create(path, layers.LinkTypeEthernet, 65535)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	conn, err := w.OpenTCP(t0, netip.MustParseAddrPort("10.0.0.1:50000"), netip.MustParseAddrPort("10.0.0.2:7400"))
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(conn.Data(t0, true, wire.AppendJoin(nil, "lobby", "alice", nil, 0)))
	must(conn.Data(t0.Add(time.Millisecond), false, wire.AppendJoined(nil, 0, "alice", []string{"alice"})))
	payload := make([]byte, 96)
	var at time.Time
	for i := range 720 {
		at = t0.Add(time.Second + time.Duration(i)*time.Second/72)
		must(conn.Data(at, true, wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: 1, Payload: payload})))
	}
	must(conn.Close(at.Add(time.Millisecond), true))
	must(w.Close())
	return path
}

// procCPU is a process's user+system CPU time in seconds.
func procCPU(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) start at ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

// runQueueWait sums, over a process's threads, the seconds they spent
// runnable but waiting for a CPU (/proc/PID/task/TID/schedstat, field 2):
// how much the machine, not the fleet, held the fleet back.
func runQueueWait(pid int) float64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var ns float64
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			v, _ := strconv.ParseFloat(f[1], 64)
			ns += v
		}
	}
	return ns / 1e9
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// scrapeLines returns the replay's /metrics lines starting with prefix.
func scrapeLines(addr, prefix string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "\n")
}

func scrapeMsgs(addr string) float64 {
	return scrape(addr, "replay_sent_messages_total") + scrape(addr, "replay_received_messages_total")
}

// scrape reads one unlabelled sample from the replay's /metrics (-1 when
// it cannot).
func scrape(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				return -1
			}
			return v
		}
	}
	return -1
}
