// Command k8scheck checks what `replay k8s run` wrote for scripts/k8s-e2e.sh:
// that the shards started together at the barrier, that the merged summary
// is exactly the shards' (counts summed, percentiles of the union of their
// histograms, recomputed here from the histograms and not through
// fleet.Merge), and that a sharded run agrees with the same run as one
// process. It prints one line per check and exits 1 when one fails.
//
//	k8scheck shards OUT_DIR --clients 2000 --request-mib 74 [--stamps] [--per-load]
//	k8scheck agree  SHARDED.json ONE.json --within 1
//	k8scheck report REPORT_DIR --fleet "shard pods of a Kubernetes Job"
//
// --stamps: the run's clients carry stamps, so its latency histograms must
// hold values (a percentile check over empty histograms compares 0 with
// 0). --per-load: the start bound grows with the host's load per CPU
// (the shards share the host with its other work: a busy host wakes a
// process late, whatever the barrier did).
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/reprise-harness/reprise/internal/fleet"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "k8scheck:", err)
		os.Exit(1)
	}
}

var errFailed = errors.New("a check failed")

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: k8scheck shards OUT_DIR [flags] | k8scheck agree A.json B.json [flags]")
	}
	switch args[0] {
	case "shards":
		fs := flag.NewFlagSet("shards", flag.ContinueOnError)
		clients := fs.Int("clients", 0, "logins every run must have")
		lateMS := fs.Float64("max-start-late-ms", 50, "how late a shard may start after the barrier's instant")
		reqMiB := fs.Float64("request-mib", 0, "the rendered memory request of a shard pod, for the report")
		stamps := fs.Bool("stamps", false, "the run has stamps: its latency histograms must hold values")
		perLoad := fs.Bool("per-load", false, "scale --max-start-late-ms by the host's 1-minute load per CPU (at least 1)")
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		if *perLoad {
			l, err := loadPerCPU()
			if err != nil {
				return err
			}
			fmt.Printf("     host load %.2f per CPU: start bound %.0f ms x %.2f\n", l, *lateMS, max(l, 1))
			*lateMS *= max(l, 1)
		}
		return checkShards(args[1], *clients, *lateMS, *reqMiB, *stamps)
	case "report":
		fs := flag.NewFlagSet("report", flag.ContinueOnError)
		fleetDesc := fs.String("fleet", "", "what the report's fleet parameter must say")
		if err := fs.Parse(args[2:]); err != nil {
			return err
		}
		return checkReport(args[1], *fleetDesc)
	case "agree":
		if len(args) < 3 {
			return fmt.Errorf("agree: want two summaries")
		}
		fs := flag.NewFlagSet("agree", flag.ContinueOnError)
		within := fs.Float64("within", 1, "percent")
		if err := fs.Parse(args[3:]); err != nil {
			return err
		}
		return checkAgree(args[1], args[2], *within)
	}
	return fmt.Errorf("unknown check %q", args[0])
}

func load(path string) (fleet.Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return fleet.Summary{}, err
	}
	defer f.Close()
	s, err := fleet.ReadSummary(f)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

type checker struct{ failed bool }

func (c *checker) check(ok bool, format string, a ...any) {
	mark := "ok  "
	if !ok {
		mark, c.failed = "FAIL", true
	}
	fmt.Printf("%s %s\n", mark, fmt.Sprintf(format, a...))
}

func (c *checker) err() error {
	if c.failed {
		return errFailed
	}
	return nil
}

func checkShards(dir string, clients int, lateMS, reqMiB float64, stamps bool) error {
	paths, err := filepath.Glob(filepath.Join(dir, "shard-*.json"))
	if err != nil || len(paths) == 0 {
		return fmt.Errorf("no shard summaries in %s", dir)
	}
	sort.Strings(paths)
	merged, err := load(filepath.Join(dir, "merged.json"))
	if err != nil {
		return err
	}
	var c checker
	var shards []fleet.Summary
	for _, p := range paths {
		s, err := load(p)
		if err != nil {
			return err
		}
		shards = append(shards, s)
	}
	c.check(merged.LoginsSucceeded == int64(clients) && merged.ClientsRequested == clients,
		"logins %d/%d (want %d/%d)", merged.LoginsSucceeded, merged.ClientsRequested, clients, clients)

	// Started together: one barrier instant, each shard at most lateMS
	// after it.
	start := shards[0].StartUnixNS
	for _, s := range shards {
		c.check(s.StartUnixNS == start && start != 0 && s.StartLateMS <= lateMS,
			"shard %s started %.2f ms after the barrier's instant %d (its instant %d; at most %.0f ms)", s.Shard, s.StartLateMS, start, s.StartUnixNS, lateMS)
	}

	// Counts: the merge is the sum.
	sum := func(f func(fleet.Summary) int64) int64 {
		var n int64
		for _, s := range shards {
			n += f(s)
		}
		return n
	}
	for _, k := range []struct {
		name string
		f    func(fleet.Summary) int64
	}{
		{"login attempts", func(s fleet.Summary) int64 { return s.LoginAttempts }},
		{"logins", func(s fleet.Summary) int64 { return s.LoginsSucceeded }},
		{"messages sent", func(s fleet.Summary) int64 { return s.MessagesSent }},
		{"messages received", func(s fleet.Summary) int64 { return s.MessagesReceived }},
		{"bytes sent", func(s fleet.Summary) int64 { return s.BytesSent }},
		{"bytes received", func(s fleet.Summary) int64 { return s.BytesReceived }},
	} {
		c.check(k.f(merged) == sum(k.f), "merged %s %d = the shards' sum %d", k.name, k.f(merged), sum(k.f))
	}

	// Percentiles: those of the union of the shards' histograms.
	for _, h := range []struct {
		name string
		enc  func(fleet.Summary) string
		q    fleet.Quantiles
	}{
		{"latency", func(s fleet.Summary) string { return s.Histograms.LatencyUS }, merged.LatencyMS},
		{"schedule lag", func(s fleet.Summary) string { return s.Histograms.ScheduleLagUS }, merged.ScheduleLagMS},
	} {
		union, n, err := unionOf(shards, h.enc)
		if err != nil {
			return err
		}
		if stamps && h.name == "latency" {
			c.check(n > 0, "the run has stamps: its latency histograms hold %d values", n)
		}
		p50, p99 := quantileMS(union, 50), quantileMS(union, 99)
		c.check(p50 == h.q.P50 && p99 == h.q.P99, "merged %s p50 %.3f ms p99 %.3f ms = the union histogram's (%d values) %.3f / %.3f", h.name, h.q.P50, h.q.P99, n, p50, p99)
	}

	for _, s := range shards {
		fmt.Printf("     shard %s: peak RSS %.1f MiB of a %.0f MiB request; %d logins, sent %d, received %d\n",
			s.Shard, float64(s.ProcessPeakRSSBytes)/(1<<20), reqMiB, s.LoginsSucceeded, s.MessagesSent, s.MessagesReceived)
		if reqMiB > 0 {
			c.check(float64(s.ProcessPeakRSSBytes)/(1<<20) <= 2*reqMiB, "shard %s peak RSS within its memory limit (2x request)", s.Shard)
		}
	}
	return c.err()
}

func unionOf(shards []fleet.Summary, enc func(fleet.Summary) string) (*hdrhistogram.Histogram, int64, error) {
	var union *hdrhistogram.Histogram
	for _, s := range shards {
		// The encoding is base64 already (Decode reads it as is).
		h, err := hdrhistogram.Decode([]byte(enc(s)))
		if err != nil {
			return nil, 0, fmt.Errorf("shard %s histogram: %w", s.Shard, err)
		}
		if union == nil {
			union = h
			continue
		}
		if dropped := union.Merge(h); dropped != 0 {
			return nil, 0, fmt.Errorf("shard %s histogram: %d values out of range", s.Shard, dropped)
		}
	}
	return union, union.TotalCount(), nil
}

// quantileMS is the histogram's quantile (in µs) in ms, 0 when empty: the
// summary's own convention.
func quantileMS(h *hdrhistogram.Histogram, q float64) float64 {
	if h.TotalCount() == 0 {
		return 0
	}
	return float64(h.ValueAtQuantile(q)) / 1000
}

func checkAgree(aPath, bPath string, within float64) error {
	a, err := load(aPath)
	if err != nil {
		return err
	}
	b, err := load(bPath)
	if err != nil {
		return err
	}
	var c checker
	off := func(x, y int64) float64 {
		if x == y {
			return 0
		}
		return 100 * math.Abs(float64(x-y)) / math.Max(float64(x), float64(y))
	}
	c.check(a.LoginsSucceeded == b.LoginsSucceeded, "logins %d and %d", a.LoginsSucceeded, b.LoginsSucceeded)
	c.check(a.MessagesSent > 0 && off(a.MessagesSent, b.MessagesSent) <= within, "sent %d and %d: %.2f %% apart (at most %.1f %%)", a.MessagesSent, b.MessagesSent, off(a.MessagesSent, b.MessagesSent), within)
	c.check(a.MessagesReceived > 0 && off(a.MessagesReceived, b.MessagesReceived) <= within, "received %d and %d: %.2f %% apart (at most %.1f %%)", a.MessagesReceived, b.MessagesReceived, off(a.MessagesReceived, b.MessagesReceived), within)
	return c.err()
}

func loadPerCPU() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/loadavg: %q", b)
	}
	l, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/loadavg: %w", err)
	}
	return l / float64(runtime.NumCPU()), nil
}
