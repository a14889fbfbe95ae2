package report

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// relayServer serves relay metrics whose byte counter grows at exactly
// 1 Gbps of wall time, and whose connections gauge can be set.
// relayServer answers like a relay's /metrics; with failed set, it
// answers its first okScrapes scrapes and fails every later one, counting
// them in failed.
func relayServer(t *testing.T, okScrapes int32, failed *atomic.Int32) *httptest.Server {
	t.Helper()
	start := time.Now()
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failed != nil && served.Add(1) > okScrapes {
			failed.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		el := time.Since(start).Seconds()
		fmt.Fprintf(w, "# TYPE relay_sent_bytes_total counter\nrelay_sent_bytes_total %g\n", el*1.25e8)
		fmt.Fprintf(w, "# TYPE relay_connections gauge\nrelay_connections{transport=\"tcp\"} 3\n")
		fmt.Fprintf(w, "# TYPE relay_host_cpu_seconds_total counter\nrelay_host_cpu_seconds_total{mode=\"idle\"} %g\nrelay_host_cpu_seconds_total{mode=\"user\"} %g\n", el*1.5, el*0.5)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func fleetServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE replay_clients_logged_in gauge\nreplay_clients_logged_in 12\n")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestSamplerScrapesOverHTTP(t *testing.T) {
	relay, fleet := relayServer(t, 0, nil), fleetServer(t)
	var seen atomic.Int32
	s, err := NewSampler(SamplerConfig{
		Targets: []Target{
			{Role: RoleRelay, URL: relay.URL + "/metrics"},
			{Role: RoleFleet, URL: fleet.URL + "/metrics"},
		},
		Interval: 100 * time.Millisecond,
		OnPoint:  func(Point) { seen.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 650*time.Millisecond)
	defer cancel()
	ser := s.Run(ctx)
	if ser.ScrapeErrors != 0 {
		t.Fatalf("scrape errors: %d (%s)", ser.ScrapeErrors, ser.LastError)
	}
	if n := len(ser.Points); n < 4 || int(seen.Load()) != n {
		t.Fatalf("points: %d, OnPoint saw %d", n, seen.Load())
	}
	for i, p := range ser.Points {
		// Scrape timing on a busy machine moves the rate a little; the
		// counter itself is exact.
		if math.Abs(p.SendGbps-1) > 0.25 {
			t.Errorf("point %d: send %v Gbps, want about 1", i, p.SendGbps)
		}
		if math.Abs(p.RelayCPUIdlePct-75) > 1e-6 || p.LoggedIn != 12 || p.RelayConnections != 3 {
			t.Errorf("point %d: idle %v, logged in %v, connections %v", i, p.RelayCPUIdlePct, p.LoggedIn, p.RelayConnections)
		}
		if i > 0 && p.T <= ser.Points[i-1].T {
			t.Errorf("point %d: time went backwards", i)
		}
	}
	if !ser.Last.At.After(ser.First.At) || ser.Last.Relay.SentBytes <= ser.First.Relay.SentBytes {
		t.Error("first and last snapshots not kept")
	}
}

func TestSamplerCountsFailedScrapes(t *testing.T) {
	// The server counts the scrapes, not sleeps: a starved host that
	// scrapes late changes nothing.
	const okScrapes = 3
	var failed atomic.Int32
	srv := relayServer(t, okScrapes, &failed)
	s, err := NewSampler(SamplerConfig{
		Targets:  []Target{{Role: RoleRelay, URL: srv.URL}},
		Interval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Series)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(30 * time.Second)
	for failed.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	ser := <-done
	if ser.ScrapeErrors < 2 || ser.LastError == "" {
		t.Fatalf("scrape errors: %d %q, want the failures counted (%d failed answers)", ser.ScrapeErrors, ser.LastError, failed.Load())
	}
	if len(ser.Points) < okScrapes-1 {
		t.Fatalf("points before the failure: %d, want %d", len(ser.Points), okScrapes-1)
	}
}

// TestSamplerRetriesFinalScrape: the final scrape carries the run's
// totals, so one that fails (a host that stalled past the scrape timeout)
// is tried again instead of leaving the totals at the previous sample.
func TestSamplerRetriesFinalScrape(t *testing.T) {
	var stopped atomic.Bool
	var finals atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stopped.Load() && finals.Add(1) == 1 {
			http.Error(w, "stalled", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "# TYPE relay_sent_bytes_total counter\nrelay_sent_bytes_total %d\n", 1000+finals.Load())
	}))
	t.Cleanup(srv.Close)
	s, err := NewSampler(SamplerConfig{
		Targets:  []Target{{Role: RoleRelay, URL: srv.URL}},
		Interval: time.Hour, // no tick: the final scrape is the only one
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped.Store(true)
	cancel()
	ser := s.RunFrom(ctx, Snapshot{At: time.Now()})
	if ser.ScrapeErrors != 1 || finals.Load() != 2 {
		t.Fatalf("scrape errors %d after %d final scrapes, want 1 after 2", ser.ScrapeErrors, finals.Load())
	}
	if got := ser.Last.Relay.SentBytes; got != 1002 {
		t.Fatalf("last snapshot's sent bytes %v, want 1002 (the retried final scrape)", got)
	}
}

func TestNewSamplerRejects(t *testing.T) {
	if _, err := NewSampler(SamplerConfig{}); err == nil {
		t.Error("no targets: no error")
	}
	if _, err := NewSampler(SamplerConfig{Targets: []Target{{Role: "db", URL: "http://127.0.0.1:1"}}}); err == nil {
		t.Error("unknown role: no error")
	}
}

func TestSamplerRunFromBaseline(t *testing.T) {
	relay := relayServer(t, 0, nil)
	s, err := NewSampler(SamplerConfig{Targets: []Target{{Role: RoleRelay, URL: relay.URL}}, Interval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	base := Snapshot{At: time.Now(), Relay: RelayValues{Present: true}}
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	ser := s.RunFrom(ctx, base)
	if !ser.First.At.Equal(base.At) || len(ser.Points) < 2 {
		t.Fatalf("baseline not used: first at %v, %d points", ser.First.At, len(ser.Points))
	}
	// From a zero baseline the first interval counts everything the
	// counter had.
	if ser.Points[0].SlowConsumerDiscards != 0 || ser.Points[0].SendGbps <= 0 {
		t.Errorf("first point: %+v", ser.Points[0])
	}
}

// TestSamplerRunEndDuringScrape: a tick's scrape still waiting for its
// answer when the run ends is cut off by the run, not failed by the
// target: no scrape error is counted, and the final scrape carries the
// totals.
func TestSamplerRunEndDuringScrape(t *testing.T) {
	var requests atomic.Int32
	inTick := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) == 1 {
			close(inTick)
			<-r.Context().Done() // answers only once the run ended
			return
		}
		fmt.Fprintf(w, "# TYPE relay_sent_bytes_total counter\nrelay_sent_bytes_total 500\n")
	}))
	t.Cleanup(srv.Close)
	s, err := NewSampler(SamplerConfig{
		Targets:  []Target{{Role: RoleRelay, URL: srv.URL}},
		Interval: 20 * time.Millisecond,
		Timeout:  time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Series)
	go func() { done <- s.RunFrom(ctx, Snapshot{At: time.Now()}) }()
	<-inTick
	cancel()
	ser := <-done
	if ser.ScrapeErrors != 0 {
		t.Fatalf("scrape errors %d (%q), want none: the run, not the target, ended that scrape", ser.ScrapeErrors, ser.LastError)
	}
	if got := ser.Last.Relay.SentBytes; got != 500 {
		t.Fatalf("last snapshot's sent bytes %v, want 500 (the final scrape)", got)
	}
}
