package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/capture/capturetest"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// writeManyFlows writes a capture of n short recorded clients (join,
// sends, leave, FINs) and returns its path.
func writeManyFlows(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), fmt.Sprintf("%d.pcap", n))
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := capturetest.WriteFlows(f, capturetest.Flows{N: n, Sends: 3, Payload: 50}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// inspectPerFlow runs inspect (no race detector: its shadow memory is no
// measure) on fewPath, a capture of few flows, and on nPath, one of n,
// and returns the peak RSS each extra flow cost, in bytes.
func inspectPerFlow(t *testing.T, replay, fewPath string, few int, nPath string, n int, args ...string) int64 {
	t.Helper()
	_, base := peakRSS(t, replay, append([]string{"inspect", fewPath}, args...)...)
	out, rss := peakRSS(t, replay, append([]string{"inspect", nPath}, args...)...)
	if want := fmt.Sprintf("%d flows with protocol frames", n); len(args) == 0 && !strings.Contains(string(out[:min(len(out), 300)]), want) {
		t.Fatalf("inspect %v: output starts %q, want %q", args, out[:min(len(out), 300)], want)
	}
	per := (rss - base) << 10 / int64(n-few)
	t.Logf("inspect %v: %d flows %d KiB, %d flows %d KiB peak RSS: %d bytes per flow", args, few, base, n, rss, per)
	return per
}

// TestInspectMemoryPerFlow: inspect holds a bounded few hundred bytes per
// flow ended, not its reassembly state (about 9 KB a flow before it was
// released when its connection ended): 20,000 flows cost under 4 KiB of
// peak RSS each, text or JSON (the two read the same two captures).
func TestInspectMemoryPerFlow(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds replay without -race and reads 20,000 flows")
	}
	replay := testproc.BuildT(t, testproc.Options{}, "replay")["replay"]
	const few, n = 200, 20000
	fewPath, nPath := writeManyFlows(t, few), writeManyFlows(t, n)
	for _, args := range [][]string{{}, {"--json"}} {
		if per := inspectPerFlow(t, replay, fewPath, few, nPath, n, args...); per > 4<<10 {
			t.Errorf("inspect %v: %d bytes of peak RSS per flow", args, per)
		}
	}
}

// TestInspectScale300k is the figure of issue 20 (opt-in: REPRISE_SCALE=1):
// a capture of 300,000 flows is inspected under 300 MB of peak RSS, and
// one chosen flow of it replays against a relay.
func TestInspectScale300k(t *testing.T) {
	b := scaleBins(t)
	path := writeManyFlows(t, 300000)
	start := time.Now()
	out, rss := peakRSS(t, b["replay"], "inspect", path)
	t.Logf("inspect of 300,000 flows: %v, %d KiB peak RSS", time.Since(start).Round(time.Second), rss)
	if !strings.Contains(string(out[:300]), "300000 flows with protocol frames") {
		t.Fatalf("inspect: %q", out[:300])
	}
	if rss > 300<<10 {
		t.Errorf("inspect of 300,000 flows: %d KiB peak RSS, over 300 MB", rss)
	}
	r := testproc.StartRelay(t, b["relay"])
	start = time.Now()
	_, rss = peakRSS(t, b["replay"], "--capture", path, "--flow", "150000", "--target", r.TCP,
		"--clients", "2", "--login-interval", "10ms", "--duration", "2s")
	t.Logf("replay of flow 150000 of 300,000: %v, %d KiB peak RSS", time.Since(start).Round(time.Second), rss)
}
