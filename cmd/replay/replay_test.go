package main

// Integration tests: the real relay and replay binaries on 127.0.0.1, small
// synthetic captures written with the capture package's writer, and the
// expected deliveries computed from the script.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/capture/capturetest"
	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// bins are the relay and replay binaries (with -race) by name.
var bins map[string]string

func TestMain(m *testing.M) {
	os.Exit(testproc.Main(m, &bins, testproc.Options{Flags: []string{"-race"}}, "relay", "replay", "record"))
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// timedFrame is one client→server frame of a synthetic recording.
type timedFrame struct {
	at time.Duration
	b  []byte
}

// writeCapture writes frames as the client side of one TCP connection
// (with a joined reply from the server) into a pcap and returns its path.
func writeCapture(t *testing.T, frames []timedFrame) string {
	t.Helper()
	var msgs []tcpMsg
	for i, f := range frames {
		msgs = append(msgs, tcpMsg{f.at, true, f.b})
		if i == 0 {
			msgs = append(msgs, tcpMsg{f.at + ms(1), false, wire.AppendJoined(nil, 0, "alice", []string{"alice"})})
		}
	}
	return writeTCPFlows(t, "session.pcap", 7400, tcpFlow{msgs, frames[len(frames)-1].at + ms(1)})
}

// tcpMsg is one message of a synthetic TCP flow, at its time from the
// capture's start.
type tcpMsg struct {
	at         time.Duration
	fromClient bool
	b          []byte
}

// tcpFlow is a synthetic TCP connection: its messages, in the order
// written, and when the client closes it.
type tcpFlow struct {
	msgs []tcpMsg
	end  time.Duration
}

// writeTCPFlows writes flows into a pcap named name in a temporary
// folder, the i-th from 10.0.0.1:50000+i to 10.0.0.2:port, from a fixed
// start (2026-01-02 03:04:05 UTC), and returns its path.
func writeTCPFlows(t *testing.T, name string, port uint16, flows ...tcpFlow) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	w, err := capture.Create(path, layers.LinkTypeEthernet, 65535)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	sv := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), port)
	for i, f := range flows {
		conn, err := w.OpenTCP(t0, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(50000+i)), sv)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range f.msgs {
			if err := conn.Data(t0.Add(m.at), m.fromClient, m.b); err != nil {
				t.Fatal(err)
			}
		}
		if err := conn.Close(t0.Add(f.end), true); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func join() timedFrame { return timedFrame{0, wire.AppendJoin(nil, "lobby", "alice", nil, 0)} }

func pose(at int) timedFrame {
	return timedFrame{ms(at), wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: 1, Payload: []byte("pose")})}
}

// castScript is alice's session: from 200 ms, five traced othercast poses
// 20 ms apart, a unicast to bob, a manycast to bob and carol and an
// ownercast. Per pass: 8 sends; in a room of m members they make
// 5(m−1) + 1 + 2 + 1 deliveries (bob and carol map onto two other members).
func castScript() []timedFrame {
	fr := []timedFrame{join()}
	for at := 200; at < 300; at += 20 {
		fr = append(fr, pose(at))
	}
	return append(fr,
		timedFrame{ms(305), wire.AppendSend(nil, wire.Send{Mode: wire.Unicast, Targets: []string{"bob"}, Payload: []byte("u")})},
		timedFrame{ms(310), wire.AppendSend(nil, wire.Send{Mode: wire.Manycast, Targets: []string{"bob", "carol"}, Payload: []byte("m")})},
		timedFrame{ms(315), wire.AppendSend(nil, wire.Send{Mode: wire.Ownercast, Payload: []byte("o")})},
	)
}

// startRelay runs the relay binary on free ports until the test ends.
func startRelay(t *testing.T, args ...string) *testproc.Relay {
	t.Helper()
	return testproc.StartRelay(t, bins["relay"], args...)
}

// relayMetric reads one unlabelled sample from the relay's /metrics.
func relayMetric(t *testing.T, r *testproc.Relay, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + r.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("relay metric %s not found", name)
	return 0
}

type result struct {
	sum            fleet.Summary
	stdout, stderr string
	code           int
	took           time.Duration // the process's run, start to exit
}

// drainedBefore fails a run whose drain ran to its --drain-deliveries
// bound against a server that pings its clients for as long as they
// stay: it waited for the pings to stop, not for the deliveries in flight
// (it counts deliveries only). The fleet says so when its bound cut the
// drain while counts still moved, which no wall clock of a loaded host
// blurs.
func drainedBefore(t *testing.T, r result) {
	t.Helper()
	for _, w := range r.sum.Warnings {
		if strings.Contains(w, "when the drain's bound") {
			t.Errorf("the drain ran to its bound: it waited for the server's pings to stop (the run took %v): %s", r.took.Round(time.Millisecond), w)
		}
	}
}

// replay runs the replay binary to its end and reads its --summary file.
func replay(t *testing.T, args ...string) result {
	t.Helper()
	sumPath := filepath.Join(t.TempDir(), "summary.json")
	r := runReplay(t, append([]string{"--metrics", "", "--summary", sumPath}, args...)...)
	r.sum = summaryIfWritten(t, sumPath)
	return r
}

// summaryIfWritten reads the --summary file a run wrote; a run that
// wrote none (it stopped before) has the zero summary.
func summaryIfWritten(t *testing.T, path string) fleet.Summary {
	t.Helper()
	var s fleet.Summary
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("summary: %v\n%s", err, b)
		}
	}
	return s
}

// readSummary reads a replay --summary file.
func readSummary(t *testing.T, path string) (fleet.Summary, []byte) {
	t.Helper()
	var s fleet.Summary
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s, b
}

func mustOK(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("replay exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
}

// TestNNExactDeliveries: 6 clients in two rooms of 3 play the script once;
// every client joins before the first send and leaves after the last
// delivery, so deliveries are exact.
//
// The script ends at 315 ms; the run ends 2 s after the last login (not
// at a fixed time, which a slow login on a loaded host eats into): margin
// for a fleet whose schedule runs late (lag p99 1.1 s seen at load 20
// under -race, which cut the last sends off a 1.2 s run).
func TestNNExactDeliveries(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	path := writeCapture(t, castScript())
	res := replay(t, "--capture", path, "--target", r.TCP, "--clients", "6", "--room-size", "3",
		"--login-interval", "10ms", "--after-logins", "2s", "--heartbeat", "0")
	mustOK(t, res)
	s := res.sum
	const m = 3
	if s.LoginsSucceeded != 6 || s.MessagesSent != 6*8 {
		t.Fatalf("logins %d, sent %d; want 6, 48\n%s", s.LoginsSucceeded, s.MessagesSent, res.stdout)
	}
	if want := int64(6 * (5*(m-1) + 1 + 2 + 1)); s.MessagesReceived != want {
		t.Errorf("received %d deliveries, want %d", s.MessagesReceived, want)
	}
	if got := relayMetric(t, r, "relay_delivered_messages_total"); got != float64(s.MessagesReceived) {
		t.Errorf("relay delivered %v, fleet received %d", got, s.MessagesReceived)
	}
	if s.LatencyMS.P99 <= 0 || len(s.Disconnects) != 0 {
		t.Errorf("latency %+v disconnects %v", s.LatencyMS, s.Disconnects)
	}
	if s.ClientsPolled != 6 {
		t.Errorf("%d of the 6 TCP clients read by the schedulers' pollers", s.ClientsPolled)
	}
	goldenAnswer(t, "held", answerCard(res.stdout, false))
}

// Test1N: 2 senders and 4 receivers in one room of 6 (2 s after the
// logins for a 315 ms script: margin for a late schedule, as in
// TestNNExactDeliveries).
func Test1N(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	path := writeCapture(t, castScript())
	res := replay(t, "--capture", path, "--target", r.TCP, "--clients", "6", "--senders", "2",
		"--login-interval", "10ms", "--after-logins", "2s", "--heartbeat", "0")
	mustOK(t, res)
	s := res.sum
	const m = 6
	if s.MessagesSent != 2*8 {
		t.Fatalf("sent %d, want 16 (two senders)", s.MessagesSent)
	}
	if want := int64(2 * (5*(m-1) + 1 + 2 + 1)); s.MessagesReceived != want {
		t.Errorf("received %d deliveries, want %d", s.MessagesReceived, want)
	}
	if s.FramesSent["join"] != 6 || s.FramesSent["send"] != 16 {
		t.Errorf("frames sent %v", s.FramesSent)
	}
}

// TestLoopWraps: the loop [200ms, 300ms) of othercasts repeats; every send
// reaches the two others of the room, and each client completes the
// passes its time allows.
func TestLoopWraps(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	fr := []timedFrame{join()}
	for at := 200; at < 400; at += 20 {
		fr = append(fr, pose(at))
	}
	path := writeCapture(t, fr)
	res := replay(t, "--capture", path, "--target", r.TCP, "--clients", "3", "--loop", "200ms,300ms",
		"--login-interval", "10ms", "--duration", "1500ms")
	mustOK(t, res)
	s := res.sum
	// About (1500 − 200 − ramp) / 100 = 12 passes per client.
	if s.LoopsCompleted < 3*8 || s.LoopsCompleted > 3*14 {
		t.Errorf("loops completed %d, want about 36", s.LoopsCompleted)
	}
	if s.MessagesSent < 5*s.LoopsCompleted {
		t.Errorf("sent %d for %d passes of 5", s.MessagesSent, s.LoopsCompleted)
	}
	if s.MessagesReceived != 2*s.MessagesSent {
		t.Errorf("received %d, want 2 × sent %d", s.MessagesReceived, s.MessagesSent)
	}
}

// TestRampTiming: login attempts due 100 ms apart with a 400 ms pause after
// every two, read from the ramp's debug log.
func TestRampTiming(t *testing.T) {
	// Not parallel: it measures the login ramp's timing.
	r := startRelay(t)
	path := writeCapture(t, castScript())
	res := replay(t, "--capture", path, "--target", r.TCP, "--clients", "5", "--receive-only",
		"--login-interval", "100ms", "--pause-every", "2", "--pause", "400ms", "--duration", "1400ms", "--log-level", "debug")
	mustOK(t, res)
	var at, due, waited []int
	for _, m := range regexp.MustCompile(`login attempt.*"at_ms": (\d+), "due_ms": (\d+), "cpu_wait_ms": (\d+)`).FindAllStringSubmatch(res.stderr, -1) {
		a, _ := strconv.Atoi(m[1])
		d, _ := strconv.Atoi(m[2])
		w, _ := strconv.Atoi(m[3])
		at, due, waited = append(at, a), append(due, d), append(waited, w)
	}
	want := []int{0, 100, 500, 600, 1000}
	if !slices.Equal(due, want) {
		t.Fatalf("login attempts due at %v ms, want %v\n%s", due, want, res.stderr)
	}
	// Each attempt is due at its time on the run's clock (a late one does
	// not push the later ones back), and goes within 60 ms of it but for
	// the time the fleet's threads waited meanwhile for a CPU that other
	// work held (a host busy at 10 times its cores delays a wake-up by
	// 100 ms and more, which no schedule can make up; the fleet measures
	// that share itself).
	t.Logf("login attempts at %v ms, due %v, their threads' waits for a CPU %v ms", at, want, waited)
	for i := range at {
		if own := at[i] - want[i] - waited[i]; at[i] < want[i] || own > 60 {
			t.Errorf("attempt %d at %d ms, due %d, %d ms of it waiting for a CPU: %d ms late of its own, want at most 60 (all: %v, waits %v)",
				i, at[i], want[i], waited[i], own, at, waited)
		}
	}
	if !strings.Contains(res.stderr, "ramp: pausing 400ms after 2 login attempts") {
		t.Errorf("no pause line in:\n%s", res.stderr)
	}
}

// TestReceiveOnly: receive-only clients send their login, heartbeats and
// leave, and nothing else; the relay saw exactly those frames.
func TestReceiveOnly(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	path := writeCapture(t, castScript())
	res := replay(t, "--capture", path, "--target", r.TCP, "--clients", "3", "--receive-only", "--heartbeat", "200ms",
		"--login-interval", "10ms", "--after-logins", "1s")
	mustOK(t, res)
	fs := res.sum.FramesSent
	if fs["send"] != 0 || fs["join"] != 3 || fs["leave"] != 3 {
		t.Errorf("frames sent %v: want 3 joins, 3 leaves, no sends", fs)
	}
	// Each client: heartbeats at 200, 400, ... ms after its join, for the
	// second after the last join (the first joined 20 ms earlier).
	if hb := fs["heartbeat"]; hb < 3*4 || hb > 3*5 {
		t.Errorf("%d heartbeats, want 4 or 5 per client", hb)
	}
	var total int64
	for _, n := range fs {
		total += n
	}
	if got := relayMetric(t, r, "relay_received_messages_total"); got != float64(total) {
		t.Errorf("relay received %v frames, fleet sent %d", got, total)
	}
}

// TestRoomFull: a relay capping rooms at 3 refuses two of five logins; the
// ramp goes on and the failures are counted by reason.
func TestRoomFull(t *testing.T) {
	t.Parallel()
	r := startRelay(t, "--max-room-members", "3")
	path := writeCapture(t, castScript())
	res := replay(t, "--capture", path, "--target", r.TCP, "--clients", "5", "--receive-only",
		"--login-interval", "10ms", "--after-logins", "200ms")
	mustOK(t, res)
	s := res.sum
	if s.LoginAttempts != 5 || s.LoginsSucceeded != 3 || s.LoginsFailed["room_full"] != 2 || s.PeakLoggedIn != 3 {
		t.Errorf("attempts %d ok %d failed %v peak %d; want 5, 3, room_full=2, 3", s.LoginAttempts, s.LoginsSucceeded, s.LoginsFailed, s.PeakLoggedIn)
	}
}

// TestInterruptWritesSummary: SIGINT stops an open-ended run cleanly; the
// relay child replay started (no --target) is gone after it, and its log
// is beside the summary.
func TestInterruptWritesSummary(t *testing.T) {
	t.Parallel()
	path := writeCapture(t, castScript())
	sumPath := filepath.Join(t.TempDir(), "summary.json")
	p := testproc.Start(t, bins["replay"], "--capture", path, "--clients", "3", "--loop", "200ms,300ms",
		"--login-interval", "10ms", "--metrics", "", "--summary", sumPath, "--progress-interval", "200ms")
	// Interrupted mid-run once all three logged in, however long a loaded
	// host takes to get there (a fixed second was not always enough).
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := p.WaitOutput(ctx, p.Stderr, regexp.MustCompile(`logged in 3 /`)); err != nil {
		t.Fatalf("not all logged in: %v\n%s", err, p.Stderr)
	}
	if err := p.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("replay after SIGINT: %v\n%s", err, p.Stderr)
	}
	s, b := readSummary(t, sumPath)
	if s.LoginsSucceeded != 3 || s.MessagesSent == 0 || s.FramesSent["leave"] != 3 {
		t.Errorf("summary after SIGINT: %s", b)
	}
	if !strings.Contains(p.Stdout.String(), "messages received") {
		t.Errorf("no summary table on stdout:\n%s", p.Stdout)
	}
	checkRelayChildGone(t, p.Stderr.String())
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(sumPath), "relay.log")); err != nil || !strings.Contains(string(b), "relay stopped") {
		t.Errorf("relay.log beside the summary: %v\n%s", err, b)
	}
}

var childLine = regexp.MustCompile(`relay child pid (\d+) on `)

// checkRelayChildGone finds the relay child's pid in replay's stderr and
// checks that no such process is left (replay reaped it).
func checkRelayChildGone(t *testing.T, stderr string) {
	t.Helper()
	m := childLine.FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("replay did not announce its relay child:\n%s", stderr)
	}
	if _, err := os.Stat("/proc/" + m[1]); err == nil {
		t.Errorf("relay child pid %s still exists after replay exited", m[1])
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	path := writeCapture(t, castScript())
	garbage := filepath.Join(t.TempDir(), "garbage.pcap")
	os.WriteFile(garbage, []byte("this is not a capture file at all"), 0o644)
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no capture", []string{"--clients", "2"}, 2, "--capture is required"},
		{"bad flag", []string{"--capture", path, "--clients", "x"}, 2, "invalid argument"},
		{"bad loop", []string{"--capture", path, "--loop", "5s"}, 2, "want A,B"},
		{"unreadable", []string{"--capture", garbage}, 1, "read capture"},
		{"unreachable", []string{"--capture", path, "--target", "127.0.0.1:1", "--duration", "2s"}, 1, "unreachable"},
		{"too many clients", []string{"--capture", path, "--clients", "100000"}, 2, "ulimit -n"},
		{"loop past the flow", []string{"--capture", path, "--loop", "100ms,100s"}, 2, "past the flow's end"},
		{"source ip not local", []string{"--capture", path, "--source-ips", "192.0.2.7"}, 2, "not an address of this host"},
		{"profile without target", []string{"--capture", path, "--profile", "mqtt"}, 2, "needs --target"},
		{"unknown profile", []string{"--capture", path, "--profile", "nosuch", "--target", "127.0.0.1:1"}, 2, "not a built-in profile"},
		{"zero speed", []string{"--capture", path, "--speed", "0"}, 2, "--speed 0: must be a positive factor"},
		{"negative speed", []string{"--capture", path, "--speed", "-2"}, 2, "--speed -2: must be a positive factor"},
		// Bounds: a 1 ns heartbeat sent 11 M pings; a 999999999-digit pad
		// sent u%!(NOVERB) to the server.
		{"heartbeat too short", []string{"--capture", path, "--heartbeat", "1ns"}, 2, "--heartbeat 1ns: at least 10ms"},
		{"id pad too wide", []string{"--capture", path, "--user-id-format", "u%0999999999d"}, 2, `--user-id-format "u%0999999999d": needs exactly one %d`},
		// Addresses are host:port, refused when parsed: no relay child
		// started, no dial.
		{"target a port", []string{"--capture", path, "--target", "7400"}, 2, `invalid argument "7400" for "--target" flag: want host:port`},
		{"target no host", []string{"--capture", path, "--target", ":7400"}, 2, "no host to dial"},
		{"metrics a port", []string{"--capture", path, "--metrics", "9401"}, 2, `"--metrics" flag: want host:port`},
		{"metrics a url", []string{"--capture", path, "--metrics", "http://127.0.0.1:9401/metrics"}, 2, `"--metrics" flag: want host:port`},
		{"barrier a port", []string{"--capture", path, "--shard", "0/2", "--barrier", "9402"}, 2, `"--barrier" flag: want host:port`},
		// An inherited barrier listener is shard 0's, at an address the
		// shards reach.
		{"barrier-fd alone", []string{"--capture", path, "--target", "127.0.0.1:1", "--barrier-fd", "3"}, 2, "--barrier-fd without --barrier"},
		{"barrier-fd on shard 1", []string{"--capture", path, "--target", "127.0.0.1:1", "--shard", "1/2", "--barrier", "127.0.0.1:1", "--barrier-fd", "3"}, 2, "--barrier-fd: only shard 0 serves the barrier (this is shard 1/2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := replay(t, tt.args...)
			if res.code != tt.code || !strings.Contains(res.stderr, tt.msg) {
				t.Errorf("exit %d, stderr %q; want %d and %q", res.code, res.stderr, tt.code, tt.msg)
			}
			// A loop past the flow's end is found when the capture is
			// read, after the relay child started.
			if tt.code == 2 && tt.name != "loop past the flow" && strings.Contains(res.stderr, "relay child pid") {
				t.Errorf("a relay child was started before the refusal:\n%s", res.stderr)
			}
		})
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	path := writeCapture(t, castScript())
	out, err := exec.Command(bins["replay"], "inspect", path, "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var s profile.CaptureSummary
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatalf("inspect --json: %v\n%s", err, out)
	}
	if len(s.Flows) != 1 || s.Flows[0].ClientFrames != 9 || strings.Join(s.Flows[0].Users, ",") != "alice" {
		t.Errorf("inspect: %s", out)
	}
	text, err := exec.Command(bins["replay"], "inspect", path).Output()
	if err != nil || !strings.Contains(string(text), "alice") {
		t.Errorf("inspect text: %v\n%s", err, text)
	}
}

// TestNotRepriseTarget: --target pointed at the relay's metrics port (an
// HTTP server) ends the run at once with exit 1 and a line saying the
// target does not speak the reprise protocol, quoting its first bytes.
func TestNotRepriseTarget(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	path := writeCapture(t, castScript())
	start := time.Now()
	res := replay(t, "--capture", path, "--target", r.Metrics, "--clients", "3", "--duration", "60s", "--metrics", "off")
	if res.code != 1 || !strings.Contains(res.stderr, "does not speak the reprise protocol") || !strings.Contains(res.stderr, `"HTTP/1.1 400 Bad Request`) {
		t.Errorf("exit %d, stderr:\n%s", res.code, res.stderr)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %v", took)
	}
}

// TestDisconnectReasons: a relay that cuts idle clients sends an
// idle_timeout error frame first; the fleet counts the disconnects by that
// code, and the progress line shows them by reason.
func TestDisconnectReasons(t *testing.T) {
	t.Parallel()
	r := startRelay(t, "--idle-timeout", "1s")
	path := writeCapture(t, castScript())
	res := replay(t, "--capture", path, "--target", r.TCP, "--clients", "3", "--receive-only", "--heartbeat", "1m",
		"--login-interval", "10ms", "--duration", "3500ms", "--progress-interval", "1s")
	// Every client cut: the run measured a server that let none stay.
	if res.code != 1 || lastLine(res.stderr) != "replay: the server failed the run: every logged-in client was cut (idle_timeout=3)" {
		t.Errorf("exit %d, last line %q", res.code, lastLine(res.stderr))
	}
	if res.sum.Disconnects["idle_timeout"] != 3 {
		t.Errorf("disconnects %v, want idle_timeout=3", res.sum.Disconnects)
	}
	if !strings.Contains(res.stderr, "/ disconnected 3 (idle_timeout 3)") {
		t.Errorf("progress lines without disconnects by reason:\n%s", res.stderr)
	}
}

// writeUDPCapture writes a UDP session as a client recorded before the
// relay validated UDP addresses: the padded join, its joined, then casts
// right away, with no confirming heartbeat after joined.
func writeUDPCapture(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "session-udp.pcap")
	w, err := capture.Create(path, layers.LinkTypeEthernet, 65535)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cl, sv := netip.MustParseAddrPort("10.0.0.1:50000"), netip.MustParseAddrPort("10.0.0.2:7400")
	const token = 0x1122334455667788
	pad := wire.UDPJoinPad - wire.TokenSize - len(wire.AppendJoin(nil, "lobby", "alice", nil, 0))
	dgrams := []struct {
		at      time.Duration
		fromCli bool
		b       []byte
	}{
		{0, true, wire.AppendJoin(wire.AppendDatagram(nil, 0), "lobby", "alice", nil, pad)},
		{ms(1), false, wire.AppendJoined(nil, token, "alice", []string{"alice"})},
	}
	for at := 200; at < 400; at += 20 {
		dgrams = append(dgrams, struct {
			at      time.Duration
			fromCli bool
			b       []byte
		}{ms(at), true, wire.AppendSend(wire.AppendDatagram(nil, token), wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: 1, Payload: []byte("pose")})})
	}
	for _, d := range dgrams {
		src, dst := cl, sv
		if !d.fromCli {
			src, dst = sv, cl
		}
		if err := w.UDP(t0.Add(d.at), src, dst, d.b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUDPCaptureFromBeforeConfirmationReplays: a UDP capture recorded
// before the relay validated UDP addresses (its client never confirmed
// with a heartbeat after joined) still replays, and so does the bundled
// one: the fleet performs the handshake of the relay it talks to. Every
// client logs in; the receive-only ones (all but one, which send nothing
// but heartbeats) receive the sender's casts, which an unconfirmed session
// would not; no session ends unconfirmed.
func TestUDPCaptureFromBeforeConfirmationReplays(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, path string }{
		{"synthetic, no confirmation", writeUDPCapture(t)},
		{"bundled", filepath.Join("..", "..", "captures", "vr-session-udp.pcap")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := startRelay(t)
			res := replay(t, "--capture", tt.path, "--target", r.TCP, "--clients", "6", "--room-size", "3", "--senders", "1",
				"--loop", "150ms,450ms", "--login-interval", "10ms", "--duration", "2s")
			mustOK(t, res)
			s := res.sum
			if s.LoginsSucceeded != 6 || len(s.Disconnects) != 0 {
				t.Fatalf("logins %d, disconnects %v\n%s", s.LoginsSucceeded, s.Disconnects, res.stdout)
			}
			if s.MessagesReceived == 0 || s.FramesSent["heartbeat"] < 6 {
				t.Errorf("received %d deliveries, sent %d heartbeats (6 confirmations at least)", s.MessagesReceived, s.FramesSent["heartbeat"])
			}
			if got := relayMetric(t, r, `relay_disconnects_total{reason="unconfirmed"}`); got != 0 {
				t.Errorf("%v sessions ended unconfirmed", got)
			}
		})
	}
}

// TestAuthSecretFromFileAndEnv: replay signs its joins with a secret from
// --auth-secret-file or $REPRISE_AUTH_SECRET (nowhere on its command line)
// and the relay, reading the same secret from its file, lets them in;
// --auth-secret on the command line works but warns.
func TestAuthSecretFromFileAndEnv(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("replay-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := startRelay(t, "--auth-secret-file", file)
	path := writeCapture(t, castScript())
	base := []string{"--capture", path, "--target", r.TCP, "--clients", "2", "--login-interval", "10ms", "--duration", "500ms", "--heartbeat", "0"}
	for _, tt := range []struct {
		name string
		args []string
		env  string
		warn bool
	}{
		{"file", []string{"--auth-secret-file", file}, "", false},
		{"environment", nil, "replay-secret", false},
		{"command line", []string{"--auth-secret", "replay-secret"}, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(auth.EnvSecret, tt.env)
			res := replay(t, append(slices.Clone(base), tt.args...)...)
			mustOK(t, res)
			if res.sum.LoginsSucceeded != 2 {
				t.Fatalf("logins %d of 2, failed %v", res.sum.LoginsSucceeded, res.sum.LoginsFailed)
			}
			if warned := strings.Contains(res.stderr, "readable by every local user"); warned != tt.warn {
				t.Errorf("warned %v, want %v:\n%s", warned, tt.warn, res.stderr)
			}
		})
	}
}

// realtool is a capture written by real tools (internal/capture/testdata/realtool/make.sh).
func realtool(name string) string {
	return filepath.Join("..", "..", "internal", "capture", "testdata", "realtool", name)
}

// TestMendedCapturesReplay: captures whose timestamps go backwards, whose
// datagrams are all seen twice (lo and any merged), or whose client port
// was reused after an RST replay without a refusal, and the replay prints
// the capture's notes at start.
func TestMendedCapturesReplay(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	tests := []struct{ file, note string }{
		{"backwards-2ms.pcap", "earlier than a packet before them in the file"},
		{"reordered", "read in time order"}, // the bundled TCP capture, reordered like a multi-queue NIC
		{"udp-dup-merged.pcapng", "were copies of one seen just before"},
		{"dates-2100-1970.pcap", "packet 10: timestamp 2100"},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			target := r.TCP
			if strings.HasSuffix(tt.file, ".pcapng") {
				target = r.UDP
			}
			path := realtool(tt.file)
			if tt.file == "reordered" {
				path = reordered(t, filepath.Join("..", "..", "captures", "vr-session.pcap"))
			}
			res := replay(t, "--capture", path, "--target", target, "--clients", "2", "--login-interval", "10ms", "--duration", "1500ms")
			mustOK(t, res)
			if res.sum.LoginsSucceeded != 2 || res.sum.MessagesSent == 0 {
				t.Errorf("logins %d, sent %d", res.sum.LoginsSucceeded, res.sum.MessagesSent)
			}
			if !strings.Contains(res.stderr, "capture: ") || !strings.Contains(res.stderr, tt.note) {
				t.Errorf("no capture note at start:\n%s", res.stderr)
			}
		})
	}
}

// reordered writes a copy of the capture at path reordered like a
// multi-queue NIC (capturetest.Reorder) and returns its path.
func reordered(t *testing.T, path string) string {
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out := filepath.Join(t.TempDir(), "reordered.pcap")
	w, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := capturetest.Reorder(in, w, capturetest.NIC{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInspectHostileDates: inspect of a capture with one packet dated 2100
// and one dated 1970 stays small (max RSS under 100 MB), exits 0 and names
// both packets; its JSON is written.
func TestInspectHostileDates(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{}, {"--json"}} {
		out, rss := peakRSS(t, bins["replay"], append([]string{"inspect", realtool("dates-2100-1970.pcap")}, args...)...)
		if rss > 100<<10 {
			t.Errorf("inspect %v: max RSS %d KiB", args, rss)
		}
		if !strings.Contains(string(out), "packet 10: timestamp 2100") || !strings.Contains(string(out), "packet 20: timestamp 1970") {
			t.Errorf("inspect %v:\n%s", args, out)
		}
		t.Logf("inspect %v: max RSS %d KiB", args, rss)
	}
}

// peakRSS runs prog with args to its end and returns its stdout and its
// peak resident memory in KiB, failing t if it exits non-zero. The figure
// comes from GNU time, which forks: the rusage of a child this test process
// starts itself is no measure, because Go starts children with
// CLONE_VM|CLONE_VFORK and the kernel records the parent's (this test
// binary's) peak as the child's at exec.
func peakRSS(t *testing.T, prog string, args ...string) ([]byte, int64) {
	t.Helper()
	timeBin := needTool(t, "time")
	rssFile := filepath.Join(t.TempDir(), "rss")
	cmd := exec.Command(timeBin, append([]string{"-f", "%M", "-o", rssFile, prog}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v", filepath.Base(prog), args, err)
	}
	b, err := os.ReadFile(rssFile)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		t.Fatalf("GNU time wrote no figure: %q", b)
	}
	kib, err := strconv.ParseInt(fields[len(fields)-1], 10, 64)
	if err != nil {
		t.Fatalf("GNU time's %%M: %v", err)
	}
	return out, kib
}

// TestInspectFrames lists the script of the bundled capture's longest flow.
func TestInspectFrames(t *testing.T) {
	t.Parallel()
	path := writeCapture(t, castScript())
	out, err := exec.Command(bins["replay"], "inspect", "--frames", "--json", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	var frames []profile.FrameInfo
	if err := json.Unmarshal(out, &frames); err != nil {
		t.Fatal(err)
	}
	if len(frames) != len(castScript()) || frames[0].Kind != "join" || !frames[0].Replayed || frames[1].Kind != "send" || frames[6].Decode == "" {
		t.Errorf("frames: %s", out)
	}
	text, err := exec.Command(bins["replay"], "inspect", "--frames", path).Output()
	if err != nil || !strings.Contains(string(text), `room "lobby" user "alice"`) || !strings.Contains(string(text), "unicast to bob") {
		t.Errorf("inspect --frames: %v\n%s", err, text)
	}
}

// TestInspectMaxFrame: frames over 64 KiB (a relay run with --max-frame
// 300000) are read with --max-frame, and left out with a note without.
func TestInspectMaxFrame(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("x"), 200000)
	fr := []timedFrame{join()}
	for i := range 10 {
		p := []byte("small")
		if i%2 == 0 {
			p = big
		}
		fr = append(fr, timedFrame{ms(100 + 10*i), wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast, Payload: p})})
	}
	path := writeCapture(t, fr)
	count := func(args ...string) (int, string) {
		out, err := exec.Command(bins["replay"], append([]string{"inspect", "--json", path}, args...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		var s profile.CaptureSummary
		json.Unmarshal(out, &s)
		return s.Flows[0].FramesByKind["send"], string(out)
	}
	if n, out := count(); n == 10 || !strings.Contains(out, "oversized") {
		t.Errorf("default: %d sends, want the big ones left out with a note:\n%.2000s", n, out)
	}
	if n, _ := count("--max-frame", "300000"); n != 10 {
		t.Errorf("--max-frame 300000: %d sends, want 10", n)
	}
}

// TestInspectInterrupt: inspect reading a FIFO that stalls (nothing
// arriving) stops on the first SIGTERM, prints what it read and exits 1.
func TestInspectInterrupt(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(writeCapture(t, castScript()))
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	p := testproc.Start(t, bins["replay"], "inspect", fifo)
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Write(data) // and nothing more: the writer stays open
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	p.Signal(syscall.SIGTERM)
	err = p.Wait(5 * time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("inspect after SIGTERM: %v (took %v)\n%s", err, time.Since(start), p.Stderr)
	}
	if !strings.Contains(p.Stdout.String(), "alice") || !strings.Contains(p.Stderr.String(), "interrupted") {
		t.Errorf("stdout:\n%s\nstderr:\n%s", p.Stdout, p.Stderr)
	}
}

// TestInspectUsage: bad arguments of inspect exit 2, an unreadable file 1.
func TestInspectUsage(t *testing.T) {
	t.Parallel()
	path := writeCapture(t, castScript())
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"inspect"}, 2, "accepts 1 arg"},
		{[]string{"inspect", "--frames", "--flow", "7", path}, 2, "--flow 7"},
		{[]string{"inspect", "--bogus", path}, 2, "unknown flag"},
		{[]string{"inspect", "/nonexistent.pcap"}, 1, "no such file"},
		// A flow the file does not have is refused, not replaced by flow 0.
		{[]string{"inspect", "--flow", "5", path}, 2, "--flow 5: the capture has 1 flow (0 to 0)"},
		{[]string{"inspect", "--flow", "-3", path}, 2, "--flow -3"},
		{[]string{"inspect", "--json", "--flow", "1", path}, 2, "--flow 1"},
	}
	for _, tt := range tests {
		cmd := exec.Command(bins["replay"], tt.args...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != tt.code || !strings.Contains(errb.String(), tt.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, errb.String(), tt.code, tt.msg)
		}
	}
}

// TestCommandGroupUsage: a command group (profile, k8s) given no or an
// unknown subcommand exits 2 with one line naming the ones it has, as an
// unknown top-level command does.
func TestCommandGroupUsage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		msg  string
	}{
		// The lists of known subcommands grow; the line names them.
		{[]string{"profile", "bogus", "x"}, `unknown command "bogus" for "replay profile" (known: check`},
		{[]string{"profile", "nosuch"}, `unknown command "nosuch" for "replay profile" (known: check`},
		{[]string{"profile"}, "replay profile needs a subcommand: check"},
		{[]string{"k8s", "nosuch"}, `unknown command "nosuch" for "replay k8s" (known: `},
		{[]string{"nosuch"}, `unknown command "nosuch" for "replay"`},
	}
	for _, tt := range tests {
		cmd := exec.Command(bins["replay"], tt.args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		cmd.Run()
		lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
		if code := cmd.ProcessState.ExitCode(); code != 2 || len(lines) != 1 || !strings.Contains(lines[0], tt.msg) || out.Len() > 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and the one line %q", tt.args, code, out.String(), errb.String(), tt.msg)
		}
	}
}

// TestK8sRelayFlags: k8s render takes --relay-flags as replay, compare and
// capacity do (split on spaces); --relay-arg, its old name, still works.
func TestK8sRelayFlags(t *testing.T) {
	t.Parallel()
	for _, flags := range [][]string{
		{"--relay-flags", "--max-room-members 40 --max-pending 2097152"},
		{"--relay-arg", "--max-room-members", "--relay-arg", "40", "--relay-flags", "--max-pending 2097152"},
	} {
		cmd := exec.Command(bins["replay"], append(append([]string{"k8s", "render", "--relay"}, flags...), "--", "--clients", "8")...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("%v: %v: %s", flags, err, errb.String())
		}
		y := out.String()
		for _, want := range []string{"--max-room-members", `"40"`, "--max-pending", `"2097152"`} {
			if !strings.Contains(y, want) {
				t.Errorf("%v: the relay's args lack %s:\n%s", flags, want, y)
			}
		}
	}
}
