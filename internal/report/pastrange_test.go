package report

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// TestPastRange: a latency whose rank falls in the histogram's +Inf
// bucket (past the fleet's 60 s bound) is no number. The level table, the
// breach, the answer and the saturation figures print "> 60 s", never
// 60000 ms; summary.json has null with the field named in past_range;
// series.csv writes +Inf and reads it back. The golden holds the text and
// the JSON.
func TestPastRange(t *testing.T) {
	bounds := []float64{0.01, 0.1, 1, 10, 60, math.Inf(1)}
	snap := func(at time.Duration, fast, past float64) Snapshot {
		var s Snapshot
		s.At = synthBase.Add(at)
		c := []float64{fast, fast, fast, fast, fast, fast + past}
		s.Fleet = FleetValues{Present: true, At: s.At, LoggedIn: 10, LoginAttempts: 10, LoginsSucceeded: 10,
			Latency:     Histogram{Bounds: bounds, Counts: c, Count: fast + past},
			ScheduleLag: Histogram{Bounds: bounds, Counts: c, Count: fast + past},
			HostCPU:     CPUTimes{Idle: 50, Total: 100}}
		return s
	}
	slo := SLO{P99: 100 * time.Millisecond, MaxDrops: -1, MaxLoginFailPct: -1, MinIdlePct: -1}
	held := EvaluateLevel(LevelWindow{Clients: 10, Start: snap(0, 0, 0), Hold: snap(time.Second, 0, 0), End: snap(3*time.Second, 100, 0),
		FromS: 0, HoldFromS: 1, ToS: 3}, slo)
	// Every delivery of the second level's hold took longer than 60 s.
	broke := EvaluateLevel(LevelWindow{Clients: 20, Start: snap(3*time.Second, 100, 0), Hold: snap(4*time.Second, 100, 0),
		End: snap(6*time.Second, 100, 100), FromS: 3, HoldFromS: 4, ToS: 6}, slo)
	if !broke.LatencyP99Ms.PastRange() || !broke.LatencyP50Ms.PastRange() || held.LatencyP99Ms.PastRange() {
		t.Fatalf("p50 %v p99 %v past the range, held level p99 %v", broke.LatencyP50Ms, broke.LatencyP99Ms, held.LatencyP99Ms)
	}
	c := Decide("N:N", 20, []Level{held, broke}, nil, slo)
	var out bytes.Buffer
	if err := WriteLevels(&out, c); err != nil {
		t.Fatal(err)
	}
	out.WriteString(saturationFigures(Num(math.NaN()), broke.ScheduleLagP99Ms, SLO{MaxLagP99: 5 * time.Millisecond}) + "\n")
	st := formatStat(Stat{Mean: broke.LatencyP99Ms, SD: Num(math.NaN()), N: 2}, 2)
	out.WriteString("table cell: " + string(st) + "\n")
	j, err := json.MarshalIndent(broke, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	out.Write(j)
	out.WriteString("\n")
	got := out.String()
	for _, bad := range []string{"60000", "60.0 ms", "+Inf"} {
		if strings.Contains(got, bad) {
			t.Errorf("a figure past the range printed as a number (%q):\n%s", bad, got)
		}
	}
	testproc.Golden(t, filepath.Join("testdata", "pastrange.golden"), []byte(got), *update, "-update")
	var back Level
	if err := json.Unmarshal(j, &back); err != nil || !math.IsNaN(float64(back.LatencyP99Ms)) || len(back.PastRange) != 3 {
		t.Errorf("summary.json read back: p99 %v, past_range %v, err %v", back.LatencyP99Ms, back.PastRange, err)
	}
	// series.csv: +Inf, read back as +Inf.
	if s := csvNum(math.Inf(1)); s != "+Inf" {
		t.Errorf("csv cell %q", s)
	}
	if v, err := parseCell("+Inf"); err != nil || !math.IsInf(v, 1) {
		t.Errorf("csv +Inf read back as %v, %v", v, err)
	}
	if _, err := parseCell("-Inf"); err == nil {
		t.Error("csv -Inf read as a number")
	}
}
