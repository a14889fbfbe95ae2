package report

import (
	"bytes"
	"testing"
)

// FuzzParseMetrics feeds arbitrary scrape bodies to the parser: a relay
// under test may answer anything, and the sampler must come back with an
// error or values, never a panic.
func FuzzParseMetrics(f *testing.F) {
	for _, seed := range []string{
		"relay_sent_bytes_total 1\n",
		"# TYPE replay_delivery_latency_seconds histogram\nreplay_delivery_latency_seconds_bucket{le=\"+Inf\"} 3\nreplay_delivery_latency_seconds_count 3\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Snapshot
		for _, role := range []Role{RoleRelay, RoleFleet} {
			if err := ParseMetrics(bytes.NewReader(data), role, &s); err != nil {
				return
			}
		}
		h := s.Fleet.Latency
		if len(h.Bounds) != len(h.Counts) {
			t.Fatalf("histogram with %d bounds and %d counts", len(h.Bounds), len(h.Counts))
		}
		_ = Quantile(0.99, h)
	})
}
