package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/metrics"
)

// TestJudgeLoad: only a fleet that used most of its cores is saturated; a
// host busy with other work, or a hypervisor stealing its time, is named
// as such (adding fleet machines would not help); lateness with CPU to
// spare is neither. The readings are the ones the issue saw: a fleet at
// 0.03 s of CPU on a busy host, and one at 10-23 % of a core.
func TestJudgeLoad(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name string
		s    loadSample
		kind string
		says string
	}{
		{"quiet", loadSample{WallS: 5, HostTotalS: 10, HostIdleS: 8, FleetS: 1, Procs: 2, LagP99: ms, LagN: 100}, "", ""},
		{"fleet full", loadSample{WallS: 5, HostTotalS: 10, HostIdleS: 0.5, FleetS: 8.5, Procs: 2, LagP99: 40 * ms, LagN: 100}, loadFleet, "the fleet is saturated"},
		{"fleet full of its GOMAXPROCS", loadSample{WallS: 5, HostTotalS: 40, HostIdleS: 30, FleetS: 4.8, Procs: 1, LagP99: 40 * ms, LagN: 100}, loadFleet, "add fleet machines"},
		{"busy host, idle fleet", loadSample{WallS: 5, HostTotalS: 10, HostIdleS: 0.2, FleetS: 0.03, Procs: 2, LagP99: 30 * ms, LagN: 100}, loadHostBusy, "busy with other work"},
		{"fleet at a fifth of a core", loadSample{WallS: 5, HostTotalS: 10, HostIdleS: 1, FleetS: 1.15, Procs: 2}, loadHostBusy, "figures are unreliable"},
		{"stolen", loadSample{WallS: 5, HostTotalS: 10, HostIdleS: 5, HostStealS: 1, FleetS: 0.5, Procs: 2, LagP99: 20 * ms, LagN: 100}, loadHostBusy, "steal 10%"},
		{"late with CPU to spare", loadSample{WallS: 5, HostTotalS: 10, HostIdleS: 9, FleetS: 0.5, Procs: 2, LagP99: 20 * ms, LagN: 100}, loadLag, "CPU to spare"},
		{"lag without sends", loadSample{WallS: 5, HostTotalS: 10, HostIdleS: 9, FleetS: 0.5, Procs: 2, LagP99: 20 * ms}, "", ""},
		{"no reading", loadSample{}, "", ""},
		// make demo on a quiet 2-core host: the relay child at 0.94 cores
		// is the server, not other work (the report subtracts it too).
		{"relay child beside the fleet", loadSample{WallS: 10, HostTotalS: 20, HostIdleS: 1.5, FleetS: 8.5, ServerS: 9.4, Procs: 2, LagP99: 20 * ms, LagN: 100}, loadFleet, "the server beside it 0.94 cores, other work 0.06 cores"},
		{"relay child, fleet light", loadSample{WallS: 10, HostTotalS: 20, HostIdleS: 1.5, FleetS: 4, ServerS: 13.9, Procs: 2, LagP99: 20 * ms, LagN: 100}, loadFleet, "share this host's cores"},
		{"relay child and other work", loadSample{WallS: 10, HostTotalS: 20, HostIdleS: 1, FleetS: 4, ServerS: 9, Procs: 2, LagP99: 20 * ms, LagN: 100}, loadHostBusy, "other work 0.60 cores"},
		{"relay child unread: its CPU is other work", loadSample{WallS: 10, HostTotalS: 20, HostIdleS: 1.5, FleetS: 8.5, Procs: 2, LagP99: 20 * ms, LagN: 100}, loadHostBusy, "other work 1.00 cores"},
		// The loop timed 0.5 s between its clock and the next reading, but
		// the 2-CPU host's readings are 10 s apart (the progress line's
		// write stalled): the figures are over the readings' span, never
		// more cores than the host has.
		{"stalled loop: over the readings' span", loadSample{WallS: 0.5, HostCPUs: 2, HostTotalS: 20, HostIdleS: 1, FleetS: 4, ServerS: 9, Procs: 2, LagP99: 20 * ms, LagN: 100}, loadHostBusy, "fleet process 0.40 of 1.10 usable cores, the server beside it 0.90 cores, other work 0.60 cores"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kind, msg := judgeLoad(tt.s)
			if kind != tt.kind || !strings.Contains(msg, tt.says) {
				t.Errorf("judged %q: %q; want %q saying %q", kind, msg, tt.kind, tt.says)
			}
			if kind == loadHostBusy && strings.Contains(msg, "add fleet machines") {
				t.Errorf("a busy host blamed on the fleet: %q", msg)
			}
		})
	}
}

// TestJudgeLoadThresholdsAreTheReports: the live warning turns at the
// thresholds the report judges by (internal/metrics, one source; the
// report's TestHealthThresholdsAreTheFleets checks its side): other work
// just under metrics.HostBusyCores beside a relay child is the fleet's
// and the server's limit, just over it a busy host; an interval on time
// with just over metrics.SaturatedIdlePct idle is not judged, just under
// it is; a lag just over metrics.SaturatedLagP99 is late.
func TestJudgeLoadThresholdsAreTheReports(t *testing.T) {
	const eps = 0.01
	// 10 s on 2 cores: fleet 0.4 cores, relay child 0.9, lagging.
	beside := func(other float64) loadSample {
		return loadSample{WallS: 10, HostTotalS: 20, HostIdleS: 20 - 4 - 9 - 10*other, FleetS: 4, ServerS: 9, Procs: 2, LagP99: 2 * maxLagP99, LagN: 100}
	}
	idle := func(pct float64) loadSample {
		return loadSample{WallS: 10, HostTotalS: 20, HostIdleS: 20 * pct / 100, FleetS: 1, Procs: 2}
	}
	lag := func(d time.Duration) loadSample {
		return loadSample{WallS: 10, HostTotalS: 20, HostIdleS: 18, FleetS: 1, Procs: 2, LagP99: d, LagN: 100}
	}
	for _, tc := range []struct {
		name string
		s    loadSample
		want string
	}{
		{"other work just under", beside(metrics.HostBusyCores - eps), loadFleet},
		{"other work just over", beside(metrics.HostBusyCores + eps), loadHostBusy},
		{"idle just over", idle(metrics.SaturatedIdlePct + eps), ""},
		{"idle just under", idle(metrics.SaturatedIdlePct - eps), loadHostBusy},
		{"lag at the bound", lag(metrics.SaturatedLagP99), ""},
		{"lag just over", lag(metrics.SaturatedLagP99 + time.Microsecond), loadLag},
	} {
		if kind, msg := judgeLoad(tc.s); kind != tc.want {
			t.Errorf("%s: judged %q (%s), want %q", tc.name, kind, msg, tc.want)
		}
	}
}
