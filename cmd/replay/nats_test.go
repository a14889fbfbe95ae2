package main

// nats-server, a real server no one here wrote (installed by scripts/deps.sh
// from scripts/go-tools, pinned), recorded from a real client (nats.go, bench/cmd/natsrec)
// through `record proxy` and replayed with the built-in nats profile; the
// fleet's counts are checked against the server's own /varz and /connz.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/profile"
)

// natsPing is the server's ping_interval; it closes a client that leaves
// natsPingMax pings unanswered, so a deadline falls every
// natsPing*(natsPingMax+1): about 10 s, of which a fleet answers in time
// whenever its readers get a CPU at all (a 4 s deadline cut clients of a
// -race fleet on a host at load 25, their readers unscheduled for
// seconds). Many pings fall within it, so a client that answers none is
// still cut well within a hold; the runs that want that cut use a short
// deadline (natsQuickPing), which does not depend on the fleet.
const (
	natsPing    = 250 * time.Millisecond
	natsPingMax = 40
)

// natsQuickPing and natsQuickPingMax make a deadline of about 4 s for a
// run whose clients answer no ping: the cut is the server's own timing.
const (
	natsQuickPing    = time.Second
	natsQuickPingMax = 3
)

// startNATS starts nats-server on 127.0.0.1 with its monitoring port and a
// lowered ping interval; with auth, clients must give a user and password.
func startNATS(t *testing.T, bin string, auth bool) (port, mon int) {
	t.Helper()
	return startNATSPinging(t, bin, auth, natsPing, natsPingMax)
}

// startNATSPinging is startNATS with the server pinging every ping and
// closing a client that leaves pingMax pings unanswered.
func startNATSPinging(t *testing.T, bin string, auth bool, ping time.Duration, pingMax int) (port, mon int) {
	t.Helper()
	conf := fmt.Sprintf("ping_interval: %q\nping_max: %d\n", ping.String(), pingMax)
	if auth {
		conf += "authorization { user: alice, password: s3cret }\n"
	}
	return startNATSConf(t, bin, conf)
}

// startNATSConf starts nats-server with conf, listening for clients
// and for monitoring (/varz) on two free ports, and returns them once
// it listens on both.
func startNATSConf(t *testing.T, bin, conf string) (port, mon int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.conf")
	ports := startServer(t, 2, func(p []int) *exec.Cmd {
		body := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\n", p[0], p[1]) + conf
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return exec.Command(bin, "-c", path)
	})
	return ports[0], ports[1]
}

// natsSlowConsumers reads the clients the server closed as slow
// consumers (a client that did not read what it was sent in time).
func natsSlowConsumers(t *testing.T, mon int) int64 {
	t.Helper()
	var v struct {
		Slow int64 `json:"slow_consumers"`
	}
	getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/varz", mon), &v)
	return v.Slow
}

// natsVarz reads the server's message counters.
func natsVarz(t *testing.T, mon int) (in, out int64) {
	t.Helper()
	var v struct {
		InMsgs  int64 `json:"in_msgs"`
		OutMsgs int64 `json:"out_msgs"`
	}
	getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/varz", mon), &v)
	return v.InMsgs, v.OutMsgs
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	if err := fetchJSON(url, v); err != nil {
		t.Fatal(err)
	}
}

// fetchText GETs url into s.
func fetchText(url string, s *string) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	*s = string(b)
	return err
}

func fetchJSON(url string, v any) error {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// connzPeak polls /connz until stop and returns the most distinct
// connection names the server held at once.
func connzPeak(ctx context.Context, mon int) func() int {
	var mu sync.Mutex
	peak := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			var cz struct {
				Connections []struct {
					Name string `json:"name"`
				} `json:"connections"`
			}
			if fetchJSON(fmt.Sprintf("http://127.0.0.1:%d/connz?limit=4096", mon), &cz) == nil {
				names := map[string]bool{}
				for _, c := range cz.Connections {
					names[c.Name] = true
				}
				mu.Lock()
				peak = max(peak, len(names))
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	})
	return func() int {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

var suggestedLoop = regexp.MustCompile(`suggested --loop=(\S+)`)

// TestNATSServer: 200 clients (10 senders), then 200 receive-only, held
// past a ping deadline after every login with no disconnect (every
// client answers the server's PINGs; on a host that starved the fleet,
// only clients the server cut as stale); nats-server's /connz shows 200 distinct connection
// names and its /varz in_msgs/out_msgs match the fleet's sent and
// received within 1 %; latency comes from the decimal stamp. A server
// that wants a password refuses every login, counted by its -ERR reason;
// without the PONG reaction, every client is dropped and counted by the
// server's reason (Stale Connection).
func TestNATSServer(t *testing.T) {
	t.Parallel()
	bin := needNATSServer(t)
	rec := benchBuild(t, "natsrec", "./cmd/natsrec")
	port, mon := startNATS(t, bin, false)
	target := fmt.Sprintf("127.0.0.1:%d", port)
	capPath := recordThrough(t, target, rec, "-port", "LISTEN_PORT", "-user", "rec-user-01", "-room", "lobby", "-n", "20")
	insp := inspectProfile(t, "nats", capPath)
	for _, want := range []string{`user id: "rec-user-01"`, `room: "lobby"`, "server answer: accepted", "pub 20", "msg 20"} {
		if !strings.Contains(insp, want) {
			t.Fatalf("inspect --profile nats lacks %q:\n%s", want, insp)
		}
	}
	loop := suggestedLoop.FindStringSubmatch(insp)
	if loop == nil {
		t.Fatalf("inspect suggests no loop:\n%s", insp)
	}
	// Held past a ping deadline after every login is in: a client that
	// answered no ping would have been cut.
	hold := natsPing*(natsPingMax+1) + 2*time.Second
	const drainBound = 30 * time.Second

	t.Run("senders", func(t *testing.T) {
		in0, out0 := natsVarz(t, mon)
		slow0 := natsSlowConsumers(t, mon)
		ctx, cancel := context.WithCancel(context.Background())
		peak := connzPeak(ctx, mon)
		res := replay(t, "--profile", "nats", "--capture", capPath, "--target", target,
			"--clients", "200", "--senders", "10", "--room-size", "50", "--speed", "0.5", "--loop", loop[1], "--login-interval", "10ms",
			"--login-timeout", "30s", "--after-logins", hold.String(), "--drain-deliveries", drainBound.String())
		cancel()
		mustOK(t, res)
		drainedBefore(t, res)
		s := res.sum
		in1, out1 := natsVarz(t, mon)
		if s.LoginsSucceeded != 200 || len(s.LoginsFailed) != 0 || s.MessagesSent == 0 {
			t.Fatalf("logins %d failed %v sent %d\n%s", s.LoginsSucceeded, s.LoginsFailed, s.MessagesSent, res.stdout)
		}
		// A starved fleet that reads too late is a slow consumer the
		// server closes (82 at load 20, seen by the fleet's next send
		// as write_error): each such cut must be one the server counted.
		cut := cutOnlyIfStarved(t, s, "stale_connection", "write_error", "reset", "closed_by_server")
		if slow := natsSlowConsumers(t, mon) - slow0; cut-s.Disconnects["stale_connection"] > slow {
			t.Errorf("disconnects %v: more than the server's %d slow consumers and its stale connections", s.Disconnects, slow)
		}
		if p := peak(); int64(p)+cut < 200 || p > 200 {
			t.Errorf("nats-server's /connz held at most %d distinct connection names, want 200 (less the %d cut)", p, cut)
		}
		// A cut client's deliveries queued at the server never reach it.
		if !within(float64(in1-in0), float64(s.MessagesSent), 1) || (cut == 0 && !within(float64(out1-out0), float64(s.MessagesReceived), 1)) || out1-out0 < s.MessagesReceived {
			t.Errorf("nats-server in_msgs %d out_msgs %d; the fleet sent %d received %d (want within 1%%)", in1-in0, out1-out0, s.MessagesSent, s.MessagesReceived)
		}
		if s.LatencyMS.P50 <= 0 || s.LatencyMS.P99 <= 0 || s.FramesSent["pong"] == 0 {
			t.Errorf("latency %+v, pongs %d", s.LatencyMS, s.FramesSent["pong"])
		}
		t.Logf("nats senders: %v held, the run took %v; fleet sent %d received %d; nats-server in %d out %d; latency p50 %.2f p99 %.2f ms; pongs %d",
			hold, res.took.Round(time.Millisecond), s.MessagesSent, s.MessagesReceived, in1-in0, out1-out0, s.LatencyMS.P50, s.LatencyMS.P99, s.FramesSent["pong"])
	})
	t.Run("pings often", func(t *testing.T) { natsPingsOften(t, bin, capPath, loop[1]) })
	t.Run("receive-only", func(t *testing.T) {
		in0, _ := natsVarz(t, mon)
		ctx, cancel := context.WithCancel(context.Background())
		peak := connzPeak(ctx, mon)
		res := replay(t, "--profile", "nats", "--capture", capPath, "--target", target,
			"--clients", "200", "--receive-only", "--login-interval", "10ms", "--login-timeout", "30s", "--after-logins", hold.String())
		cancel()
		mustOK(t, res)
		s := res.sum
		in1, _ := natsVarz(t, mon)
		if s.LoginsSucceeded != 200 || s.MessagesSent != 0 || in1 != in0 || s.FramesSent["pong"] == 0 {
			t.Fatalf("logins %d sent %d, nats-server in_msgs %d, frames %v", s.LoginsSucceeded, s.MessagesSent, in1-in0, s.FramesSent)
		}
		cut := cutOnlyIfStarved(t, s, "stale_connection")
		if p := peak(); int64(p)+cut < 200 || p > 200 {
			t.Errorf("nats-server's /connz held at most %d distinct connection names, want 200 (less the %d cut)", p, cut)
		}
	})
	t.Run("refused", func(t *testing.T) {
		authPort, _ := startNATS(t, bin, true)
		res := replay(t, "--profile", "nats", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", authPort),
			"--clients", "20", "--login-interval", "2ms", "--after-logins", "500ms")
		if got := res.sum.LoginsFailed["login_authorization_violation"]; got != 20 || res.sum.LoginsSucceeded != 0 {
			t.Fatalf("refused logins by reason %v, succeeded %d (exit %d)\n%s%s", res.sum.LoginsFailed, res.sum.LoginsSucceeded, res.code, res.stdout, res.stderr)
		}
	})
	t.Run("no pong", func(t *testing.T) {
		data, _ := profile.BuiltinFile("nats")
		cut := regexp.MustCompile(`(?s)\nreactions:.*?\nheartbeat:`).ReplaceAll(data, []byte("\nheartbeat:"))
		if len(cut) == len(data) {
			t.Fatal("the nats profile has no reactions to remove")
		}
		path := filepath.Join(t.TempDir(), "nats-no-pong.yaml")
		if err := os.WriteFile(path, cut, 0o644); err != nil {
			t.Fatal(err)
		}
		quick, _ := startNATSPinging(t, bin, false, natsQuickPing, natsQuickPingMax)
		res := replay(t, "--profile", path, "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", quick),
			"--clients", "20", "--receive-only", "--login-interval", "2ms", "--after-logins", (natsQuickPing*(natsQuickPingMax+1) + 3*time.Second).String())
		if got := res.sum.Disconnects["stale_connection"]; got != 20 {
			t.Fatalf("without the PONG reaction: disconnects %v, want stale_connection=20 (exit %d)\n%s%s", res.sum.Disconnects, res.code, res.stdout, res.stderr)
		}
	})
}

// natsPingsOften: against a nats-server that pings every client every
// 20 ms (and waits 500 pings, 10 s, for an answer, as the other runs do),
// the run ends about the drain's quiet period after its hold:
// the drain waits for deliveries in flight, not for a moment without any
// byte, which the pings never leave (it took the drain's bound, 20 s,
// before). The counts match the server's as the senders run's do.
func natsPingsOften(t *testing.T, bin, capPath, loop string) {
	port, mon := startNATSPinging(t, bin, false, 20*time.Millisecond, 500)
	const hold, drainBound = 3 * time.Second, 20 * time.Second
	in0, out0 := natsVarz(t, mon)
	res := replay(t, "--profile", "nats", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", port),
		"--clients", "40", "--senders", "4", "--room-size", "10", "--speed", "0.5", "--loop", loop, "--login-interval", "10ms",
		"--login-timeout", "30s", "--after-logins", hold.String(), "--drain-deliveries", drainBound.String())
	mustOK(t, res)
	drainedBefore(t, res)
	s := res.sum
	in1, out1 := natsVarz(t, mon)
	if s.LoginsSucceeded != 40 || len(s.Disconnects) != 0 || s.MessagesSent == 0 || s.FramesSent["pong"] == 0 {
		t.Fatalf("logins %d disconnects %v sent %d frames %v\n%s", s.LoginsSucceeded, s.Disconnects, s.MessagesSent, s.FramesSent, res.stdout)
	}
	if !within(float64(in1-in0), float64(s.MessagesSent), 1) || !within(float64(out1-out0), float64(s.MessagesReceived), 1) {
		t.Errorf("nats-server in_msgs %d out_msgs %d; the fleet sent %d received %d (want within 1%%, as the senders run)", in1-in0, out1-out0, s.MessagesSent, s.MessagesReceived)
	}
	t.Logf("nats pinging every 20 ms: the run took %v (hold %v, drain bound %v); fleet sent %d received %d; nats-server in %d out %d; pongs %d",
		res.took.Round(time.Millisecond), hold, drainBound, s.MessagesSent, s.MessagesReceived, in1-in0, out1-out0, s.FramesSent["pong"])
}

// loginTimeoutsOnlyIfStarved fails a run with failed logins, unless every
// one ran out of its --login-timeout (timeout, upgrade_timeout,
// login_timeout: the server or the fleet too slow to finish it, never a
// refusal or an error) while the fleet says its host starved it
// (saturation "fleet" or "host_busy"). A server sharing a starved host
// (load 29, the fleet at 0.06 of 2 cores) left 12 of 200 socket.io logins
// unanswered past 30 s. It returns the logins that timed out.
func loginTimeoutsOnlyIfStarved(t *testing.T, s fleet.Summary) int64 {
	t.Helper()
	var n, timedOut int64
	for reason, k := range s.LoginsFailed {
		n += k
		if reason == "timeout" || strings.HasSuffix(reason, "_timeout") {
			timedOut += k
		}
	}
	switch {
	case n == 0:
	case timedOut == n && s.Saturation["fleet"]+s.Saturation["host_busy"] > 0:
		t.Logf("the host starved the fleet (saturation %v): %d logins ran out of time as %v", s.Saturation, n, s.LoginsFailed)
	default:
		t.Errorf("logins failed %v with saturation %v: want none, or only login timeouts on a host that starved the fleet", s.LoginsFailed, s.Saturation)
	}
	return n
}

// cutOnlyIfStarved fails a run that should keep every client, unless the
// server cut them as it cuts a client that leaves its pings unanswered
// (the fleet's labels for that: reasons) while the fleet says its host
// starved it (saturation "fleet" or "host_busy": a reader that gets no
// CPU answers no ping in time, and the server is right to cut it); any
// other disconnect, or one on a host with CPU to spare, is a failure. It
// returns the clients cut.
func cutOnlyIfStarved(t *testing.T, s fleet.Summary, reasons ...string) int64 {
	t.Helper()
	var n, cut int64
	for reason, k := range s.Disconnects {
		n += k
		if slices.Contains(reasons, reason) {
			cut += k
		}
	}
	switch {
	case n == 0:
	case cut == n && s.Saturation["fleet"]+s.Saturation["host_busy"] > 0:
		t.Logf("the host starved the fleet (saturation %v): the server cut %d clients as %v", s.Saturation, n, s.Disconnects)
	default:
		t.Errorf("disconnects %v with saturation %v: want none, or only %v on a host that starved the fleet", s.Disconnects, s.Saturation, reasons)
	}
	return n
}
