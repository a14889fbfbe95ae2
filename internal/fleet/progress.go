package fleet

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/internal/metrics"
)

// tick folds the recording histograms into the cumulative ones every
// second (so /metrics and Stats are at most a second stale) and prints a
// progress line every ProgressInterval.
func (f *Fleet) tick(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := f.stats.totals()
	lastAt := time.Now()
	lastTick := lastAt
	cpu0, cpuErr := metrics.ReadCPUTimes()
	proc0, procErr := metrics.ReadProcessUsage()
	_, server0 := serverCPU(f.cfg.ServerPIDs, nil)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.stats.fold()
		if f.hs != nil {
			f.hs.tick(time.Since(lastTick))
		}
		lastTick = time.Now()
		if time.Since(lastAt) < f.cfg.ProgressInterval-50*time.Millisecond {
			continue
		}
		now := f.stats.totals()
		dt := time.Since(lastAt).Seconds()
		latP99, latN, lagP99, lagN := f.stats.takeWindow()
		idle := -1.0
		load := loadSample{WallS: dt, Procs: runtime.GOMAXPROCS(0), LagP99: time.Duration(lagP99) * time.Microsecond, LagN: lagN}
		if cpuErr == nil {
			if cpu1, err := metrics.ReadCPUTimes(); err == nil {
				idle = metrics.IdlePercent(cpu0, cpu1)
				load.HostTotalS, load.HostIdleS, load.HostStealS = cpu1.Total-cpu0.Total, cpu1.Idle-cpu0.Idle, cpu1.Steal-cpu0.Steal
				if cpu1.CPUs == cpu0.CPUs {
					// The process's and the server's CPU are read just
					// after: all over the host readings' own span.
					load.HostCPUs = cpu1.CPUs
				}
				cpu0 = cpu1
			}
		}
		if procErr == nil {
			if proc1, err := metrics.ReadProcessUsage(); err == nil {
				load.FleetS = proc1.CPUSeconds - proc0.CPUSeconds
				proc0 = proc1
			}
		}
		load.ServerS, server0 = serverCPU(f.cfg.ServerPIDs, server0)
		fmt.Fprintf(f.cfg.Out, "%s logged in %d / attempted %d / failed %d%s | clients sent %.0f msg/s %.2f Mbit/s | clients received %.0f msg/s %.2f Mbit/s | latency p99 %s | lag p99 %s | fleet host cpu idle %.0f%%%s\n",
			time.Since(f.started).Round(time.Second), now.LoggedIn, now.LoginAttempts, now.LoginsFailed,
			progressReasons(" / disconnected", f.stats.disconn.snapshot()),
			float64(now.MessagesSent-last.MessagesSent)/dt, mbit(now.BytesSent-last.BytesSent, dt),
			float64(now.MessagesReceived-last.MessagesReceived)/dt, mbit(now.BytesReceived-last.BytesReceived, dt),
			p99Text(latP99, latN), p99Text(lagP99, lagN), idle, f.rampProgress(now.LoginAttempts))
		if kind, msg := judgeLoad(load); kind != "" && cpuErr == nil && procErr == nil {
			f.saturated(kind, msg)
		} else if cpuErr != nil || procErr != nil {
			f.checkSaturation(time.Duration(lagP99)*time.Microsecond, lagN, idle)
		}
		last, lastAt = now, time.Now()
	}
}

// serverCPU reads the CPU seconds of the server processes pids and
// returns what they used since prev (the last reading, by pid) and this
// reading. A process that could not be read now or before counts 0: its
// CPU then passes for other work, as in the report when the server's
// /metrics is missing.
func serverCPU(pids []int, prev map[int]float64) (used float64, now map[int]float64) {
	if len(pids) == 0 {
		return 0, nil
	}
	now = make(map[int]float64, len(pids))
	for _, pid := range pids {
		s, err := metrics.ReadProcessCPU(pid)
		if err != nil {
			continue
		}
		now[pid] = s
		if p, ok := prev[pid]; ok && s >= p {
			used += s - p
		}
	}
	return used, now
}

// progressReasons renders counts by reason after label, largest first
// ("" when there are none): " / disconnected 12 (slow_consumer 10, reset 2)".
func progressReasons(label string, m map[string]int64) string {
	var total int64
	keys := make([]string, 0, len(m))
	for k, v := range m {
		total += v
		keys = append(keys, k)
	}
	if total == 0 {
		return ""
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d (", label, total)
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, m[k])
	}
	b.WriteString(")")
	return b.String()
}

// p99Text is a window's p99 (µs) for the progress line: "-" without a
// sample (no stamped delivery came back, or nothing was sent), never 0.
func p99Text(us, n int64) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f ms", float64(us)/1000)
}

func mbit(bytes int64, sec float64) float64 { return float64(bytes) * 8 / 1e6 / sec }

// checkSaturation warns, without /proc to tell the fleet's own CPU from
// the host's, when the fleet cannot keep its schedule or its host has no
// CPU left; it cannot say which is the cause.
func (f *Fleet) checkSaturation(lagP99 time.Duration, lagN int64, idle float64) {
	if lagN > 0 && lagP99 > maxLagP99 {
		f.saturated(loadLag, fmt.Sprintf("WARNING: the fleet is behind its schedule (send lag p99 %v > %v; its own CPU unknown: /proc unreadable): results may understate the server", lagP99.Round(10*time.Microsecond), maxLagP99))
	}
	if idle >= 0 && idle < minIdlePct {
		f.saturated(loadHostBusy, fmt.Sprintf("WARNING: the fleet host's CPU is %.0f%% idle (< %.0f%%; the fleet's own share unknown: /proc unreadable): the figures may be unreliable", idle, minIdlePct))
	}
}

// saturated prints the first saturation warning of each kind and counts
// the rest: repeated every progress interval it would bury the progress
// lines (each shows the lag and CPU idle anyway). The summary says how
// often it recurred.
func (f *Fleet) saturated(kind, msg string) {
	f.warnMu.Lock()
	if f.satCount == nil {
		f.satCount, f.satFirst = map[string]int{}, map[string]string{}
	}
	first := f.satCount[kind] == 0
	if first {
		f.satFirst[kind] = msg
	}
	f.satCount[kind]++
	f.warnMu.Unlock()
	if first {
		fmt.Fprintln(f.cfg.Out, msg+" (said once; the summary counts the intervals)")
	}
}

// saturationWarnings are the summary's lines for the saturation warnings;
// f.warnMu must be held.
func (f *Fleet) saturationWarnings() []string {
	var out []string
	for _, kind := range []string{loadFleet, loadHostBusy, loadLag} {
		if n := f.satCount[kind]; n > 0 {
			out = append(out, fmt.Sprintf("%s (first of %d progress intervals with this warning)", f.satFirst[kind], n))
		}
	}
	return out
}

// loops sums the loop passes completed by every client.
func (f *Fleet) loops() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loopsDone + f.loopsLive()
}
