package relay

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.uber.org/goleak"

	rclient "github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestNoGoroutinePerConnection: the relay serves its TCP connections from
// its event loops, with no goroutine of their own (the Go runtime keeps
// every goroutine structure for good: two per connection left a 10,000
// connection flood's RSS at 3x idle), and they are all served: every
// member gets the others' joins and a send, in order. No member keeps
// the scratch its join's member list took.
func TestNoGoroutinePerConnection(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, stop := startServer(t, Config{})
	defer stop()
	before := runtime.NumGoroutine()
	const n = 200
	conns := make([]*rclient.Conn, 0, n)
	for i := range n {
		conns = append(conns, joinConn(t, s, fmt.Sprintf("u%03d", i)))
	}
	// Not none more: the runtime starts some of its own on demand
	// (5 here), but nothing near one a connection.
	if got := runtime.NumGoroutine() - before; got >= n/4 {
		t.Errorf("%d goroutines more with %d connections", got, n)
	}
	// Nor any join's member list: each member's scratch is back to small
	// (dropJoinScratch). The shard's lock orders this after every join.
	sh := s.rooms.Shard("r")
	sh.Lock()
	for _, m := range sh.Room("r").Members() {
		if b := &m.Value.b; cap(b.names) > keepNames || cap(b.enc) > keepEnc {
			t.Errorf("%s keeps a join's scratch: %d names, %d bytes", m.ID, cap(b.names), cap(b.enc))
		}
	}
	sh.Unlock()
	if err := conns[0].Send(wire.Send{Mode: wire.Othercast, Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	for i, c := range conns[1:] {
		c.SetDeadline(time.Now().Add(20 * time.Second))
		// member_joined of everyone after it, then the deliver.
		for j := i + 2; j < n; j++ {
			f, err := c.Recv()
			if err != nil || f.Type != wire.TypeMemberJoined || string(f.User) != fmt.Sprintf("u%03d", j) {
				t.Fatalf("u%03d: want member_joined u%03d, got %v %v", i+1, j, f, err)
			}
		}
		f, err := c.Recv()
		if err != nil || f.Type != wire.TypeDeliver || string(f.Payload) != "hi" {
			t.Fatalf("u%03d: want the deliver, got %v %v", i+1, f, err)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Connections() != 0 || s.Members() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections, %d members after all closed", s.Connections(), s.Members())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
