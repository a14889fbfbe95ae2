// Command wsroom is a small WebSocket room server for benchmarks, and the
// scripted client whose recording the fleet replays. It is a fixture for
// `make bench-fleet` (the fleet and k6 side by side) and for the test
// that keeps it honest (cmd/replay's TestWSRoomServer), not a chat server.
//
//	wsroom [--listen 127.0.0.1:0] [--tls-cert C --tls-key K]   serve (wss:// with a certificate) until SIGINT/SIGTERM
//	wsroom client --url ws://HOST:PORT/ws?room=lobby&user=alice01 [--size 200 --rate 20 --duration 10s]
//
// A client joins a room by its URL (/room/NAME or ?room=NAME; "lobby"
// else) and gets one text message, {"type":"joined",...}. Every data
// message it sends afterwards goes to the room's other members, as sent
// (same opcode, same bytes). The server counts messages in (received
// from clients) and out (written to a member's socket) and serves them
// at /stats (JSON) and /metrics (Prometheus text), so a test can set the
// load tool's counts beside the server's own.
//
// The WebSocket code is gorilla/websocket's: the fleet's own WebSocket
// client meets an implementation nobody here wrote.
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
	var err error
	if len(os.Args) > 1 && os.Args[1] == "client" {
		err = runClient(ctx, os.Args[2:], os.Stdout)
	} else {
		err = runServer(ctx, os.Args[1:], os.Stdout)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "wsroom:", err)
		os.Exit(1)
	}
}
