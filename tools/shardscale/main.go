// Command shardscale measures what a fleet of many shards asks of the
// barrier and of the merge, on one host: N shard processes (this program
// again) with real TCP to one coordinator process (internal/barrier) meet
// at the start and at L levels, as a capacity search's shards do; then N
// summaries with their histograms are decoded and merged (fleet.Merge).
// It prints each figure docs/scaling.md quotes: start and level lateness
// (p50, p99, max: how long after the instant each process woke), the
// coordinator's CPU time and peak RSS, and the merge's time and memory,
// with the load average before and after. Opt-in (make shard-scale), not
// part of make test.
//
//	go run ./tools/shardscale -n 256 -levels 5
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/reprise-harness/reprise/internal/barrier"
	"github.com/reprise-harness/reprise/internal/fleet"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "coord":
		err = coord(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "shard":
		err = shard(os.Args[2:])
	default:
		err = measure(os.Args[1:])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "shardscale:", err)
		os.Exit(1)
	}
}

// levelsOf are the attempt counts of l levels.
func levelsOf(l int) []int {
	var out []int
	for i := 1; i <= l; i++ {
		out = append(out, 100*i)
	}
	return out
}

// coord is the coordinator process: it serves n shards, resumes every
// level at once, halts after the last, and prints its own CPU time and
// peak RSS when its stdin closes.
func coord(args []string) error {
	fs := flag.NewFlagSet("coord", flag.ContinueOnError)
	n := fs.Int("n", 256, "shards")
	levels := fs.Int("levels", 5, "levels")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	c := barrier.NewCoordinator(*n, 0)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Serve(ctx, ln) })
	wg.Go(func() {
		seen := 0
		for a := range c.Levels() {
			seen++
			if seen == *levels {
				_ = a
				c.Halt()
				return
			}
			c.Resume(a)
		}
	})
	io.Copy(io.Discard, os.Stdin)
	cancel()
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	fmt.Printf("cpu_ns %d maxrss_kib %d\n", cpu.Nanoseconds(), ru.Maxrss)
	return nil
}

// shardResult is one shard's lateness at the start and at each level.
type shardResult struct {
	Index     int     `json:"i"`
	ReadyAt   int64   `json:"ready_at"` // Unix ns it said ready
	StartLate int64   `json:"start_late_ns"`
	LevelLate []int64 `json:"level_late_ns"`
	Err       string  `json:"err,omitempty"`
}

func shard(args []string) error {
	fs := flag.NewFlagSet("shard", flag.ContinueOnError)
	i := fs.Int("i", 0, "index")
	n := fs.Int("n", 256, "shards")
	addr := fs.String("addr", "", "coordinator")
	levels := fs.Int("levels", 5, "levels")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := shardResult{Index: *i, ReadyAt: time.Now().UnixNano()}
	start, err := barrier.Wait(ctx, *addr, *i, *n)
	if err != nil {
		r.Err = err.Error()
	} else {
		time.Sleep(time.Until(start))
		r.StartLate = time.Since(start).Nanoseconds()
		for _, a := range levelsOf(*levels) {
			resume, goOn, err := barrier.AtLevel(ctx, *addr, a, *i, *n)
			if err != nil {
				r.Err = err.Error()
				break
			}
			if !goOn {
				break
			}
			r.LevelLate = append(r.LevelLate, time.Since(resume).Nanoseconds())
		}
	}
	return json.NewEncoder(os.Stdout).Encode(r)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:3], " ")
}

func measure(args []string) error {
	fs := flag.NewFlagSet("shardscale", flag.ContinueOnError)
	n := fs.Int("n", 256, "shard processes")
	levels := fs.Int("levels", 5, "levels each shard meets at (the last halts)")
	summary := fs.String("summary", "internal/fleet/testdata/shard-summary.json", "a shard's summary (with histograms) to merge n copies of")
	rounds := fs.Int("rounds", 3, "merge rounds (the median is printed)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("load average before: %s (%d CPUs)\n", loadavg(), runtime.NumCPU())

	cc := exec.Command(exe, "coord", "-n", strconv.Itoa(*n), "-levels", strconv.Itoa(*levels))
	cin, err := cc.StdinPipe()
	if err != nil {
		return err
	}
	cout, err := cc.StdoutPipe()
	if err != nil {
		return err
	}
	cc.Stderr = os.Stderr
	if err := cc.Start(); err != nil {
		return err
	}
	defer cc.Process.Kill()
	sc := bufio.NewScanner(cout)
	if !sc.Scan() {
		return fmt.Errorf("the coordinator printed no address")
	}
	addr := sc.Text()

	t0 := time.Now()
	results := make([]shardResult, *n)
	var wg sync.WaitGroup
	errs := make(chan error, *n)
	for i := range *n {
		cmd := exec.Command(exe, "shard", "-i", strconv.Itoa(i), "-n", strconv.Itoa(*n), "-addr", addr, "-levels", strconv.Itoa(*levels))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("shard %d: %w", i, err)
		}
		wg.Go(func() {
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("shard %d: %w", i, err)
				return
			}
			if err := json.Unmarshal(out.Bytes(), &results[i]); err != nil {
				errs <- fmt.Errorf("shard %d: %w", i, err)
			}
		})
	}
	spawned := time.Since(t0)
	wg.Wait()
	close(errs)
	for err := range errs {
		return err
	}
	total := time.Since(t0)
	cin.Close()
	var cpuNs, rssKiB int64
	for sc.Scan() {
		if _, err := fmt.Sscanf(sc.Text(), "cpu_ns %d maxrss_kib %d", &cpuNs, &rssKiB); err == nil {
			break
		}
	}
	cc.Wait()

	var start []int64
	var lvl []int64
	var lastReady int64
	for _, r := range results {
		if r.Err != "" {
			return fmt.Errorf("shard %d: %s", r.Index, r.Err)
		}
		start = append(start, r.StartLate)
		lvl = append(lvl, r.LevelLate...)
		lastReady = max(lastReady, r.ReadyAt)
	}
	fmt.Printf("%d shard processes started in %v; all done (start + %d levels) in %v; last ready %v after the first was launched\n",
		*n, spawned.Round(time.Millisecond), *levels, total.Round(time.Millisecond), time.Duration(lastReady-t0.UnixNano()).Round(time.Millisecond))
	fmt.Printf("start lateness (woke after the start instant): %s\n", pct(start))
	fmt.Printf("level lateness (woke after the resume instant, %d levels resumed): %s\n", *levels-1, pct(lvl))
	fmt.Printf("coordinator process: %v CPU in all, peak RSS %.1f MiB\n", time.Duration(cpuNs).Round(time.Millisecond), float64(rssKiB)/1024)

	b, err := os.ReadFile(*summary)
	if err != nil {
		return err
	}
	// n distinct shards' files: the same figures, each its own shard.
	files := make([][]byte, *n)
	for i := range files {
		files[i] = shardRe.ReplaceAll(b, fmt.Appendf(nil, `"shard": "%d/%d"`, i, *n))
	}
	var durs []time.Duration
	var alloc uint64
	for range *rounds {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		t := time.Now()
		sums := make([]fleet.Summary, *n)
		for i := range sums {
			if sums[i], err = fleet.ReadSummary(bytes.NewReader(files[i])); err != nil {
				return err
			}
		}
		if _, err := fleet.Merge(sums); err != nil {
			return err
		}
		durs = append(durs, time.Since(t))
		runtime.ReadMemStats(&m1)
		alloc = m1.TotalAlloc - m0.TotalAlloc
	}
	slices.Sort(durs)
	fmt.Printf("merge of %d summaries (%d bytes each, with histograms), decoded and merged: median %v of %d (%v .. %v), %.1f MiB allocated\n",
		*n, len(b), durs[len(durs)/2].Round(time.Microsecond), *rounds, durs[0].Round(time.Microsecond), durs[len(durs)-1].Round(time.Microsecond), float64(alloc)/(1<<20))
	fmt.Printf("load average after: %s\n", loadavg())
	return nil
}

var shardRe = regexp.MustCompile(`"shard":\s*"[0-9]+/[0-9]+"`)

// pct is p50, p99 and max of nanosecond values, in ms.
func pct(ns []int64) string {
	if len(ns) == 0 {
		return "none"
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	at := func(q float64) float64 { return float64(s[min(len(s)-1, int(q*float64(len(s))))]) / 1e6 }
	return fmt.Sprintf("p50 %.2f ms, p99 %.2f ms, max %.2f ms (n=%d)", at(0.50), at(0.99), float64(s[len(s)-1])/1e6, len(s))
}
