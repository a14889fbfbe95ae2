package fleet

import (
	"bytes"
	"net"
	"strings"
	"testing"
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
		f.saturated("lag", "WARNING: lag")
	}
	for range 2 {
		f.saturated("cpu", "WARNING: cpu")
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "WARNING: lag (said once") || !strings.HasPrefix(lines[1], "WARNING: cpu (said once") {
		t.Errorf("printed:\n%s\nwant each warning once", out.String())
	}
	f.warnMu.Lock()
	got := f.saturationWarnings()
	f.warnMu.Unlock()
	if len(got) != 2 || got[0] != "WARNING: lag (first of 3 progress intervals with this warning)" || got[1] != "WARNING: cpu (first of 2 progress intervals with this warning)" {
		t.Errorf("summary warnings %q", got)
	}
}
