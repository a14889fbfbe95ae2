package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
)

// startRedis starts redis-server on a free loopback port, without
// persistence; args are extra settings ("--requirepass", "x").
func startRedis(t *testing.T, args ...string) int {
	t.Helper()
	return startRedisOn(t, 1, func([]int) []string { return args })[0]
}

// startRedisOn starts redis-server on n free loopback ports, the first
// its plain port; args makes the extra settings for the ports (a TLS
// port).
func startRedisOn(t *testing.T, n int, args func(ports []int) []string) []int {
	t.Helper()
	bin, dir := needTool(t, "redis-server"), t.TempDir()
	return startServer(t, n, func(p []int) *exec.Cmd {
		return exec.Command(bin, append([]string{"--port", strconv.Itoa(p[0]), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir}, args(p)...)...)
	})
}

// redisCLI runs redis-cli against port and returns its output.
func redisCLI(t *testing.T, port int, args ...string) string {
	t.Helper()
	out, err := exec.Command(needTool(t, "redis-cli"), append([]string{"-p", strconv.Itoa(port)}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// cmdCalls reads a command's calls from INFO commandstats.
func cmdCalls(t *testing.T, port int, cmd string) int64 {
	t.Helper()
	m := regexp.MustCompile(`cmdstat_` + cmd + `:calls=(\d+)`).FindStringSubmatch(redisCLI(t, port, "INFO", "commandstats"))
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// TestRedisPubSub records a RESP3 pub/sub session with redis-server,
// replays it with --profile redis (200 clients, 10 senders; receive-only)
// and checks Redis's own counters: 200 SUBSCRIBE calls, PUBLISH calls
// equal to the fleet's sends (INFO commandstats), receive-only clients
// sending PINGs and no PUBLISH, and logins refused by a password counted
// by the error's reason. The senders play the recorded session once and
// every run ends by its logins (--after-logins), so that however long a
// loaded host takes over the ramp, all 200 are in and every publish has
// its deliveries before the leave: with the profile's fan-out declared
// and its login ending at the subscription (redisJoinedProfile), the
// fleet owes each client exactly the publishes made after it
// subscribed, and none may be lost.
func TestRedisPubSub(t *testing.T) {
	t.Parallel()
	port := startRedis(t)
	needTool(t, "redis-cli")
	capPath := recordThrough(t, fmt.Sprintf("127.0.0.1:%d", port), python(t), filepath.Join("testdata", "redisclient.py"), "LISTEN_PORT", "20")
	insp := inspectProfile(t, "redis", capPath)
	for _, want := range []string{`room: "lobby"`, "publish 20", "server answer: accepted"} {
		if !strings.Contains(insp, want) {
			t.Fatalf("inspect --profile redis lacks %q:\n%s", want, insp)
		}
	}
	target := fmt.Sprintf("127.0.0.1:%d", port)
	pub0 := cmdCalls(t, port, "publish")
	// Sample the channel's subscribers while the fleet runs.
	var mu sync.Mutex
	peak := 0
	stop := make(chan struct{})
	cli := needTool(t, "redis-cli")
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			out, _ := exec.Command(cli, "-p", strconv.Itoa(port), "PUBSUB", "NUMSUB", "lobby").Output()
			f := strings.Fields(string(out))
			if len(f) == 2 {
				if n, err := strconv.Atoi(f[1]); err == nil {
					mu.Lock()
					peak = max(peak, n)
					mu.Unlock()
				}
			}
		}
	})
	subs0 := cmdCalls(t, port, "subscribe")
	fanAll := redisJoinedProfile(t)
	// The recorded session's 20 publishes take 2 s from each sender's
	// login, due before the run ends 6 s after the last login.
	res := replay(t, "--profile", fanAll, "--capture", capPath, "--target", target,
		"--clients", "200", "--senders", "10", "--login-interval", "2ms", "--after-logins", "6s",
		"--drain-deliveries", "30s") // every delivery in flight awaited, as for mosquitto
	close(stop)
	wg.Wait()
	mustOK(t, res)
	s := res.sum
	pubs, subs := cmdCalls(t, port, "publish")-pub0, cmdCalls(t, port, "subscribe")-subs0
	t.Logf("fleet sent %d received %d (latency p50 %.2f ms), deliveries %+v; redis PUBLISH calls %d, SUBSCRIBE calls %d, peak subscribers sampled %d",
		s.MessagesSent, s.MessagesReceived, s.LatencyMS.P50, s.Deliveries, pubs, subs, peak)
	if s.LoginsSucceeded != 200 || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 || subs != 200 || peak > 200 {
		t.Errorf("logins %d failed %v disconnects %v; redis counted %d SUBSCRIBE and sampled up to %d subscribers of the channel, want 200", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, subs, peak)
	}
	if pubs != s.MessagesSent || s.MessagesSent != 10*20 {
		t.Errorf("redis counted %d PUBLISH, the fleet sent %d, want 10 senders × 20", pubs, s.MessagesSent)
	}
	// Every subscriber gets every publish made after it subscribed.
	if d := s.Deliveries; !d.Measured() || d.Expected == 0 || d.Lost != 0 || d.Received < d.Expected || s.MessagesReceived > s.MessagesSent*200 {
		t.Errorf("fleet received %d deliveries of %d publishes to 200 subscribers; deliveries %+v, want none of those owed lost", s.MessagesReceived, s.MessagesSent, d)
	}

	pub0, ping0 := cmdCalls(t, port, "publish"), cmdCalls(t, port, "ping")
	res = replay(t, "--profile", "redis", "--capture", capPath, "--target", target,
		"--clients", "200", "--receive-only", "--heartbeat", "1s", "--login-interval", "2ms", "--after-logins", "2s")
	mustOK(t, res)
	if pubs, pings := cmdCalls(t, port, "publish")-pub0, cmdCalls(t, port, "ping")-ping0; pubs != 0 || pings == 0 || res.sum.FramesSent["heartbeat"] != pings {
		t.Errorf("receive-only: redis counted %d PUBLISH and %d PING; the fleet sent %v", pubs, pings, res.sum.FramesSent)
	}

	// A password the recording never gave: HELLO is refused, by reason.
	locked := startRedis(t, "--requirepass", "s3cret")
	res = replay(t, "--profile", "redis", "--capture", capPath, "--target", fmt.Sprintf("127.0.0.1:%d", locked),
		"--clients", "20", "--login-interval", "2ms", "--after-logins", "500ms")
	if res.sum.LoginsFailed["noauth"] != 20 {
		t.Errorf("refused logins by reason %v, want noauth=20\n%s%s", res.sum.LoginsFailed, res.stdout, res.stderr)
	}

	// Over TLS (Debian's redis-server is built with it): the same session
	// replayed to its --tls-port as rediss://, every PUBLISH counted by
	// Redis (read on its plain port, opened with the TLS one).
	pki := newTestPKI(t)
	ports := startRedisOn(t, 2, func(p []int) []string {
		return []string{"--tls-port", strconv.Itoa(p[1]), "--tls-cert-file", pki.cert, "--tls-key-file", pki.key,
			"--tls-ca-cert-file", pki.ca, "--tls-auth-clients", "no"}
	})
	plainPort, tlsPort := ports[0], ports[1]
	pub0 = cmdCalls(t, plainPort, "publish")
	res = replay(t, "--profile", "redis", "--capture", capPath, "--target", fmt.Sprintf("rediss://127.0.0.1:%d", tlsPort), "--tls-ca", pki.ca,
		"--clients", "50", "--senders", "5", "--loop", suggestedLoopOf(t, "redis", capPath), "--login-interval", "2ms", "--after-logins", "2s", "--drain-deliveries", "20s")
	mustOK(t, res)
	s = res.sum
	pubs = cmdCalls(t, plainPort, "publish") - pub0
	if s.LoginsSucceeded != 50 || s.TLS == nil || s.TLS.Handshakes != 50 || s.MessagesSent == 0 || pubs != s.MessagesSent {
		t.Fatalf("rediss: logins %d, tls %+v; fleet sent %d, redis counted %d PUBLISH\n%s%s", s.LoginsSucceeded, s.TLS, s.MessagesSent, pubs, res.stdout, res.stderr)
	}
	t.Logf("rediss: fleet sent %d received %d, redis PUBLISH %d; %d of 50 clients on the fleet's record layer", s.MessagesSent, s.MessagesReceived, pubs, s.TLS.Detached)
}

// redisJoinedProfile is the built-in redis profile for a run whose
// deliveries are owed: a RESP3 subscriber that publishes to its channel
// gets its own message (fanout: all), and a client is in its room once
// Redis confirmed its SUBSCRIBE (a login in one step through the
// subscription's push), not at HELLO's answer: the publishes between the
// two (seconds on a loaded host, whose schedule plays the SUBSCRIBE
// late) were owed and could never arrive (22 % "lost" at load 18).
func redisJoinedProfile(t *testing.T) string {
	t.Helper()
	data, _ := profile.BuiltinFile("redis")
	const login = "login:\n  failure: error\n  reason: {regexp: '^-(\\S+)'}\n"
	if strings.Count(string(data), login) != 1 {
		t.Fatalf("the redis profile's login is not %q", login)
	}
	doc := strings.Replace(string(data), login, login+"  steps:\n    - {name: join, send: [hello, subscribe], success: push}\n", 1) + "fanout: all\n"
	path := filepath.Join(t.TempDir(), "redis-joined.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
