package report

import (
	"math"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/metrics"
)

// TestHealthThresholdsAreTheFleets: the report's table judges a sample
// at the thresholds the fleet's live warning turns at (internal/metrics,
// one source; the fleet's TestJudgeLoadThresholdsAreTheReports checks its
// side): other work just over metrics.HostBusyCores is a busy host, just
// under is not; a fleet host just under metrics.SaturatedIdlePct idle, or
// a lag just over metrics.SaturatedLagP99, is a saturated fleet (on a
// host not busy with other work), just past them the other way is not.
func TestHealthThresholdsAreTheFleets(t *testing.T) {
	const eps = 0.01
	lagMs := float64(metrics.SaturatedLagP99) / float64(time.Millisecond)
	pt := func(other, idle, lag float64) Point {
		return Point{HostOtherCores: other, FleetCPUIdlePct: idle, ScheduleLagP99Ms: lag,
			FleetProcessCPUPct: math.NaN(), RelayProcessCPUPct: math.NaN()}
	}
	quiet := 90.0
	for _, tc := range []struct {
		name            string
		p               Point
		busy, saturated bool
	}{
		{"other work just under", pt(metrics.HostBusyCores-eps, 1, 0), false, true},
		{"other work just over", pt(metrics.HostBusyCores+eps, 1, 0), true, false},
		{"idle just over", pt(0, metrics.SaturatedIdlePct+eps, 0), false, false},
		{"idle just under", pt(0, metrics.SaturatedIdlePct-eps, 0), false, true},
		{"lag at the bound", pt(0, quiet, lagMs), false, false},
		{"lag just over", pt(0, quiet, lagMs+0.001), false, true},
	} {
		if got := hostBusyMeasured(tc.p); got != tc.busy {
			t.Errorf("%s: host busy %v, want %v", tc.name, got, tc.busy)
		}
		if got := isSaturated(tc.p, healthSLO); got != tc.saturated {
			t.Errorf("%s: saturated %v, want %v", tc.name, got, tc.saturated)
		}
	}
}
