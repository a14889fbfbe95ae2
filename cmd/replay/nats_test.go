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
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// natsPing is the server's ping_interval; it closes a client that leaves
// natsPingMax pings unanswered, so a deadline falls every
// natsPing*(natsPingMax+1).
const (
	natsPing    = time.Second
	natsPingMax = 3
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
	port, mon = freePort(t), freePort(t)
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\nping_interval: %q\nping_max: %d\n", port, mon, ping.String(), pingMax)
	if auth {
		conf += "authorization { user: alice, password: s3cret }\n"
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testproc.Start(t, bin, "-c", path)
	p.StopSignal = os.Interrupt
	waitListening(t, p, fmt.Sprintf("127.0.0.1:%d", port))
	waitListening(t, p, fmt.Sprintf("127.0.0.1:%d", mon))
	return port, mon
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

// TestNATSServer: 200 clients (10 senders), then 200 receive-only, hold
// past three ping deadlines with no disconnect (every client answers the
// server's PING); nats-server's /connz shows 200 distinct connection
// names and its /varz in_msgs/out_msgs match the fleet's sent and
// received within 1 %; latency comes from the decimal stamp. A server
// that wants a password refuses every login, counted by its -ERR reason;
// without the PONG reaction, every client is dropped and counted by the
// server's reason (Stale Connection).
func TestNATSServer(t *testing.T) {
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
	hold := 3*natsPing*(natsPingMax+1) + 4*time.Second
	const drainBound = 30 * time.Second

	t.Run("senders", func(t *testing.T) {
		in0, out0 := natsVarz(t, mon)
		ctx, cancel := context.WithCancel(context.Background())
		peak := connzPeak(ctx, mon)
		res := replay(t, "--profile", "nats", "--capture", capPath, "--target", target,
			"--clients", "200", "--senders", "10", "--room-size", "50", "--speed", "0.5", "--loop", loop[1], "--login-interval", "10ms",
			"--login-timeout", "30s", "--duration", hold.String(), "--drain-deliveries", drainBound.String())
		cancel()
		mustOK(t, res)
		drainedBefore(t, res, hold, drainBound)
		s := res.sum
		in1, out1 := natsVarz(t, mon)
		if s.LoginsSucceeded != 200 || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 || s.MessagesSent == 0 {
			t.Fatalf("logins %d failed %v disconnects %v sent %d\n%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, s.MessagesSent, res.stdout)
		}
		if p := peak(); p != 200 {
			t.Errorf("nats-server's /connz held at most %d distinct connection names, want 200", p)
		}
		if !within(float64(in1-in0), float64(s.MessagesSent), 1) || !within(float64(out1-out0), float64(s.MessagesReceived), 1) {
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
			"--clients", "200", "--receive-only", "--login-interval", "10ms", "--login-timeout", "30s", "--duration", hold.String())
		cancel()
		mustOK(t, res)
		s := res.sum
		in1, _ := natsVarz(t, mon)
		if s.LoginsSucceeded != 200 || len(s.Disconnects) != 0 || s.MessagesSent != 0 || in1 != in0 || s.FramesSent["pong"] == 0 {
			t.Fatalf("logins %d disconnects %v sent %d, nats-server in_msgs %d, frames %v", s.LoginsSucceeded, s.Disconnects, s.MessagesSent, in1-in0, s.FramesSent)
		}
		if p := peak(); p != 200 {
			t.Errorf("nats-server's /connz held at most %d distinct connection names, want 200", p)
		}
	})
	t.Run("refused", func(t *testing.T) {
		authPort, _ := startNATS(t, bin, true)
		res := replay(t, "--profile", "nats", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", authPort),
			"--clients", "20", "--login-interval", "2ms", "--duration", "2s")
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
		res := replay(t, "--profile", path, "--capture", capPath, "--target", target,
			"--clients", "20", "--receive-only", "--login-interval", "2ms", "--duration", (natsPing*(natsPingMax+1) + 3*time.Second).String())
		if got := res.sum.Disconnects["stale_connection"]; got != 20 {
			t.Fatalf("without the PONG reaction: disconnects %v, want stale_connection=20 (exit %d)\n%s%s", res.sum.Disconnects, res.code, res.stdout, res.stderr)
		}
	})
}

// natsPingsOften: against a nats-server that pings every client every
// 20 ms (and waits 150 pings, 3 s, for an answer, as the other runs do),
// the run ends about the drain's quiet period after its duration:
// the drain waits for deliveries in flight, not for a moment without any
// byte, which the pings never leave (it took the drain's bound, 20 s,
// before). The counts match the server's as the senders run's do.
func natsPingsOften(t *testing.T, bin, capPath, loop string) {
	port, mon := startNATSPinging(t, bin, false, 20*time.Millisecond, 150)
	const duration, drainBound = 3 * time.Second, 20 * time.Second
	in0, out0 := natsVarz(t, mon)
	res := replay(t, "--profile", "nats", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", port),
		"--clients", "40", "--senders", "4", "--room-size", "10", "--speed", "0.5", "--loop", loop, "--login-interval", "10ms",
		"--login-timeout", "30s", "--duration", duration.String(), "--drain-deliveries", drainBound.String())
	mustOK(t, res)
	drainedBefore(t, res, duration, drainBound)
	s := res.sum
	in1, out1 := natsVarz(t, mon)
	if s.LoginsSucceeded != 40 || len(s.Disconnects) != 0 || s.MessagesSent == 0 || s.FramesSent["pong"] == 0 {
		t.Fatalf("logins %d disconnects %v sent %d frames %v\n%s", s.LoginsSucceeded, s.Disconnects, s.MessagesSent, s.FramesSent, res.stdout)
	}
	if !within(float64(in1-in0), float64(s.MessagesSent), 1) || !within(float64(out1-out0), float64(s.MessagesReceived), 1) {
		t.Errorf("nats-server in_msgs %d out_msgs %d; the fleet sent %d received %d (want within 1%%, as the senders run)", in1-in0, out1-out0, s.MessagesSent, s.MessagesReceived)
	}
	t.Logf("nats pinging every 20 ms: the run took %v (duration %v, drain bound %v); fleet sent %d received %d; nats-server in %d out %d; pongs %d",
		res.took.Round(time.Millisecond), duration, drainBound, s.MessagesSent, s.MessagesReceived, in1-in0, out1-out0, s.FramesSent["pong"])
}
