package fleet

import (
	"bytes"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestListenMetricsBusy: the default /metrics address taken (a second
// replay on the host) gives way to a free loopback port, said once; an
// address the user chose that is taken fails, saying what to do.
func TestListenMetricsBusy(t *testing.T) {
	// Hold the default port, unless some other program already does:
	// either way it is busy for the fleet.
	if held, err := net.Listen("tcp", DefaultMetrics); err == nil {
		defer held.Close()
	}
	var out bytes.Buffer
	ln, err := listenMetrics(DefaultMetrics, &out)
	if err != nil {
		t.Fatalf("default port busy: %v", err)
	}
	defer ln.Close()
	addr := ln.Addr().(*net.TCPAddr)
	if !addr.IP.IsLoopback() || addr.String() == DefaultMetrics {
		t.Errorf("fell back to %v, want another loopback port", addr)
	}
	if msg := out.String(); !strings.Contains(msg, DefaultMetrics+" is in use") || !strings.Contains(msg, addr.String()) || strings.Count(msg, "\n") != 1 {
		t.Errorf("message %q should name the busy default and the port taken, in one line", msg)
	}

	out.Reset()
	_, err = listenMetrics(ln.Addr().String(), &out)
	if err == nil || !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "--metrics") || out.Len() > 0 {
		t.Errorf("chosen port busy: err %v, out %q; want an error naming --metrics and nothing printed", err, out.String())
	}
}

// TestDefaultMetricsLoopback: by default the fleet's counters are served
// on loopback only.
func TestDefaultMetricsLoopback(t *testing.T) {
	host, _, err := net.SplitHostPort(DefaultConfig().Metrics)
	if err != nil || !net.ParseIP(host).IsLoopback() {
		t.Errorf("default --metrics %q is not a loopback address", DefaultConfig().Metrics)
	}
}

// TestSaturationWarnedOnce: a saturation warning is printed the first
// time of each kind and then only counted; the summary says how often.
func TestSaturationWarnedOnce(t *testing.T) {
	var out bytes.Buffer
	f := &Fleet{cfg: Config{Out: &out}}
	for range 3 {
		f.saturated(loadLag, "WARNING: lag")
	}
	for range 2 {
		f.saturated(loadFleet, "WARNING: cpu")
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "WARNING: lag (said once") || !strings.HasPrefix(lines[1], "WARNING: cpu (said once") {
		t.Errorf("printed:\n%s\nwant each warning once", out.String())
	}
	f.warnMu.Lock()
	got := f.saturationWarnings()
	f.warnMu.Unlock()
	if len(got) != 2 || got[1] != "WARNING: lag (first of 3 progress intervals with this warning)" || got[0] != "WARNING: cpu (first of 2 progress intervals with this warning)" {
		t.Errorf("summary warnings %q", got)
	}
}

// TestRampETA: the time to the last login counts the holds at the levels
// still to come before it (not "0s" with most logins to go), or says how
// many there are when their length is not known.
func TestRampETA(t *testing.T) {
	c := &Config{Clients: 250, LoginInterval: 100 * time.Millisecond, Levels: []int{50, 100, 150, 200, 250}}
	s := time.Second
	tests := []struct {
		name       string
		hold       time.Duration
		now, shift time.Duration
		done       int
		want       string
	}{
		// The last login is due at 24.9 s on the schedule; four levels
		// (50..200) wait before it, the one at 250 after.
		{"start, holds known", 20 * s, 0, 0, 0, "1m45s"},
		{"start, holds not known", 0, 0, 0, 0, "25s plus 4 level holds"},
		// Two levels passed, 40 s of waits so far, at 50 s on the clock:
		// 24.9 + 40 + 2 x 20 - 50.
		{"two levels passed", 20 * s, 50 * s, 40 * s, 2, "55s"},
		{"last level passed", 20 * s, 100 * s, 80 * s, 4, "5s"},
		{"overdue", 20 * s, 200 * s, 80 * s, 5, "0s"},
	}
	for _, tt := range tests {
		c.LevelHold = tt.hold
		if got := rampETA(c, tt.now, tt.shift, tt.done); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	if got := rampETA(&Config{Clients: 10, LoginInterval: s}, 3*s, 0, 0); got != "6s" {
		t.Errorf("no levels: %q, want 6s", got)
	}
}

// TestSummaryTextNamesSides: the plain replay table gives the clients'
// send and receive rates, saying whose side, and the fleet host's CPU
// idle.
func TestSummaryTextNamesSides(t *testing.T) {
	var b bytes.Buffer
	s := Summary{DurationS: 10, BytesSent: 125_000_000, BytesReceived: 250_000_000, CPUIdlePct: 42}
	if err := s.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range [][]string{{"clients send Gbps (clients -> server)", "0.1000"}, {"clients receive Gbps (server -> clients)", "0.2000"}, {"fleet host CPU idle %", "42"}} {
		if !slices.ContainsFunc(strings.Split(b.String(), "\n"), func(l string) bool { return strings.Join(strings.Fields(l), " ") == strings.Join(want, " ") }) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	s.CPUIdlePct = -1
	b.Reset()
	if err := s.WriteText(&b); err != nil || !strings.Contains(b.String(), "unknown") {
		t.Errorf("unknown CPU idle not said: %v\n%s", err, b.String())
	}
}
