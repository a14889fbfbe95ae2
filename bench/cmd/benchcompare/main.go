// Command benchcompare runs the same room workloads against reprise's relay
// and an embedded nats-server, each as its own process, alternating A B A B,
// and prints the medians side by side (ratio reprise/NATS) and as JSON.
// See docs/performance.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/reprise-harness/reprise/bench/internal/compare"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := compare.Main(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}
