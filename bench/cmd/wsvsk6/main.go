// Command wsvsk6 sets the fleet (bin/replay) beside k6 on one WebSocket
// room workload against bench/cmd/wsroom, each tool its own process on
// 127.0.0.1, and prints the ratios `make bench-fleet` reports
// (docs/performance.md, "The fleet beside k6"). It is a benchmark driver,
// not a test: the counts it checks against the server are a sanity check.
//
// Method:
//   - wsroom runs as its own process; its scripted client (200 B text
//     messages at 20 Hz for 10 s) is recorded through `record proxy`: the
//     capture the fleet replays (profile bench/wsroom.yaml). k6 runs
//     bench/k6/wsroom.js, the same workload written for k6.
//   - Load: ROOMS × ROOM_SIZE clients (10 × 20), every one sending 200 B
//     at 20 Hz for --duration, the server casting each message to the
//     room's 19 others (N:N). --reps pairs, the order alternating (fleet
//     first in odd reps) so a busy host hurts both alike.
//   - CPU: user+system seconds of the tool's process from the kernel
//     (rusage at its exit: the same utime/stime as /proc/PID/stat), per
//     million messages the tool itself counted as received. p99: the
//     tool's own latency figure. Offered fraction: received over
//     clients × rate × duration × (room size − 1).
//   - Idle memory: the tool holds N receive-only clients (the server's
//     connection count says when all are in, then 3 s more), VmRSS read
//     from /proc; the same with 1 client; per client is the difference
//     over N − 1.
//
// Without k6 on PATH (or --k6) the k6 half is skipped with one line.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, context.Canceled) {
			err = errors.New("interrupted")
		}
		fmt.Fprintln(os.Stderr, "wsvsk6:", err)
		os.Exit(1)
	}
}
