package fleet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// bins holds the relay binary the tests replay against (the fleet starts
// no server of its own).
var bins map[string]string

func TestMain(m *testing.M) {
	os.Exit(testproc.Main(m, &bins, testproc.Options{CheckLeaks: true}, "relay"))
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// script is a recorded session of "alice": the join, then from 100 ms a
// traced othercast every 20 ms until 300 ms.
func script() []session.Frame {
	fr := []session.Frame{{Offset: 0, Bytes: wire.AppendJoin(nil, "lobby", "alice", nil, 0)}}
	for t := 100; t < 300; t += 20 {
		fr = append(fr, session.Frame{Offset: ms(t), Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Payload: []byte("pose")})})
	}
	return fr
}

// testConfig is baseConfig against a relay process of the test's own.
func testConfig(t testing.TB) Config {
	t.Helper()
	c := baseConfig()
	c.Target = testproc.StartRelay(t, bins["relay"], "--metrics", "off", "--log-level", "warn").TCP
	return c
}

// baseConfig plays script with a quick ramp and no target.
func baseConfig() Config {
	c := DefaultConfig()
	c.Frames = script()
	c.Metrics = ""
	c.LoginInterval = 5 * time.Millisecond
	c.ProgressInterval = time.Second
	return c
}

func TestFleetNN(t *testing.T) {
	c := testConfig(t)
	c.Clients = 4
	c.Loop = "100ms,300ms"
	c.Duration = time.Second
	var out bytes.Buffer
	c.Out = &out
	s, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	s.WriteText(&out)
	t.Log(out.String())
	if s.LoginsSucceeded != 4 || s.MessagesReceived != 3*s.MessagesSent {
		t.Errorf("summary %+v", s)
	}
	// Othercasts in one room of 4: each reaches the 3 others, all of
	// them counted as owed and received.
	if d := s.Deliveries; !d.Measured() || d.Expected != 3*s.MessagesSent || d.Received != d.Expected || d.Lost != 0 || d.Receivers != 4 || d.Starved != 0 || d.MinReceived == 0 {
		t.Errorf("deliveries %+v for %d sent", d, s.MessagesSent)
	}
	// Its own cost, read from /proc/self: a run that handled messages
	// used some CPU and holds at least its heap resident.
	msgs := s.MessagesSent + s.MessagesReceived
	if s.ProcessCPUSeconds <= 0 || s.ProcessPeakRSSBytes < 1<<20 ||
		math.Abs(s.ProcessCPUMSPer1k-s.ProcessCPUSeconds*1e6/float64(msgs)) > 1e-9 {
		t.Errorf("process cost: cpu %v s, peak rss %d B, %v ms per 1k of %d messages", s.ProcessCPUSeconds, s.ProcessPeakRSSBytes, s.ProcessCPUMSPer1k, msgs)
	}
	if !strings.Contains(out.String(), "fleet process") {
		t.Errorf("text summary lacks the fleet process's cost:\n%s", out.String())
	}
}

func TestFleetUDP(t *testing.T) {
	c := testConfig(t)
	c.Clients = 4
	c.Transport = "udp"
	c.Loop = "100ms,300ms"
	c.Duration = 800 * time.Millisecond
	drops0 := udpInErrors(t)
	s, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	drops := udpInErrors(t) - drops0
	// Each othercast is owed to the others in the room at the time it
	// went out: a client whose join the relay confirmed late (a loaded
	// host: 347 of 3 × 122 at load 22) is owed less, not lost (the
	// expected deliveries count by each client's window; a cast the
	// relay sent just before the client saw its confirmation is a
	// surplus, 408 of 400 owed at load 20). A datagram a starved reader
	// (the relay's or a client's) left in a full receive buffer, or the
	// host's backlog, is the kernel's to drop: each one lost must be a
	// drop it counted.
	d := s.Deliveries
	if s.LoginsSucceeded != 4 || s.MessagesSent == 0 || s.MessagesReceived > 3*s.MessagesSent || !d.Measured() ||
		d.Expected == 0 || d.Expected > 3*s.MessagesSent || d.Lost > drops {
		t.Errorf("udp: logins %d sent %d received %d (at most 3 × sent), deliveries %+v (want all owed received, but for the %d datagrams the kernel dropped)", s.LoginsSucceeded, s.MessagesSent, s.MessagesReceived, d, drops)
	}
}

// TestFleetUDPLongMemberList: in a room whose member list outgrows the
// padded join, the relay's joined lists what fits and the rest follows the
// confirmation; every client confirms its session (a heartbeat right after
// joined) and gets in with one join each.
func TestFleetUDPLongMemberList(t *testing.T) {
	c := testConfig(t)
	c.Clients = 40
	c.Transport = "udp"
	// Logins 5 ms apart: a ramp that fell behind on a busy host catches up
	// at once (absolute due times), and 40 joins in one burst can outgrow
	// the padding rounds while the room grows under them.
	c.LoginInterval = 5 * time.Millisecond
	c.UserIDFormat = "a-rather-long-user-id-for-padding-%04d"
	c.ReceiveOnly = true
	c.Duration = 800 * time.Millisecond
	s, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if s.LoginsSucceeded != 40 {
		t.Errorf("logins %d of 40, failed %v", s.LoginsSucceeded, s.LoginsFailed)
	}
	// A join unconfirmed within its retry interval (a starved relay or
	// reader: 41 at load ~20) is sent again and counted as a retry.
	if s.FramesSent["join"] != 40+s.UDPJoinRetries {
		t.Errorf("joins sent %d with %d retries, want 40: one each, and the retries", s.FramesSent["join"], s.UDPJoinRetries)
	}
	if s.FramesSent["heartbeat"] < 40 {
		t.Errorf("heartbeats sent %d: fewer than the 40 confirmations", s.FramesSent["heartbeat"])
	}
}

func TestPeersOneToOne(t *testing.T) {
	c := Config{Clients: 7, RoomSize: 3, UserIDFormat: "u%d"}
	tests := []struct {
		i, others int
		want      string
	}{
		{0, 2, "u1,u2"},
		{1, 2, "u2,u0"},
		{2, 3, "u0,u1,u7"}, // past the room: ids beyond the fleet
		{6, 2, "u7,u8"},    // alone in the last room
	}
	for _, tt := range tests {
		if got := strings.Join(c.peers(tt.i, tt.others), ","); got != tt.want {
			t.Errorf("peers(%d, %d) = %s, want %s", tt.i, tt.others, got, tt.want)
		}
	}
}

// TestMetricsBeforeRun: a fleet waiting for its start (a shard at its
// barrier) answers /metrics with its counters at zero once ServeMetrics
// is called, so a driver can take its baseline before it lets the start
// go; Close, or the run's end, stops it.
func TestMetricsBeforeRun(t *testing.T) {
	scrape := func(f *Fleet) (string, error) {
		resp, err := http.Get("http://" + f.MetricsAddr().String() + "/metrics")
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("status %s", resp.Status)
		}
		return string(b), err
	}
	for _, end := range []string{"close", "run"} {
		t.Run(end, func(t *testing.T) {
			c := testConfig(t)
			c.Clients, c.Loop, c.Duration, c.Metrics = 2, "100ms,300ms", 300*time.Millisecond, "127.0.0.1:0"
			f, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			f.ServeMetrics()
			body, err := scrape(f)
			if err != nil {
				f.Close()
				t.Fatalf("/metrics before the run: %v", err)
			}
			for _, want := range []string{"replay_login_attempts_total 0", "replay_clients_logged_in 0"} {
				if !strings.Contains(body, want) {
					t.Errorf("/metrics before the run lacks %q", want)
				}
			}
			if end == "close" {
				f.Close()
			} else if s, err := f.Run(context.Background()); err != nil || s.LoginsSucceeded != 2 {
				t.Fatalf("run after ServeMetrics: %d of 2 logged in, %v", s.LoginsSucceeded, err)
			}
			if _, err := scrape(f); err == nil {
				t.Errorf("/metrics still answers after %s", end)
			}
		})
	}
}

// TestMetricsEndpoint scrapes a running fleet's /metrics.
func TestMetricsEndpoint(t *testing.T) {
	c := testConfig(t)
	c.Clients = 2
	c.Loop = "100ms,300ms"
	c.Metrics = "127.0.0.1:0"
	f, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	// An HTTP step's time as httpStep records it (TestHTTPSteps runs
	// real ones): its own histogram, by step.
	f.httpTimes.record("auth", 3*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Summary, 1)
	go func() { s, _ := f.Run(ctx); done <- s }()
	defer func() { cancel(); <-done }()
	get := func(path string) string {
		resp, err := http.Get("http://" + f.MetricsAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	wants := []string{"replay_clients_logged_in 2", "replay_login_attempts_total 2", `replay_logins_total{result="ok"} 2`,
		"replay_sent_messages_total", "replay_sent_bytes_total", "replay_received_messages_total", "replay_received_bytes_total",
		"replay_delivery_latency_seconds_bucket", "replay_schedule_lag_seconds_bucket", `replay_host_cpu_seconds_total{mode="idle"}`,
		"go_goroutines", "process_resident_memory_bytes", `replay_http_step_seconds_bucket{step="auth",le="0.002"} 0`,
		`replay_http_step_seconds_bucket{step="auth",le="0.005"} 1`, `replay_http_step_seconds_count{step="auth"} 1`}
	// Scrape until both clients are in and every series is there: the
	// run goes on until cancelled, and a fixed wait (1.5 s) measured
	// how fast the host logs two clients in.
	var missing []string
	for deadline := time.Now().Add(testproc.Patience(t)); ; time.Sleep(20 * time.Millisecond) {
		body := get("/metrics")
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(body, want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, want := range missing {
		t.Errorf("/metrics lacks %q", want)
	}
}

// TestHoldEndsByLogins: with Hold and no Duration the run ends by itself,
// Hold after its last login has its result: every client is in (a ramp
// however slow is not cut), and the run lasted at least the hold.
func TestHoldEndsByLogins(t *testing.T) {
	c := testConfig(t)
	c.Clients = 6
	c.Loop = "100ms,300ms"
	c.Hold = 400 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if s.LoginsSucceeded != 6 || len(s.LoginsFailed) != 0 || s.MessagesSent == 0 {
		t.Errorf("logins %d failed %v sent %d: want all 6 in and sending", s.LoginsSucceeded, s.LoginsFailed, s.MessagesSent)
	}
	if s.DurationS < c.Hold.Seconds() {
		t.Errorf("the run lasted %.3f s, less than its hold %v", s.DurationS, c.Hold)
	}
}
