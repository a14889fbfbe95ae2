package wire

import "strconv"

// DefaultPort is the reprise relay's TCP and UDP port, and
// DefaultMetricsPort its /metrics port; FleetMetricsPort is a replay
// fleet's /metrics port beside it, and BarrierPort the start barrier's
// of a fleet run as shards: the one place these numbers are written.
const (
	DefaultPort        = 7400
	DefaultMetricsPort = 9400
	FleetMetricsPort   = 9401
	BarrierPort        = 9402
)

// Loopback is port on 127.0.0.1, as host:port: the default address of a
// relay (or its /metrics) on this machine, for a client's flag.
func Loopback(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
