package fleet

import (
	"testing"

	"github.com/reprise-harness/reprise/internal/wire"
)

// TestMetricsPortIsWires: the manifests (internal/k8s) read the fleet's
// /metrics port from wire/ports.go, where every port is written.
func TestMetricsPortIsWires(t *testing.T) {
	if DefaultMetricsPort != wire.FleetMetricsPort {
		t.Fatalf("fleet.DefaultMetricsPort %d, wire.FleetMetricsPort %d: one port, written twice", DefaultMetricsPort, wire.FleetMetricsPort)
	}
}
