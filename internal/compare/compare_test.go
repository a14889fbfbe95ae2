package compare

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/report"
	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// bins holds the relay binary the comparisons run against (compare starts
// no relay of its own: the command starts it as a child process), and the
// replay binary TestCompareBinary and TestCompareBinaryShards run (built
// here once for both; it starts the relay beside it as its child).
var bins map[string]string

func TestMain(m *testing.M) {
	os.Exit(testproc.Main(m, &bins, testproc.Options{CheckLeaks: true}, "relay", "replay"))
}

// poseScript is a recorded session: the join, then a traced othercast of
// a 100-byte pose every 14 ms (72 Hz) from 100 ms on, which the fleet
// loops.
func poseScript() []session.Frame {
	fr := []session.Frame{{Offset: 0, Bytes: wire.AppendJoin(nil, "lobby", "alice", nil, 0)}}
	pose := bytes.Repeat([]byte{0x5a}, 100)
	for t := 100 * time.Millisecond; t < 1100*time.Millisecond; t += 14 * time.Millisecond {
		fr = append(fr, session.Frame{Offset: t, Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Payload: pose})})
	}
	return fr
}

func smallConfig(t *testing.T) Config {
	cfg := DefaultConfig()
	fc := &cfg.Fleet
	fc.Frames = poseScript()
	fc.Capture = "synthetic pose script"
	fc.Clients = 24
	fc.Loop = "100ms,1100ms"
	fc.LoginInterval = 20 * time.Millisecond
	fc.Duration = 3 * time.Second
	fc.ProgressInterval = time.Second
	cfg.Senders, cfg.Out, cfg.Interval, cfg.DrainTimeout = 4, t.TempDir(), 500*time.Millisecond, 5*time.Second
	return cfg
}

// withRelay points cfg at a relay process of the test's own.
func withRelay(t *testing.T, cfg Config) Config {
	t.Helper()
	r := testproc.StartRelay(t, bins["relay"], "--log-level", "warn")
	cfg.Fleet.Target, cfg.RelayMetrics = r.TCP, "http://"+r.Metrics+"/metrics"
	return cfg
}

// TestCompareSmall runs a real comparison (a relay process, two fleets on
// loopback) and checks the report against the fleets' own summaries.
func TestCompareSmall(t *testing.T) {
	cfg := withRelay(t, smallConfig(t))
	var progress testproc.SyncBuffer
	cfg.Progress = &progress
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	sum, err := report.Verify(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Runs) != 2 || len(res.Runs) != 2 {
		t.Fatalf("runs: report %d, fleet %d, want 2", len(sum.Runs), len(res.Runs))
	}
	for i, rs := range sum.Runs {
		fs := res.Runs[i].Fleet
		if rs.Scenario != res.Runs[i].Scenario {
			t.Fatalf("run %d: report %s, fleet %s", i, rs.Scenario, res.Runs[i].Scenario)
		}
		exact := []struct {
			name      string
			got, want float64
		}{
			{"login attempts", float64(rs.LoginAttempts), float64(fs.LoginAttempts)},
			{"logins succeeded", float64(rs.LoginsSucceeded), float64(fs.LoginsSucceeded)},
			{"max logged in", float64(rs.MaxLoggedIn), float64(fs.PeakLoggedIn)},
			{"messages sent", float64(rs.MessagesSent), float64(fs.MessagesSent)},
		}
		for _, c := range exact {
			if c.got != c.want {
				t.Errorf("%s: %s: sampled %v, fleet summary %v (%d samples, %d scrape errors, warnings %q)", rs.Scenario, c.name, c.got, c.want, rs.Samples, rs.ScrapeErrors, rs.Warnings)
			}
		}
		// Deliveries of the last sends may still be in flight at the last
		// sample, and the clients' leave frames come after it; on loopback
		// both are a sliver.
		near := []struct {
			name      string
			got, want float64
		}{
			{"bytes sent", float64(rs.BytesSent), float64(fs.BytesSent)},
			{"messages received", float64(rs.MessagesReceived), float64(fs.MessagesReceived)},
			{"bytes received", float64(rs.BytesReceived), float64(fs.BytesReceived)},
		}
		for _, c := range near {
			if c.want == 0 || math.Abs(c.got-c.want) > 0.02*c.want {
				t.Errorf("%s: %s: sampled %v, fleet summary %v (want within 2%%)", rs.Scenario, c.name, c.got, c.want)
			}
		}
		if fs.LoginsSucceeded != 24 {
			t.Errorf("%s: %d of 24 logged in", rs.Scenario, fs.LoginsSucceeded)
		}
		// Every 500 ms over 3 s, but a host that stalls for seconds (seen
		// at load 20 under -race: no progress line for 3 s) drops ticks:
		// the property is a series, more than the final sample.
		if rs.Samples < 2 {
			t.Errorf("%s: %d samples", rs.Scenario, rs.Samples)
		}
	}
	nn, on := sum.Runs[0], sum.Runs[1]
	if nn.Scenario != NN || on.Scenario != OneN {
		t.Fatalf("order: %s, %s", nn.Scenario, on.Scenario)
	}
	// At the same 24 clients, 4 senders cost the relay less than 24.
	if !(float64(on.PlateauSendGbps) < float64(nn.PlateauSendGbps)) {
		t.Errorf("1:N plateau send %v Gbps, N:N %v: want 1:N lower", on.PlateauSendGbps, nn.PlateauSendGbps)
	}
	for _, w := range sum.Warnings {
		if bytes.Contains([]byte(w), []byte("0 connections")) {
			t.Errorf("relay did not drain: %s", w)
		}
	}
	t.Logf("progress:\n%s", progress.String())
}

// TestCompareInterrupted: Ctrl-C during the second run still writes the
// report of what ran.
func TestCompareInterrupted(t *testing.T) {
	cfg := withRelay(t, smallConfig(t))
	cfg.Fleet.Duration = 2 * time.Second
	var progress testproc.SyncBuffer
	cfg.Progress = &progress
	// Interrupt once the 1:N fleet reports progress (a second into it),
	// however long the N:N run and the drain took on a busy machine.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		for ctx.Err() == nil && !strings.Contains(progress.String(), "[1:N #1] ") {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	if !res.Interrupted {
		t.Error("not marked interrupted")
	}
	sum, err := report.Verify(res.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Runs) != 2 {
		t.Fatalf("runs in the report: %d, want the finished N:N and the interrupted 1:N", len(sum.Runs))
	}
	found := false
	for _, w := range sum.Warnings {
		found = found || bytes.Contains([]byte(w), []byte("interrupted"))
	}
	if !found {
		t.Errorf("no interruption warning in %q", sum.Warnings)
	}
}

func TestCompareRejects(t *testing.T) {
	base := smallConfig(t)
	base.Fleet.Target = "127.0.0.1:9" // never dialled: each is refused first
	tests := []struct {
		name string
		edit func(*Config)
	}{
		{"no senders", func(c *Config) { c.Senders = 0 }},
		{"senders = clients", func(c *Config) { c.Senders = c.Fleet.Clients }},
		{"no duration", func(c *Config) { c.Fleet.Duration = 0 }},
		{"receive only", func(c *Config) { c.Fleet.ReceiveOnly = true }},
		{"one client", func(c *Config) { c.Fleet.Clients = 1 }},
		{"no target", func(c *Config) { c.Fleet.Target = "" }},
	}
	for _, tt := range tests {
		c := base
		tt.edit(&c)
		if _, err := Run(context.Background(), c); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestCollapse(t *testing.T) {
	in := []string{
		"WARNING: the fleet is behind its schedule (send lag p99 10ms > 5ms): results understate",
		"port exhaustion on 127.0.0.1",
		"WARNING: the fleet is behind its schedule (send lag p99 130ms > 5ms): results understate",
	}
	got := collapse(in, "fleet: ")
	want := []string{
		"fleet: WARNING: the fleet is behind its schedule (send lag p99 10ms > 5ms): results understate (first of 2 such warnings)",
		"fleet: port exhaustion on 127.0.0.1",
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// TestWaitDrained: a relay that keeps connections open past the timeout
// is reported; one that lets them go is not.
func TestWaitDrained(t *testing.T) {
	var conns atomic.Int64
	conns.Store(3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "# TYPE relay_connections gauge\nrelay_connections{transport=\"tcp\"} %d\n", conns.Load())
	}))
	defer srv.Close()
	r := &comparison{driver: &driver{cfg: Config{Interval: 100 * time.Millisecond, DrainTimeout: 300 * time.Millisecond}, relayURL: srv.URL}}
	start := time.Now()
	w := r.waitDrained(context.Background(), "after N:N #1")
	if !strings.Contains(w, "relay not at 0 connections after N:N #1: 3 still open") {
		t.Errorf("stuck relay: warning %q", w)
	}
	if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
		t.Errorf("waited %v for a 300ms timeout", el)
	}
	go func() {
		time.Sleep(150 * time.Millisecond)
		conns.Store(0)
	}()
	r.cfg.DrainTimeout = 5 * time.Second
	if w := r.waitDrained(context.Background(), "before 1:N #1"); w != "" {
		t.Errorf("drained relay: warning %q", w)
	}
	srv.Close()
	r.cfg.DrainTimeout = 300 * time.Millisecond
	if w := r.waitDrained(context.Background(), "before N:N #2"); !strings.Contains(w, "not confirmed") {
		t.Errorf("unreachable relay: warning %q", w)
	}
}
