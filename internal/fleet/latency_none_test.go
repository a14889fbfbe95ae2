package fleet

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// TestAbsentLatencyIsNotZero: a run with no stamped delivery has no
// latency figures: null in the summary JSON (read back as absent), "none"
// in the table, never 0.000; a run with samples keeps its figures.
func TestAbsentLatencyIsNotZero(t *testing.T) {
	h := hdrhistogram.New(1, 3600e6, 3)
	s := Summary{LatencyMS: latencyQuantiles(h)}
	b, err := json.Marshal(s)
	if err != nil || !bytes.Contains(b, []byte(`"latency_ms":null`)) {
		t.Fatalf("JSON %s: %v", b, err)
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil || !back.LatencyMS.None() {
		t.Fatalf("read back %+v: %v", back.LatencyMS, err)
	}
	var txt bytes.Buffer
	if err := s.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if line := latencyLine(txt.String()); !strings.Contains(line, "none") || strings.Contains(line, "0.000") {
		t.Fatalf("table line %q", line)
	}
	h.RecordValue(1500)
	s.LatencyMS = latencyQuantiles(h)
	b, _ = json.Marshal(s)
	if err := json.Unmarshal(b, &back); err != nil || back.LatencyMS.None() || back.LatencyMS.P50 < 1.4 || back.LatencyMS.P50 > 1.6 {
		t.Fatalf("measured latency %s read back as %+v: %v", b, back.LatencyMS, err)
	}
}

func latencyLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "latency ms") {
			return l
		}
	}
	return ""
}
