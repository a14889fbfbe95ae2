package report

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

func parseFile(t *testing.T, path string, role Role, snap *Snapshot) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := ParseMetrics(f, role, snap); err != nil {
		t.Fatal(err)
	}
}

func TestParseMetrics(t *testing.T) {
	var s Snapshot
	parseFile(t, "testdata/relay.prom", RoleRelay, &s)
	parseFile(t, "testdata/fleet.prom", RoleFleet, &s)
	tests := []struct {
		name      string
		got, want float64
	}{
		{"connections summed over transports", s.Relay.Connections, 42},
		{"rooms", s.Relay.Rooms, 3},
		{"relay sent bytes", s.Relay.SentBytes, 5e6},
		{"relay received bytes", s.Relay.ReceivedBytes, 120000},
		{"delivered", s.Relay.DeliveredMessages, 39000},
		{"slow consumers", s.Relay.SlowConsumerDisconnects, 2},
		{"rejected over reasons", s.Relay.RejectedFrames, 4},
		{"relay idle includes iowait", s.Relay.HostCPU.Idle, 160},
		{"relay cpu total", s.Relay.HostCPU.Total, 200},
		{"process cpu", s.Relay.ProcessCPUSeconds, 12.5},
		{"logged in", s.Fleet.LoggedIn, 42},
		{"attempts", s.Fleet.LoginAttempts, 50},
		{"logins ok", s.Fleet.LoginsSucceeded, 42},
		{"logins failed over reasons", s.Fleet.LoginsFailed, 8},
		{"fleet received bytes", s.Fleet.ReceivedBytes, 4.68e6},
		{"latency count", s.Fleet.Latency.Count, 1000},
		{"latency buckets", float64(len(s.Fleet.Latency.Bounds)), 4},
		{"latency +Inf is count", s.Fleet.Latency.Counts[3], 1000},
		{"fleet idle", s.Fleet.HostCPU.Idle, 80},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if !s.Relay.Present || !s.Fleet.Present {
		t.Error("roles not marked present")
	}
}

func TestParseMetricsSumsEndpointsOfOneRole(t *testing.T) {
	var s Snapshot
	parseFile(t, "testdata/fleet.prom", RoleFleet, &s)
	parseFile(t, "testdata/fleet.prom", RoleFleet, &s)
	if s.Fleet.LoggedIn != 84 || s.Fleet.Latency.Count != 2000 || s.Fleet.Latency.Counts[0] != 200 {
		t.Fatalf("two fleet endpoints: logged in %v, latency count %v, first bucket %v",
			s.Fleet.LoggedIn, s.Fleet.Latency.Count, s.Fleet.Latency.Counts[0])
	}
}

func TestParseMetricsErrors(t *testing.T) {
	var s Snapshot
	if err := ParseMetrics(strings.NewReader("relay_rooms{ 3\n"), RoleRelay, &s); err == nil {
		t.Error("malformed exposition: no error")
	}
	if err := ParseMetrics(strings.NewReader("x 1\n"), Role("db"), &s); err == nil {
		t.Error("unknown role: no error")
	}
}

func TestQuantile(t *testing.T) {
	h := Histogram{Bounds: []float64{1, 2, 4, math.Inf(1)}, Counts: []float64{10, 30, 90, 100}, Count: 100}
	tests := []struct {
		q, want float64
	}{
		{0.05, 0.5},         // inside the first bucket, from 0
		{0.10, 1},           // exactly its top
		{0.20, 1.5},         // halfway through (1,2]
		{0.60, 3},           // halfway through (2,4]
		{0.99, math.Inf(1)}, // in +Inf: past the range, no number
		{0.90, 4},           // top of the last finite bucket
		{0.50, 2 + 2*(50.0-30)/60},
	}
	for _, tt := range tests {
		if got := Quantile(tt.q, h); math.Abs(got-tt.want) > 1e-9 && got != tt.want {
			t.Errorf("q%.2f: got %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := Quantile(0.5, Histogram{Bounds: []float64{1, math.Inf(1)}, Counts: []float64{0, 0}}); !math.IsNaN(got) {
		t.Errorf("empty histogram: got %v, want NaN", got)
	}
}

func TestDerive(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := Snapshot{At: t0}
	base.Relay = RelayValues{Present: true, SentBytes: 1000, SlowConsumerDisconnects: 1}
	base.Fleet = FleetValues{Present: true, LoginAttempts: 5, LoginsFailed: 1}
	prev := base
	prev.At = t0.Add(10 * time.Second)
	prev.Relay.SentBytes = 1e9
	prev.Relay.ReceivedBytes = 1e8
	prev.Relay.HostCPU = CPUTimes{Idle: 100, Total: 200}
	prev.Relay.ProcessCPUSeconds = 10
	prev.Fleet.Latency = Histogram{Bounds: []float64{0.001, 0.01, math.Inf(1)}, Counts: []float64{10, 10, 10}, Count: 10}
	cur := prev
	cur.At = prev.At.Add(2 * time.Second)
	cur.Relay.SentBytes = 1e9 + 2.5e9 // 2.5 GB in 2 s = 10 Gbps
	cur.Relay.ReceivedBytes = 1e8 + 2.5e8
	cur.Relay.HostCPU = CPUTimes{Idle: 103, Total: 204} // 3 of 4 CPU-seconds idle
	cur.Relay.ProcessCPUSeconds = 11.5                  // 1.5 s in 2 s
	cur.Relay.DeliveredMessages = 400
	cur.Relay.Connections = 7
	cur.Relay.SlowConsumerDisconnects = 4
	cur.Fleet.LoggedIn = 7
	cur.Fleet.LoginAttempts = 15
	cur.Fleet.LoginsFailed = 3
	cur.Fleet.Latency = Histogram{Bounds: []float64{0.001, 0.01, math.Inf(1)}, Counts: []float64{10, 110, 110}, Count: 110}

	p := Derive(base, prev, cur)
	tests := []struct {
		name      string
		got, want float64
	}{
		{"t", p.T, 12},
		{"send gbps", p.SendGbps, 10},
		{"recv gbps", p.RecvGbps, 1},
		{"idle", p.RelayCPUIdlePct, 75},
		{"process cpu", p.RelayProcessCPUPct, 75},
		{"delivered/s", p.MsgsDeliveredPerS, 200},
		{"connections", p.RelayConnections, 7},
		{"slow consumers since base", p.SlowConsumerDiscards, 3},
		{"logged in", p.LoggedIn, 7},
		{"attempts since base", p.LoginAttempts, 10},
		{"failures since base", p.LoginFailures, 2},
		{"latency p50 from the interval's buckets only", p.LatencyP50Ms, 1 + 9*0.5},
	}
	for _, tt := range tests {
		if math.Abs(tt.got-tt.want) > 1e-9 {
			t.Errorf("%s: got %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if !math.IsNaN(p.FleetCPUIdlePct) {
		t.Errorf("fleet idle without CPU counters: got %v, want NaN", p.FleetCPUIdlePct)
	}

	// A relay that restarted: its counters went down, the new value is the
	// increase.
	reset := cur
	reset.At = cur.At.Add(time.Second)
	reset.Relay.SentBytes = 1.25e8
	if got := Derive(base, cur, reset).SendGbps; math.Abs(got-1) > 1e-9 {
		t.Errorf("after reset: got %v Gbps, want 1", got)
	}
	// A relay that answered 2 s late: its rate uses its own clock.
	reset.Relay.At = reset.At
	late := reset
	late.At = reset.At.Add(time.Second)
	late.Relay.At = reset.At.Add(3 * time.Second)
	late.Relay.SentBytes = reset.Relay.SentBytes + 3*1.25e8
	if got := Derive(base, reset, late).SendGbps; math.Abs(got-1) > 1e-9 {
		t.Errorf("late relay answer: got %v Gbps, want 1 (3 Gb over its own 3 s)", got)
	}
	// A relay that did not answer: its values are NaN, the fleet's are not.
	gone := reset
	gone.At = reset.At.Add(time.Second)
	gone.Relay = RelayValues{}
	q := Derive(base, reset, gone)
	if !math.IsNaN(q.SendGbps) || math.IsNaN(q.LoggedIn) {
		t.Errorf("relay missing: send %v (want NaN), logged in %v (want a value)", q.SendGbps, q.LoggedIn)
	}
}
