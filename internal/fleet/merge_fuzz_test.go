package fleet

import (
	"encoding/json"
	"os"
	"testing"
)

// FuzzMerge feeds arbitrary summary files (what `replay merge` reads) and
// shard labels to Merge: it merges or refuses, never panics, and what it
// merges has ordered percentiles.
func FuzzMerge(f *testing.F) {
	seed, err := os.ReadFile("testdata/shard-summary.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, "1/2")
	f.Add([]byte(`{"shard":"0/2","histograms":{"latency_us":"not base64","schedule_lag_us":""}}`), "0/2")
	f.Add([]byte(`{}`), "")
	f.Fuzz(func(t *testing.T, data []byte, other string) {
		var s Summary
		if json.Unmarshal(data, &s) != nil {
			return
		}
		s2 := s
		s2.Shard = other
		for _, sums := range [][]Summary{{s}, {s, s2}} {
			m, err := Merge(sums)
			if err != nil {
				continue
			}
			if m.LatencyMS.P50 > m.LatencyMS.P99 || (m.LatencyMS.Max != nil && m.LatencyMS.P99 > *m.LatencyMS.Max) {
				t.Fatalf("merged latency out of order: %+v", m.LatencyMS)
			}
		}
	})
}

// FuzzShardSet: --shard takes any text and yields a valid shard or an
// error.
func FuzzShardSet(f *testing.F) {
	for _, seed := range []string{"0/1", "3/4", " 2 / 16 ", "4/4", "-1/4", "1/0", "x", "1/2/3"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var s Shard
		if s.Set(v) != nil {
			return
		}
		if s.Count < 1 || s.Index < 0 || s.Index >= s.Count {
			t.Fatalf("Set(%q) = %+v", v, s)
		}
		var back Shard
		if err := back.Set(s.String()); err != nil || back != s {
			t.Fatalf("%v does not parse back: %v %v", s, back, err)
		}
	})
}
