package wire

// DefaultPort is the reprise relay's TCP and UDP port, and
// DefaultMetricsPort its /metrics port: the one place these numbers are
// written.
const (
	DefaultPort        = 7400
	DefaultMetricsPort = 9400
)
