package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/relay"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestMain checks that no goroutine of the client or the relay outlives
// the tests (the relay is stopped by each test's cleanup).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startRelay runs an in-process relay on free 127.0.0.1 ports until the
// test ends.
func startRelay(t *testing.T) *relay.Server {
	t.Helper()
	s, err := relay.New(relay.Config{Listen: "127.0.0.1:0", UDP: relay.UDPSameAsTCP}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	return s
}

// TestClient drives the client against a real relay over each transport:
// join, a broadcast that comes back to the sender, a heartbeat reply, a
// duplicate join refused as a *ServerError, and leave.
func TestClient(t *testing.T) {
	s := startRelay(t)
	dials := []struct {
		name string
		dial func(context.Context, string) (*client.Conn, error)
		addr string
	}{
		{"tcp", client.Dial, s.Addr().String()},
		{"udp", client.DialUDP, s.UDPAddr().String()},
	}
	for _, d := range dials {
		t.Run(d.name, func(t *testing.T) {
			ctx := context.Background()
			a, err := d.dial(ctx, d.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			a.SetDeadline(time.Now().Add(5 * time.Second))
			j, err := a.Join("room-"+d.name, "alice", nil)
			if err != nil {
				t.Fatal(err)
			}
			if j.Owner != "alice" || len(j.Members) != 1 {
				t.Fatalf("joined %+v", j)
			}
			if d.name == "udp" && a.Token() == 0 {
				t.Fatal("no UDP session token")
			}
			if err := a.Send(wire.Send{Mode: wire.Broadcast, HasTrace: true, Trace: 42, Payload: []byte("hi")}); err != nil {
				t.Fatal(err)
			}
			f, err := a.RecvType(wire.TypeDeliver)
			if err != nil {
				t.Fatal(err)
			}
			if string(f.User) != "alice" || string(f.Payload) != "hi" || f.Trace != 42 {
				t.Fatalf("deliver %q %q %d", f.User, f.Payload, f.Trace)
			}
			if err := a.Heartbeat(7); err != nil {
				t.Fatal(err)
			}
			if f, err = a.RecvType(wire.TypeHeartbeatReply); err != nil || f.Timestamp != 7 {
				t.Fatalf("heartbeat reply %v, %v", f, err)
			}

			b, err := d.dial(ctx, d.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			b.SetDeadline(time.Now().Add(5 * time.Second))
			// A join with alice's id from a new connection takes her place
			// (a reconnect); the old connection is told it was replaced.
			if _, err := b.Join("room-"+d.name, "alice", nil); err != nil {
				t.Fatalf("rejoin from a new connection: %v", err)
			}
			if d.name == "udp" {
				a.Heartbeat(8) // the relay ends a replaced session at its next datagram
			}
			_, err = a.RecvType(wire.TypeHeartbeatReply)
			var serr *client.ServerError
			if !errors.As(err, &serr) || serr.Code != wire.ErrReplaced {
				t.Fatalf("old connection after the rejoin: %v, want %s", err, wire.ErrReplaced)
			}
			if err := b.Leave(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return s.Members() == 0 })
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatal("condition not met within 5 s")
}
