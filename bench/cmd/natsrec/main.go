// Command natsrec is a real NATS client (nats.go) whose session
// cmd/replay's tests record through `record proxy`: it connects with its
// user id as the connection name, subscribes to ROOM, publishes N
// messages 50 ms apart (each ending in 19 zeros, where a replay puts its
// decimal latency stamp), and closes. It is a test fixture, not a tool.
//
//	natsrec -port 4222 -user rec-user-01 -room lobby -n 20
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "natsrec:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("natsrec", flag.ContinueOnError)
	port := fs.Int("port", 4222, "the server's port on 127.0.0.1")
	user := fs.String("user", "rec-user-01", "connection name: the user id")
	room := fs.String("room", "lobby", "subject to subscribe and publish to")
	n := fs.Int("n", 20, "messages to publish")
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", *port), nats.Name(*user), nats.NoReconnect(), nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	got := make(chan struct{}, *n)
	if _, err := nc.Subscribe(*room, func(*nats.Msg) { got <- struct{}{} }); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	for i := 0; i < *n; i++ {
		if err := nc.Publish(*room, fmt.Appendf(nil, "hello %d from %s 0000000000000000000", i, *user)); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	// Its own messages come back (no_echo is off): wait for them, so the
	// recording holds deliveries too.
	for i := 0; i < *n; i++ {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			return fmt.Errorf("only %d of %d messages came back", i, *n)
		}
	}
	return nil
}
