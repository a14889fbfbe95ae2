package main

// Tests against real servers no one here wrote (mosquitto, redis-server),
// installed from Debian packages by .ci/run and started on 127.0.0.1: a
// real client's session is recorded with `record proxy`, replayed through
// a protocol profile, and the fleet's counts are checked against the
// server's own counters.

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// needTool skips the test when a server or client program is missing, or
// fails it in CI, where .ci/run installs them (testproc.NeedTool).
func needTool(t *testing.T, name string) string {
	t.Helper()
	pkg, ok := debianPkg[name]
	if !ok {
		t.Fatalf("needTool: add %s's Debian package to debianPkg (and to .ci/run)", name)
	}
	return testproc.NeedTool(t, name, pkg)
}

// debianPkg names the Debian package of each program the tests run.
var debianPkg = map[string]string{
	"mosquitto":        "mosquitto",
	"mosquitto_sub":    "mosquitto-clients",
	"mosquitto_pub":    "mosquitto-clients",
	"redis-server":     "redis-server",
	"redis-cli":        "redis-tools",
	"python3":          "python3",
	"mosquitto_passwd": "mosquitto",
	"node":             "nodejs",
	"npm":              "npm",
	"time":             "time",
	"openssl":          "openssl",
}

// python is Debian's python3, which has python3-paho-mqtt (a pyenv shim
// on PATH may not).
func python(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return needTool(t, "python3")
}

// startServer starts a server no one here wrote on n ports this process
// chose, listening on TCP at each (testproc.StartServer: started again on
// other ports when another process took one first).
func startServer(t *testing.T, n int, cmd func(ports []int) *exec.Cmd) []int {
	t.Helper()
	_, ports := testproc.StartServer(t, n, cmd)
	return ports
}

// recordThrough records what a client program sends to upstream through
// `record proxy` and returns the capture's path.
func recordThrough(t *testing.T, upstream string, client ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "session.pcap")
	p, listen := startRecordProxy(t, upstream, out)
	args := append(append([]string(nil), client[1:]...), "")
	for i, a := range args {
		if a == "LISTEN_PORT" {
			args[i] = listen[strings.LastIndexByte(listen, ':')+1:]
		}
	}
	cmd := exec.Command(client[0], args[:len(args)-1]...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("recorded client %v: %v\n%s", client, err, b)
	}
	if err := p.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, p.Stderr)
	}
	return out
}

// inspectProfile runs replay inspect --profile.
func inspectProfile(t *testing.T, prof, capPath string) string {
	t.Helper()
	out, err := exec.Command(bins["replay"], "inspect", "--profile", prof, capPath).CombinedOutput()
	if err != nil {
		t.Fatalf("replay inspect --profile %s: %v\n%s", prof, err, out)
	}
	return string(out)
}

// firstSend is inspect --profile's line naming the recorded first send.
var firstSend = regexp.MustCompile(`first send: client message #\d+ at ([0-9.]+)s`)

// firstSendS is the offset, in seconds from the flow's start, of the
// recorded client's first send in inspect --profile's output insp: the
// login and the handshake a receive-only client plays all come before it.
func firstSendS(t *testing.T, insp string) float64 {
	t.Helper()
	m := firstSend.FindStringSubmatch(insp)
	if m == nil {
		t.Fatalf("inspect names no first send:\n%s", insp)
	}
	s, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("first send %q: %v", m[1], err)
	}
	return s
}

// suggestedLoopOf is the --loop inspect --profile suggests for a
// capture: a test that depends on how the recorded client closed (with
// a DISCONNECT or without) reads the flow's own frames, never a fixed
// index.
func suggestedLoopOf(t *testing.T, prof, capPath string) string {
	t.Helper()
	insp := inspectProfile(t, prof, capPath)
	loop := suggestedLoop.FindStringSubmatch(insp)
	if loop == nil {
		t.Fatalf("inspect --profile %s suggests no --loop:\n%s", prof, insp)
	}
	return loop[1]
}

// startRecordProxy starts `record proxy` and waits for its listener.
func startRecordProxy(t *testing.T, upstream, out string) (p *testproc.Proc, listen string) {
	t.Helper()
	p = testproc.Start(t, bins["record"], "proxy", "--listen", "127.0.0.1:0", "--upstream", upstream, "--out", out)
	return p, proxyAddr(t, p, p.Stderr)
}

// proxyAddr waits until `record proxy` (p, printing to buf) says where it
// listens, on the port the kernel gave it (--listen 127.0.0.1:0: a port
// chosen here could be taken before the proxy binds it), and returns it.
func proxyAddr(t *testing.T, p *testproc.Proc, buf *testproc.SyncBuffer) string {
	t.Helper()
	// A probe bounded by 10 s gave up on a -race proxy that a loaded host
	// (load 20) started later than that.
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Patience(t))
	defer cancel()
	m, err := p.WaitOutput(ctx, buf, regexp.MustCompile(`record: proxy on (\S+) `))
	if err != nil {
		t.Fatalf("record proxy: %v\n%s", err, buf)
	}
	return m[1]
}

// execReplay runs the replay binary with args (no flags added).
func execReplay(args ...string) (string, error) {
	out, err := exec.Command(bins["replay"], args...).CombinedOutput()
	return string(out), err
}

// within reports whether got is within pct percent of want.
func within(got, want float64, pct float64) bool {
	return math.Abs(got-want) <= want*pct/100
}

// sysMonitor follows mosquitto's $SYS counters with mosquitto_sub.
type sysMonitor struct {
	mu       sync.Mutex
	vals     map[string]float64
	received int // $SYS messages the monitor itself got (the broker counts them as sent)
}

func startSysMonitor(t *testing.T, port int) *sysMonitor {
	t.Helper()
	m := &sysMonitor{vals: map[string]float64{}}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, needTool(t, "mosquitto_sub"), "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-v",
		"-t", "$SYS/broker/publish/messages/+")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			topic, val, ok := strings.Cut(sc.Text(), " ")
			v, err := strconv.ParseFloat(val, 64)
			if !ok || err != nil {
				continue
			}
			m.mu.Lock()
			m.vals[topic] = v
			m.received++
			m.mu.Unlock()
		}
	})
	t.Cleanup(func() { cancel(); cmd.Wait(); wg.Wait() })
	return m
}

// settled waits until the $SYS counters stop moving and returns them.
// The broker publishes a counter at most once per sys_interval (1 s), and
// only when it changed, so two equal readings half a second apart say
// nothing: the counters must stay the same for several intervals.
func (m *sysMonitor) settled(t *testing.T) (received, sent float64, own int) {
	t.Helper()
	const still = 2500 * time.Millisecond
	var last string
	since := time.Now()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		m.mu.Lock()
		received, sent, own = m.vals["$SYS/broker/publish/messages/received"], m.vals["$SYS/broker/publish/messages/sent"], m.received
		m.mu.Unlock()
		// The $SYS messages this monitor gets count as sent: sent moves
		// every other interval on an idle broker, sent-own does not.
		cur := fmt.Sprint(received, sent-float64(own))
		if cur != last {
			last, since = cur, time.Now()
			continue
		}
		if time.Since(since) >= still {
			return received, sent, own
		}
	}
	t.Fatal("mosquitto's $SYS counters never settled")
	return 0, 0, 0
}

// startMosquitto starts mosquitto with an MQTT listener, a websockets
// listener and one that refuses anonymous clients; $SYS every second.
func startMosquitto(t *testing.T) (tcp, ws, auth int) {
	t.Helper()
	_, ports := startMosquittoBroker(t)
	return ports[0], ports[1], ports[2]
}

// startMosquittoBroker is startMosquitto returning the broker itself.
func startMosquittoBroker(t *testing.T) (*mosquittoBroker, []int) {
	t.Helper()
	return startMosquittoConf(t, needTool(t, "mosquitto"), 3, func(p []int) string {
		return fmt.Sprintf(`per_listener_settings true
listener %d 127.0.0.1
allow_anonymous true
max_connections -1
listener %d 127.0.0.1
protocol websockets
allow_anonymous true
listener %d 127.0.0.1
allow_anonymous false
sys_interval 1
persistence false
`, p[0], p[1], p[2])
	})
}

// mosquittoBroker is a mosquitto a test started; its log (stderr, the
// default log_dest) says each client that connects and each that goes.
type mosquittoBroker struct{ p *testproc.Proc }

// startMosquittoConf starts mosquitto (bin) with the configuration conf
// makes for n listener ports and returns once each listens; started again
// on other ports when one was taken first (testproc.StartServer).
func startMosquittoConf(t *testing.T, bin string, n int, conf func(ports []int) string) (*mosquittoBroker, []int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	p, ports := testproc.StartServer(t, n, func(ports []int) *exec.Cmd {
		if err := os.WriteFile(path, []byte(conf(ports)), 0o644); err != nil {
			t.Fatal(err)
		}
		return exec.Command(bin, "-c", path)
	})
	return &mosquittoBroker{p}, ports
}

// The broker's log lines for a client that connected, and for one that
// went (mosquitto 2.0: a DISCONNECT, a closed socket, a keepalive timeout,
// a socket error, or an older connection of the same id that a new one
// took over).
var (
	mosqConnected = regexp.MustCompile(`New client connected from \S+ as ([^\s,]+) `)
	mosqGone      = regexp.MustCompile(`Client ([^\s,]+) (?:disconnected|closed its connection|has exceeded timeout|already connected)|Socket error on client ([^\s,]+),`)
)

// logMark is where the broker's log ends now: peakSince's start.
func (b *mosquittoBroker) logMark() int { return len(b.p.Stderr.String()) }

// peakSince is the most clients with distinct ids that the broker held
// connected at once since mark, by its own log: every connect and every
// disconnect, in the order the broker handled them. ($SYS's
// clients/connected is a sample the broker takes once per sys_interval
// at best: under load a broker behind on its deliveries (p50 2.6 s)
// sampled it before and after a 7 s run of 200 clients, never during, and
// read 10.)
func (b *mosquittoBroker) peakSince(mark int) int {
	on := map[string]bool{}
	peak, off := 0, 0
	for _, line := range strings.SplitAfter(b.p.Stderr.String(), "\n") {
		if m := mosqConnected.FindStringSubmatch(line); m != nil {
			on[m[1]] = true
		} else if m := mosqGone.FindStringSubmatch(line); m != nil {
			delete(on, m[1]+m[2])
		}
		if off += len(line); off > mark {
			peak = max(peak, len(on))
		}
	}
	return peak
}

// TestMQTTMosquitto records paho-mqtt's session with mosquitto over TCP
// and over WebSockets, replays it with 200 clients (10 senders, then
// receive-only), and checks mosquitto's own $SYS counters: 200 distinct
// clients at once (mosquitto refuses a duplicate client id by dropping
// the older connection, so this proves the rewrite), PUBLISH messages
// received and sent within 1% of the fleet's counts, receive-only clients
// sending no PUBLISH, and refused logins counted by CONNACK reason.
func TestMQTTMosquitto(t *testing.T) {
	t.Parallel() // its own servers on ports of its own, its own recordings
	broker, ports := startMosquittoBroker(t)
	tcp, ws, authPort := ports[0], ports[1], ports[2]
	py := python(t)
	client := filepath.Join("testdata", "mqttclient.py")
	mon := startSysMonitor(t, tcp)
	for _, tc := range []struct {
		name, profile, transport string
		port                     int
	}{
		{"tcp", "mqtt", "tcp", tcp},
		{"websocket", "mqtt-ws", "websockets", ws},
	} {
		t.Run(tc.name, func(t *testing.T) {
			capPath := recordThrough(t, fmt.Sprintf("127.0.0.1:%d", tc.port), py, client, "LISTEN_PORT", tc.transport, "20")
			insp := inspectProfile(t, tc.profile, capPath)
			for _, want := range []string{`user id: "rec-client-01"`, `room: "rooms/lobby"`, "server answer: accepted", "publish 20"} {
				if !strings.Contains(insp, want) {
					t.Fatalf("inspect --profile %s lacks %q:\n%s", tc.profile, want, insp)
				}
			}
			// The loop is the one inspect suggests from the flow's own
			// frames: how the recorded client ended (with a DISCONNECT
			// or without) decides its last index, so none is fixed here.
			loop := suggestedLoop.FindStringSubmatch(insp)
			if loop == nil {
				t.Fatalf("inspect --profile %s suggests no --loop:\n%s", tc.profile, insp)
			}
			target := fmt.Sprintf("127.0.0.1:%d", tc.port)
			recv0, sent0, own0 := mon.settled(t)
			mark := broker.logMark()
			res := replay(t, "--profile", tc.profile, "--capture", capPath, "--target", target,
				"--clients", "200", "--senders", "10", "--loop", loop[1], "--login-interval", "2ms", "--after-logins", "5s",
				// Every delivery in flight is awaited: on a loaded machine
				// mosquitto's backlog outlasted the default 2 s drain.
				"--drain-deliveries", "30s")
			mustOK(t, res)
			s := res.sum
			if s.LoginsSucceeded != 200 || s.PeakLoggedIn != 200 || len(s.LoginsFailed) != 0 || s.MessagesSent == 0 {
				t.Fatalf("logins %d peak %d failed %v sent %d\n%s", s.LoginsSucceeded, s.PeakLoggedIn, s.LoginsFailed, s.MessagesSent, res.stdout)
			}
			recv1, sent1, own1 := mon.settled(t)
			peak := broker.peakSince(mark)
			if peak < 200 {
				t.Errorf("mosquitto's log has at most %d clients connected at once, want 200 distinct (+ the monitor)", peak)
			}
			brokerRecv := recv1 - recv0
			brokerSent := sent1 - sent0 - float64(own1-own0) // less the $SYS messages the monitor got
			if !within(brokerRecv, float64(s.MessagesSent), 1) {
				t.Errorf("mosquitto received %v PUBLISH, the fleet sent %d (want within 1%%)", brokerRecv, s.MessagesSent)
			}
			if !within(brokerSent, float64(s.MessagesReceived), 1) {
				t.Errorf("mosquitto sent %v PUBLISH to the fleet, the fleet received %d (want within 1%%)", brokerSent, s.MessagesReceived)
			}
			t.Logf("%s: fleet sent %d received %d; mosquitto received %v sent %v; peak connected %v; latency p50 %.2f ms",
				tc.name, s.MessagesSent, s.MessagesReceived, brokerRecv, brokerSent, peak, s.LatencyMS.P50)

			// Receive-only: the login and subscription, then heartbeats
			// (PINGREQ) only. A receive-only client plays the recorded
			// handshake (CONNECT, SUBSCRIBE) at its recorded offsets and
			// sends its first heartbeat one interval after the last of
			// them, as a keepalive counts from the last packet sent. A
			// recording made on a loaded host puts the SUBSCRIBE late (its
			// client sleeps 0.2 s and is scheduled whenever), so the hold
			// is the recorded first send (an upper bound on the last
			// handshake frame's offset) plus two intervals, never a fixed
			// 2 s.
			hold := time.Duration(firstSendS(t, insp)*float64(time.Second)) + 2*time.Second
			// The baseline: the counters just settled above (nothing ran
			// between), not a second 2.5 s settle.
			recv0 = recv1
			res = replay(t, "--profile", tc.profile, "--capture", capPath, "--target", target,
				"--clients", "200", "--receive-only", "--heartbeat", "1s", "--login-interval", "2ms", "--after-logins", hold.String())
			mustOK(t, res)
			s = res.sum
			recv1, _, _ = mon.settled(t)
			if s.LoginsSucceeded != 200 || s.MessagesSent != 0 || s.FramesSent["publish"] != 0 || s.FramesSent["heartbeat"] == 0 || recv1 != recv0 {
				t.Errorf("receive-only: logins %d, messages sent %d, frames %v, mosquitto received %v PUBLISH", s.LoginsSucceeded, s.MessagesSent, s.FramesSent, recv1-recv0)
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		capPath := recordThrough(t, fmt.Sprintf("127.0.0.1:%d", tcp), py, client, "LISTEN_PORT", "tcp", "3")
		res := replay(t, "--profile", "mqtt", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", authPort),
			"--clients", "20", "--login-interval", "2ms", "--after-logins", "500ms")
		// Every login refused: the run says so and fails.
		if res.sum.LoginsFailed["not_authorized"] != 20 || res.sum.LoginsSucceeded != 0 {
			t.Fatalf("refused logins by reason %v, succeeded %d (exit %d)\n%s%s", res.sum.LoginsFailed, res.sum.LoginsSucceeded, res.code, res.stdout, res.stderr)
		}
	})
}
