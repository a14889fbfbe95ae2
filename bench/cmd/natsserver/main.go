// Command natsserver runs an embedded nats-server as its own process, so
// benchcompare can measure its CPU and RSS from /proc exactly as it measures
// the reprise relay. It is a benchmark fixture, not a way to run NATS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "natsserver:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("natsserver", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:4222", "host:port to listen on (loopback only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	host, portStr, err := net.SplitHostPort(*addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %w", *addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("--addr %q: port: %w", *addr, err)
	}
	// Defaults everywhere else (max pending, write deadline, max
	// connections): the comparison is against nats-server as shipped.
	opts := &server.Options{
		Host:                  host,
		Port:                  port,
		NoLog:                 true,
		NoSigs:                true,
		DisableShortFirstPing: true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("new server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return errors.New("not ready for connections within 10s")
	}
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}
