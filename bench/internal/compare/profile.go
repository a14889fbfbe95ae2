package compare

import (
	"context"
	"io"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/reprise-harness/reprise/bench/internal/proc"
)

// profiler returns an OnRun hook that records the relay with perf (kernel
// and user stacks, so syscalls, copies, locks and GC all show) for the
// window of the first run of workload. The relay is profiled from outside
// because it needs no profiling endpoint for it, and perf sees the kernel
// side of every write, which pprof cannot.
func profiler(out, workload string, log io.Writer) func(context.Context, *proc.Server, Workload, time.Duration) {
	var once sync.Once
	return func(ctx context.Context, srv *proc.Server, w Workload, window time.Duration) {
		if srv.Name != "reprise" || w.Name != workload {
			return
		}
		once.Do(func() {
			secs := strconv.FormatFloat(window.Seconds()*0.8, 'f', 1, 64)
			cmd := exec.CommandContext(ctx, "perf", "record", "-F", "499", "-g", "-p", strconv.Itoa(srv.Pid()), "-o", out, "--", "sleep", secs)
			if b, err := cmd.CombinedOutput(); err != nil {
				logf(log, "profile: perf record: %v: %s", err, b)
				return
			}
			logf(log, "profile: wrote %s (perf report -i %s --no-children)", out, out)
		})
	}
}
