package profile

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/wire"
)

func TestInspectJSONBounded(t *testing.T) {
	// A flow spanning 80 years (a consistent clock) keeps its rate arrays
	// at maxRateBuckets.
	c := &capture.Capture{Flows: []*capture.Flow{{
		Start: time.Unix(0, 0), End: time.Unix(0, 0).Add(80 * 365 * 24 * time.Hour),
		ClientFrames: []capture.Frame{{Offset: 0, Bytes: wire.AppendJoin(nil, "r", "u", nil, 0)}},
	}}}
	s := SummaryOf(c)
	if n := len(s.Flows[0].ClientPerSecond); n > maxRateBuckets+1 {
		t.Errorf("%d rate buckets", n)
	}
	b, err := json.Marshal(s)
	if err != nil || len(b) > 64<<10 {
		t.Errorf("JSON of %d bytes, err %v", len(b), err)
	}
}
