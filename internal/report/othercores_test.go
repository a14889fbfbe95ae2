package report

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHostOtherCores: the fleet host's other work is its busy CPU seconds
// (once per host, however many shards read it) less the fleet's and, on
// the same host, the server's process CPU, from the counters /metrics
// exports: a 4-CPU host 3 cores busy, the fleet using 0.5 and the relay 1.
func TestHostOtherCores(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	// Readings at 0 s and 1 s of a 4-CPU host 3 cores busy (A), and of
	// another 1 core busy (B); A read again 4 s later by a shard that
	// answered late (A4: its counters 16 CPU seconds on).
	read := func(total, idle, s float64) HostReading {
		return HostReading{CPUTimes: CPUTimes{Total: total, Idle: idle}, At: at(s), CPUs: 4}
	}
	hostA := [2]HostReading{read(40_000, 30_000, 0), read(40_004, 30_001, 1)}
	hostB := [2]HostReading{read(90_000, 80_000, 0), read(90_004, 80_003, 1)}
	hostA4 := [2]HostReading{read(40_016, 30_004, 4), read(40_020, 30_005, 5)}
	snap := func(i int, fleetHosts []HostReading, fleetCPU float64, relay *CPUTimes) Snapshot {
		s := Snapshot{At: at(float64(i)), Fleet: FleetValues{Present: true, At: at(float64(i)), ProcessCPUSeconds: fleetCPU}}
		for _, h := range fleetHosts {
			s.Fleet.HostCPU.Total += h.Total
			s.Fleet.HostCPU.Idle += h.Idle
			// Each endpoint's own process CPU, read with its host.
			h.ProcessCPUSeconds = fleetCPU / float64(len(fleetHosts))
			s.Fleet.Hosts = append(s.Fleet.Hosts, h)
		}
		if relay != nil {
			s.Relay = RelayValues{Present: true, At: at(float64(i)), HostCPU: *relay, HostCPUs: 4, ProcessCPUSeconds: 100 + float64(i)}
		}
		return s
	}
	// The relay reads its host a moment after the fleet did.
	relayOn := func(h [2]HostReading) [2]*CPUTimes {
		return [2]*CPUTimes{{Total: h[0].Total + 2, Idle: h[0].Idle + 1}, {Total: h[1].Total + 2, Idle: h[1].Idle + 1}}
	}
	elsewhere := [2]*CPUTimes{{Total: 7_000, Idle: 6_000}, {Total: 7_004, Idle: 6_004}}
	one := func(h [2]HostReading) [2][]HostReading { return [2][]HostReading{{h[0]}, {h[1]}} }
	two := func(a, b [2]HostReading) [2][]HostReading { return [2][]HostReading{{a[0], b[0]}, {a[1], b[1]}} }
	cases := []struct {
		name  string
		hosts [2][]HostReading
		fleet [2]float64
		relay [2]*CPUTimes
		want  float64
	}{
		{"relay on the fleet's host", one(hostA), [2]float64{10, 10.5}, relayOn(hostA), 1.5},
		{"relay on another host", one(hostA), [2]float64{10, 10.5}, elsewhere, 2.5},
		{"two shards on one host", two(hostA, hostA), [2]float64{10, 11}, relayOn(hostA), 1},
		{"two shards on one host, one answering 4 s late", two(hostA, hostA4), [2]float64{10, 11}, relayOn(hostA), 1},
		{"two shards on two hosts", two(hostA, hostB), [2]float64{10, 11}, relayOn(hostA), 2},
		{"fleet busier than its host says", one(hostA), [2]float64{10, 14}, relayOn(hostA), 0},
		{"no server metrics: it may run here", one(hostA), [2]float64{10, 10.5}, [2]*CPUTimes{}, math.NaN()},
		{"a shard missing from one scrape", [2][]HostReading{{hostA[0], hostB[0]}, {hostA[1]}}, [2]float64{10, 10.5}, relayOn(hostA), math.NaN()},
		{"no fleet process CPU", one(hostA), [2]float64{0, 0}, relayOn(hostA), math.NaN()},
		{"no host reading", [2][]HostReading{nil, nil}, [2]float64{10, 10.5}, relayOn(hostA), math.NaN()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prev := snap(0, tc.hosts[0], tc.fleet[0], tc.relay[0])
			cur := snap(1, tc.hosts[1], tc.fleet[1], tc.relay[1])
			got := Derive(prev, prev, cur).HostOtherCores
			if !(math.Abs(got-tc.want) < 1e-9 || math.IsNaN(got) && math.IsNaN(tc.want)) {
				t.Errorf("other work %v cores, want %v", got, tc.want)
			}
		})
	}
}

// TestSeriesHostOtherCores: series.csv carries the measured other work,
// so a report judged again from it sees what was judged; a file written
// before the column still reads, that column unmeasured.
func TestSeriesHostOtherCores(t *testing.T) {
	nan := math.NaN()
	pts := []Point{Derive(Snapshot{}, Snapshot{}, Snapshot{}), Derive(Snapshot{}, Snapshot{}, Snapshot{})}
	pts[0].T, pts[1].T, pts[0].LoggedIn, pts[1].LoggedIn = 1, 2, 4, nan
	pts[0].HostOtherCores, pts[1].HostOtherCores = 0.25, 1.125
	var b bytes.Buffer
	if err := WriteSeriesCSV(&b, Input{Runs: []Run{{Scenario: "N:N", Repeat: 1, Series: Series{Points: pts}}}}); err != nil {
		t.Fatal(err)
	}
	runs, err := ReadSeriesCSV(&b)
	if err != nil {
		t.Fatal(err)
	}
	if got := runs[0].Series.Points; got[0].HostOtherCores != 0.25 || got[1].HostOtherCores != 1.125 {
		t.Errorf("read back %v, %v", got[0].HostOtherCores, got[1].HostOtherCores)
	}
	old := strings.Join(SeriesHeader[:seriesHeaderBefore], ",") + "\nN:N,1,1,,,,,,,,,,,,,,,,,\n"
	runs, err = ReadSeriesCSV(strings.NewReader(old))
	if err != nil || len(runs) != 1 || !math.IsNaN(runs[0].Series.Points[0].HostOtherCores) {
		t.Errorf("a file before host_other_cores: %v, %+v", err, runs)
	}
}

// TestVerifyHostOtherCores: Verify counts the host's busy seconds and its
// most other work again from series.csv's measured column, and a summary
// that claims other figures fails it.
func TestVerifyHostOtherCores(t *testing.T) {
	var pts []Point
	for i := range 6 {
		p := Derive(Snapshot{}, Snapshot{}, Snapshot{})
		p.T, p.LoggedIn, p.SendGbps, p.RecvGbps = float64(i+1), 4, 0.001, 0.001
		p.HostOtherCores = 0.25 + 0.25*float64(i%3) // busy (≥ 0.5 core) 4 of 6 s
		pts = append(pts, p)
	}
	in := Input{Runs: []Run{{Scenario: "N:N", Repeat: 1, Requested: 4, Series: Series{Points: pts}}}}
	sum := Analyze(in)
	if rs := sum.Runs[0]; rs.HostBusyS != 4 || rs.HostOtherCoresMax != 0.75 {
		t.Fatalf("busy %v s, other work at most %v cores; want 4 s, 0.75", rs.HostBusyS, rs.HostOtherCoresMax)
	}
	dir := t.TempDir()
	var b bytes.Buffer
	if err := WriteSeriesCSV(&b, in); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, SeriesFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := VerifyPeaks(dir, sum); err != nil {
		t.Errorf("the report's own series: %v", err)
	}
	sum.Runs[0].HostOtherCoresMax = 0.5
	if err := VerifyPeaks(dir, sum); err == nil || !strings.Contains(err.Error(), "cores of other work") {
		t.Errorf("a summary claiming less other work than its series passed: %v", err)
	}
}

// TestHostOtherCoresLateAnswer: the demo's row at t = 10.25 s on a 2-CPU
// host at load 15-22 ("at least 25.4 cores of other work"). The in-process
// fleet read /proc/stat and its process CPU, then its gather waited 0.94 s
// on a starved collector before it answered; the next scrape read and
// answered at once, 1.02 s after the first reading. Over the 0.08 s
// between the answers the host's 1.98 busy CPU seconds were 24.7 cores;
// over the 1.02 s its readings cover they are 1.94.
func TestHostOtherCoresLateAnswer(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	host := func(total, idle, proc, answered float64) HostReading {
		return HostReading{CPUTimes: CPUTimes{Total: total, Idle: idle}, At: at(answered), CPUs: 2, ProcessCPUSeconds: proc}
	}
	snap := func(h HostReading, relayTotal, relayIdle, relayProc, relayAnswered float64) Snapshot {
		return Snapshot{At: h.At,
			Fleet: FleetValues{Present: true, At: h.At, HostCPU: h.CPUTimes, Hosts: []HostReading{h}, ProcessCPUSeconds: h.ProcessCPUSeconds},
			Relay: RelayValues{Present: true, At: at(relayAnswered), HostCPU: CPUTimes{Total: relayTotal, Idle: relayIdle}, HostCPUs: 2, ProcessCPUSeconds: relayProc}}
	}
	// Read at 0 s, answered at 0.94 s; read and answered at 1.02 s. The
	// relay (a child on the same host) read at -0.01 s and 1.01 s and
	// answered at once: 0.034 s of its CPU.
	prev := snap(host(1000, 10, 5, 0.94), 999.98, 10, 7, -0.01)
	cur := snap(host(1002.04, 10.0612, 5.0149, 1.02), 1002.02, 10.06, 7.034, 1.01)
	p := Derive(prev, prev, cur)
	want := 2*(2.04-0.0612)/2.04 - 0.0149/1.02 - 0.034/1.02
	if math.Abs(p.HostOtherCores-want) > 1e-9 || p.HostOtherCores > 2 {
		t.Errorf("other work %v cores on a 2-CPU host, want %v", p.HostOtherCores, want)
	}
	if w := 100 * 0.0149 / 1.02; math.Abs(p.FleetProcessCPUPct-w) > 1e-9 {
		t.Errorf("fleet process CPU %v %%, want %v (over its readings' 1.02 s, not the answers' 0.08 s)", p.FleetProcessCPUPct, w)
	}
	// The warning line says what the readings say.
	var pts []Point
	for i := range 4 {
		q := p
		q.T = float64(i + 1)
		pts = append(pts, q)
	}
	sum := Analyze(Input{Runs: []Run{{Scenario: "N:N", Repeat: 1, Requested: 200, Series: Series{Points: pts}}}})
	got := ""
	for _, w := range sum.Runs[0].Warnings {
		if strings.HasPrefix(w, "this host is busy") {
			got = w
		}
	}
	if wantLine := "this host is busy with other work: at least 1.9 cores beside the fleet and the relay for 4 of 4 s; the figures are unreliable"; got != wantLine {
		t.Errorf("warning %q, want %q", got, wantLine)
	}
	// And the terminal's warning, which said "at least 25.4 cores of
	// other work" in the demo.
	var b bytes.Buffer
	if err := WriteWarningsText(&b, sum.WarningGroups); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "(N:N #1: 4 of 4 s from 1 s, at least 1.9 cores of other work)") {
		t.Errorf("terminal warnings:\n%s", b.String())
	}
}

// TestHostOtherCoresNotMeasured: a figure the readings cannot give is NaN
// (the report then bounds it from the idle share), never a clamp.
func TestHostOtherCoresNotMeasured(t *testing.T) {
	h := func(total, idle, cpus float64) HostReading {
		return HostReading{CPUTimes: CPUTimes{Total: total, Idle: idle}, CPUs: cpus, ProcessCPUSeconds: 1}
	}
	relay := RelayValues{Present: true, HostCPU: CPUTimes{Total: 7000, Idle: 6000}, HostCPUs: 2}
	for _, tc := range []struct {
		name          string
		before, after HostReading
	}{
		{"an older fleet: no CPU count", h(100, 50, 0), h(102, 51, 0)},
		{"the CPU count changed", h(100, 50, 2), h(102, 51, 4)},
		{"idle went back", h(100, 50, 2), h(102, 49, 2)},
		{"no time between the readings", h(100, 50, 2), h(100, 50, 2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := Snapshot{Fleet: FleetValues{Present: true, Hosts: []HostReading{tc.before}, ProcessCPUSeconds: 1}, Relay: relay}
			cur := Snapshot{At: time.Unix(1, 0), Fleet: FleetValues{Present: true, Hosts: []HostReading{tc.after}, ProcessCPUSeconds: 1}, Relay: relay}
			if got := Derive(prev, prev, cur).HostOtherCores; !math.IsNaN(got) {
				t.Errorf("other work %v cores, want NaN", got)
			}
		})
	}
}

// TestRelayRatesOverItsReadings: a relay that read its counters at 0 s
// and 1 s and answered the first 0.9 s late: its Gbps, messages and CPU
// are over the 1 s its readings cover (its host's CPU seconds over its
// CPUs, read in the same gather), not ten times them over the 0.1 s
// between its answers. A relay that exports no CPU count is timed by its
// answers.
func TestRelayRatesOverItsReadings(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	relay := func(total, sent, msgs, cpu, answered, cpus float64) Snapshot {
		return Snapshot{At: at(answered), Relay: RelayValues{Present: true, At: at(answered),
			HostCPU: CPUTimes{Total: total, Idle: total / 2}, HostCPUs: cpus,
			SentBytes: sent, ReceivedBytes: sent / 10, DeliveredMessages: msgs, ReceivedMessages: msgs / 10, ProcessCPUSeconds: cpu}}
	}
	for _, tc := range []struct {
		name string
		cpus float64
		span float64
	}{{"its readings' span", 2, 1}, {"no CPU count: its answers", 0, 0.1}} {
		t.Run(tc.name, func(t *testing.T) {
			prev, cur := relay(1000, 0, 0, 3, 0.9, tc.cpus), relay(1002, 1.25e8, 1000, 3.5, 1.0, tc.cpus)
			p := Derive(prev, prev, cur)
			for _, c := range []struct {
				what      string
				got, want float64
			}{
				{"send Gbps", p.SendGbps, 1 / tc.span},
				{"receive Gbps", p.RecvGbps, 0.1 / tc.span},
				{"delivered/s", p.MsgsDeliveredPerS, 1000 / tc.span},
				{"received/s", p.MsgsInPerS, 100 / tc.span},
				{"relay CPU %", p.RelayProcessCPUPct, 50 / tc.span},
			} {
				if math.Abs(c.got-c.want) > 1e-9*c.want {
					t.Errorf("%s %v, want %v", c.what, c.got, c.want)
				}
			}
		})
	}
}

// TestLevelRatesOverItsReadings: a capacity level's hold is timed, like a
// sample, by the span the endpoints' readings cover: the fleet's and the
// relay's hold snapshots read at 0 s and answered 0.9 s late, the end read
// and answered at 5 s, on a 2-CPU host.
func TestLevelRatesOverItsReadings(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	snap := func(total, proc, sent, answered float64) Snapshot {
		h := HostReading{CPUTimes: CPUTimes{Total: total, Idle: total / 4}, At: at(answered), CPUs: 2, ProcessCPUSeconds: proc}
		return Snapshot{At: at(answered),
			Fleet: FleetValues{Present: true, At: at(answered), HostCPU: h.CPUTimes, Hosts: []HostReading{h}, ProcessCPUSeconds: proc},
			Relay: RelayValues{Present: true, At: at(answered), HostCPU: h.CPUTimes, HostCPUs: 2, ProcessCPUSeconds: 2 * proc, SentBytes: sent}}
	}
	start, hold, end := snap(990, 0, 0, -5), snap(1000, 1, 0, 0.9), snap(1010, 2, 6.25e8, 5)
	l := EvaluateLevel(LevelWindow{Clients: 10, Start: start, Hold: hold, End: end}, SLO{})
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"fleet CPU %", float64(l.FleetProcessCPUPct), 20},
		{"relay CPU %", float64(l.RelayProcessCPUPct), 40},
		{"send Gbps", float64(l.SendGbps), 1},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s %v, want %v (over the readings' 5 s, not the answers' 4.1 s)", c.what, c.got, c.want)
		}
	}
}
