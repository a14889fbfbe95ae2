package fleet

import (
	"fmt"
	"time"

	"github.com/reprise-harness/reprise/internal/metrics"
)

// Saturation names its cause. A progress interval whose sends went out
// late (schedule lag) or whose host had little CPU left is judged from
// four readings: the fleet process's own CPU (/proc/self), the server's
// when this command started it here (Config.ServerPIDs, /proc/<pid>), the
// host's busy and stolen time (/proc/stat), and the lag. Only a fleet that
// used most of the cores it may use (those the server on this host left
// it) is saturated ("add fleet machines"); a host busy with other work
// (work neither the fleet's nor the server's, as the report counts it)
// makes the figures unreliable, and adding fleet machines would not help.

// Saturation thresholds. The idle, lag and other-work ones are the
// report's too: one source, internal/metrics load.go.
const (
	maxLagP99  = metrics.SaturatedLagP99
	minIdlePct = metrics.SaturatedIdlePct
	// fleetFullShare of the cores the fleet may use (GOMAXPROCS, at most
	// the host's) busy in the fleet process: the fleet is the bottleneck.
	fleetFullShare = 0.7
	// otherBusyCores beside the fleet, or stealMinPct of the host's time
	// stolen, is a host busy with other work.
	otherBusyCores = metrics.HostBusyCores
	stealMinPct    = 5.0
)

// loadSample is one interval's readings.
type loadSample struct {
	// WallS is the interval as the loop timed it; HostCPUs the CPUs the
	// host's seconds are summed over (0: unknown). When known, the host's
	// CPU seconds' increase over them is the interval instead: the span the
	// readings cover, which a progress line that stalled between a reading
	// and the loop's clock (a blocked write to a slow terminal, a starved
	// goroutine) does not shorten into more cores than the host has.
	WallS    float64
	HostCPUs int
	// HostTotalS, HostIdleS and HostStealS are the host's CPU seconds,
	// summed over its CPUs; FleetS the fleet process's own.
	HostTotalS, HostIdleS, HostStealS float64
	FleetS                            float64
	// ServerS is the CPU of the server on this host (a relay child), 0
	// when it runs elsewhere or was not read.
	ServerS float64
	// Procs is the fleet's GOMAXPROCS; LagP99 and LagN its schedule lag.
	Procs  int
	LagP99 time.Duration
	LagN   int64
}

// Load kinds, the summary's saturation keys.
const (
	loadFleet    = "fleet"     // the fleet process used its cores
	loadHostBusy = "host_busy" // other work took the host
	loadLag      = "lag"       // late with CPU to spare
)

// judgeLoad says what limited an interval: "" when nothing did, else a
// load kind and its warning.
func judgeLoad(s loadSample) (kind, msg string) {
	if s.HostCPUs > 0 {
		s.WallS = s.HostTotalS / float64(s.HostCPUs)
	}
	if s.WallS <= 0 || s.HostTotalS <= 0 {
		return "", ""
	}
	cpus := s.HostTotalS / s.WallS
	idle := 100 * s.HostIdleS / s.HostTotalS
	steal := 100 * s.HostStealS / s.HostTotalS
	fleet, server := s.FleetS/s.WallS, s.ServerS/s.WallS
	other := max((s.HostTotalS-s.HostIdleS-s.FleetS-s.ServerS)/s.WallS, 0)
	late := s.LagN > 0 && s.LagP99 > maxLagP99
	if !late && idle >= minIdlePct {
		return "", ""
	}
	// The cores the fleet may use: its GOMAXPROCS, of those the server
	// beside it left.
	usable := min(max(cpus-server, 0), float64(max(s.Procs, 1)))
	var beside string
	if s.ServerS > 0 {
		beside = fmt.Sprintf(", the server beside it %.2f cores", server)
	}
	figures := fmt.Sprintf("fleet process %.2f of %.2f usable cores%s, other work %.2f cores, host %.0f%% idle, steal %.0f%%, send lag p99 %v",
		fleet, usable, beside, other, idle, steal, s.LagP99.Round(10*time.Microsecond))
	switch {
	case fleet >= fleetFullShare*usable:
		return loadFleet, "WARNING: the fleet is saturated (" + figures + "): add fleet machines; results understate the server"
	case s.ServerS > 0 && other < otherBusyCores && steal < stealMinPct:
		// Starved by the server it loads and nothing else: the report
		// counts such an interval as the fleet's limit too.
		return loadFleet, "WARNING: the fleet and the server share this host's cores and it has none to spare (" + figures + "): run the fleet on other machines; results understate the server"
	case other >= otherBusyCores || steal >= stealMinPct || idle < minIdlePct:
		return loadHostBusy, "WARNING: this host is busy with other work, not the fleet (" + figures + "): the figures are unreliable"
	}
	return loadLag, "WARNING: the fleet's sends went out late with CPU to spare (" + figures + "): the figures of those intervals are late, not the server's"
}
