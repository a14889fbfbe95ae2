package compare

import (
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/reprise-harness/reprise/bench/internal/proc"
)

// profiler returns an OnRun hook that, during the window of the first run
// of workload on each server, records the server with perf (kernel and user
// stacks: syscalls, copies, locks and GC all show) into
// <prefix>-<server>.perf.data and counts its syscalls and context switches
// into <prefix>-<server>.stat. Servers are profiled from outside, so
// neither needs a profiling endpoint, and perf sees the kernel side of
// every write, which pprof cannot.
func profiler(prefix, workload string, log io.Writer) func(context.Context, *proc.Server, Workload, time.Duration) {
	var mu sync.Mutex
	done := map[string]bool{}
	return func(ctx context.Context, srv *proc.Server, w Workload, window time.Duration) {
		mu.Lock()
		first := w.Name == workload && !done[srv.Name]
		done[srv.Name] = true
		mu.Unlock()
		if !first {
			return
		}
		pid := strconv.Itoa(srv.Pid())
		secs := strconv.FormatFloat(window.Seconds()*0.8, 'f', 1, 64)
		base := prefix + "-" + srv.Name
		rec := exec.CommandContext(ctx, "perf", "record", "-F", "499", "-g", "-p", pid, "-o", base+".perf.data", "--", "sleep", secs)
		stat := exec.CommandContext(ctx, "perf", "stat", "-x,", "-o", base+".stat", "-p", pid,
			"-e", "syscalls:sys_enter_writev,syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_futex,syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_nanosleep,context-switches",
			"--", "sleep", secs)
		var wg sync.WaitGroup
		for _, c := range []*exec.Cmd{rec, stat} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if b, err := c.CombinedOutput(); err != nil {
					logf(log, "profile %s: %s: %v: %s", srv.Name, c.Args[1], err, b)
				}
			}()
		}
		wg.Wait()
		if _, err := os.Stat(base + ".perf.data"); err == nil {
			logf(log, "profile %s: %s.perf.data and %s.stat (%s s)", srv.Name, base, base, secs)
		}
	}
}
