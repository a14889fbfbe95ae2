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
