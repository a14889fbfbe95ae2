package metrics

import "time"

// How the fleet's host is judged, from the figures the host collector and
// the fleet export: one source for the fleet's live warnings (fleet
// judgeLoad: "the fleet is saturated", "this host is busy with other
// work") and the report's table and answers (report isSaturated,
// hostBusyMeasured), so a run never warns one thing live and reports
// another.
const (
	// SaturatedIdlePct: with less of the host's CPU idle than this, the
	// fleet may be starved. A fifth of the host leaves a 2-core host 0.4
	// cores: room for the fleet's pollers to catch up within a sample.
	SaturatedIdlePct = 20.0
	// SaturatedLagP99: sends due this long ago at the p99 are late. The
	// fleet's scheduler wakes within 1 ms on an idle host; 5 ms is five
	// of those, well under the latency any realtime server is judged by.
	SaturatedLagP99 = 5 * time.Millisecond
	// HostBusyCores: this much CPU spent by neither the fleet nor the
	// server on its host makes the host busy with other work. Half a core
	// is more than a quiet host's daemons use, and less than one busy
	// process, the least that starves a fleet on a small host.
	HostBusyCores = 0.5
)
