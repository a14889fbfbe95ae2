package report

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoHeadlineMatchesSeries reads a `make demo` report
// (testdata/demo: its summary.json and series.csv as written, on the
// project's loaded 2-core machine) and checks the headline against the
// samples two ways: judged again from series.csv it is the same line
// (VerifyHeadline), and N:N's claim holds in the raw rows: the objective
// named broke at the second named, none broke before, and the number held
// is who was logged in just before.
func TestDemoHeadlineMatchesSeries(t *testing.T) {
	dir := filepath.Join("testdata", "demo")
	sum := readDemoSummary(t)
	if err := VerifyHeadline(dir, sum); err != nil {
		t.Fatal(err)
	}
	if err := VerifyPeaks(dir, sum); err != nil {
		t.Error(err)
	}
	h := sum.Scenarios[0].Headline
	if h.Scenario != "N:N" || h.Requested != 200 || h.Reason != ReasonLatency {
		t.Fatalf("recorded N:N headline %q: want a latency breach of 200 requested", h.Line())
	}
	pts := readRecorded(t, filepath.Join("..", "demo", SeriesFile), "N:N").Series.Points
	slo, err := ParseSLO(sum.SLO)
	if err != nil {
		t.Fatal(err)
	}
	bound := float64(slo.P99.Milliseconds())
	at := -1
	for i, p := range pts {
		if math.Abs(p.T-float64(h.AtS)) < 0.001 { // series.csv keeps milliseconds
			at = i
		}
	}
	if at < 1 || at+sustain > len(pts) {
		t.Fatalf("no sample at %v s", h.AtS)
	}
	for _, p := range pts[at : at+sustain] {
		if !(p.LatencyP99Ms > bound) {
			t.Errorf("at %.1f s p99 %.0f ms: not over %v, yet the headline says latency broke from %v s", p.T, p.LatencyP99Ms, slo.P99, h.AtS)
		}
	}
	for _, p := range pts[:at] {
		if math.Max(nz(p.SlowConsumerDiscards), nz(p.FleetDisconnects)) > 0 || nz(p.LoginFailures) > 0 {
			t.Errorf("at %.1f s clients were lost or refused before the latency breach the headline names", p.T)
		}
	}
	if float64(h.Held) != pts[at-1].LoggedIn {
		t.Errorf("held %v, but %v were logged in the second before", h.Held, pts[at-1].LoggedIn)
	}
}

// TestVerifyHeadlineCatchesAWrongClaim: a headline its series.csv does
// not bear out (the "plateau: logged-in flat from 47 s" beside
// disconnects at 48 s) fails Verify.
func TestVerifyHeadlineCatchesAWrongClaim(t *testing.T) {
	dir := t.TempDir()
	csv, err := os.ReadFile(filepath.Join("testdata", "demo", SeriesFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, SeriesFile), csv, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := readDemoSummary(t)
	sum.Headline = strings.Replace(sum.Headline, "latency at 13 s", "plateau at 12 s", 1)
	if err := VerifyHeadline(dir, sum); err == nil || !strings.Contains(err.Error(), "not what series.csv says") {
		t.Errorf("a wrong headline passed: %v", err)
	}
}

// TestVerifyPeaksCatchesAPerSampleReceivePeak: a receive peak taken as the
// highest single sample (the rule the report used before receive followed
// send's rolling mean) is not what series.csv says, and fails VerifyPeaks.
func TestVerifyPeaksCatchesAPerSampleReceivePeak(t *testing.T) {
	dir := filepath.Join("testdata", "demo")
	sum := readDemoSummary(t)
	pts := readRecorded(t, filepath.Join("..", "demo", SeriesFile), sum.Runs[0].Scenario).Series.Points
	top := math.Inf(-1)
	for _, p := range pts {
		if !math.IsNaN(p.RecvGbps) {
			top = math.Max(top, p.RecvGbps)
		}
	}
	if rolled := float64(sum.Runs[0].PeakRecvGbps); sameRead(top, rolled) {
		t.Fatalf("the recorded run's top sample %v is its rolling peak %v: no case to check", top, rolled)
	}
	sum.Runs[0].PeakRecvGbps = Num(top)
	if err := VerifyPeaks(dir, sum); err == nil || !strings.Contains(err.Error(), "peak receive Gbps") {
		t.Errorf("a per-sample receive peak passed: %v", err)
	}
}

// readDemoSummary is testdata/demo's summary.json.
func readDemoSummary(t *testing.T) Summary {
	t.Helper()
	var sum Summary
	js, err := os.ReadFile(filepath.Join("testdata", "demo", SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js, &sum); err != nil {
		t.Fatal(err)
	}
	return sum
}
