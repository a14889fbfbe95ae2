package report

import (
	"bytes"
	"strings"
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

// FuzzReadSeriesCSV feeds arbitrary files to the series reader: a report
// directory may hold anything, and reading it back must give runs or an
// error, never a panic.
func FuzzReadSeriesCSV(f *testing.F) {
	head := strings.Join(SeriesHeader, ",") + "\n"
	for _, seed := range []string{
		head,
		head + "N:N,1,1.007,0.001604,0.000385,0,8.92,7,7,0,458.9,1739.6,3.1,4.2,1.5,50,7,0,12.5,0,0.75\n",
		head + "1:N,1,1,,,,,,,,,,,,,,,,,,\n",
		head + "N:N,x,1,,,,,,,,,,,,,,,,,,\n",
		strings.Join(SeriesHeader[:seriesHeaderBefore], ",") + "\nN:N,1,1,,,,,,,,,,,,,,,,,\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runs, err := ReadSeriesCSV(bytes.NewReader(data))
		if err != nil {
			return
		}
		for _, r := range runs {
			if len(r.Series.Points) == 0 {
				t.Fatalf("run %s #%d with no points", r.Scenario, r.Repeat)
			}
			_ = RunHeadline(r, AnalyzeRun(r), DefaultSLO())
		}
	})
}
