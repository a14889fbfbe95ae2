package relay

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	rclient "github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestUDPOpenDatagramAcrossWorkers: two workers deliver to one client into
// its one open datagram. It leaves as soon as another frame like the last
// would not fit (through the worker that filled it), or once its first
// frame has waited the hold (through the worker that opened it, or any
// worker at shutdown); a worker's listing of a datagram another sent is
// dropped. The client gets every frame, in order, in as few datagrams, and
// each delivery is counted once, when sent.
func TestUDPOpenDatagramAcrossWorkers(t *testing.T) {
	const hold = time.Microsecond // 1000 on the relay clock
	s, stop := startServer(t, Config{UDP: UDPSameAsTCP, UDPWorkers: 1, UDPCoalesce: 300, UDPHold: hold})
	defer stop()
	socks, err := listenUDP(mustUDPAddr(t, "127.0.0.1:0"), 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	var u [2]*udpServer
	for i := range u {
		defer socks[i].Close()
		if u[i], err = newUDPServer(s, socks[i]); err != nil {
			t.Fatal(err)
		}
	}
	rcv, err := net.ListenUDP("udp", mustUDPAddr(t, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	c := &client{s: s, addr: rcv.LocalAddr().(*net.UDPAddr).AddrPort()}
	var want [][]byte
	pack := func(w int, at int64) { // a 100-byte deliver through worker w, queued at at
		k := len(want)
		f := wire.AppendDeliver(nil, wire.Othercast, "bob", true, int64(k), bytes.Repeat([]byte{byte(k)}, 100-wire.DeliverSize("bob", true, 0)))
		if len(f) != 100 {
			t.Fatalf("frame of %d bytes", len(f))
		}
		u[w].pack(c, f, at)
		want = append(want, f)
	}
	d0, f0 := testutil.ToFloat64(s.m.UDPDatagrams), testutil.ToFloat64(s.m.DeliveredMessages)
	sent := func(step string, dgrams, delivered float64) {
		t.Helper()
		u[0].sendAll()
		u[1].sendAll()
		if d, f := testutil.ToFloat64(s.m.UDPDatagrams)-d0, testutil.ToFloat64(s.m.DeliveredMessages)-f0; d != dgrams || f != delivered {
			t.Fatalf("%s: %v datagrams, %v deliveries sent in all; want %v, %v", step, d, f, dgrams, delivered)
		}
	}

	pack(0, 0)
	pack(1, 100)
	u[0].due(500, false)
	u[1].due(500, false)
	sent("young, with room", 0, 0)
	if u[0].nextDue != 1000 || u[1].nextDue != 0 {
		t.Fatalf("due at %d and %d, want 1000 (the opener) and 0", u[0].nextDue, u[1].nextDue)
	}
	pack(1, 600) // 300 bytes: another would not fit
	sent("full", 1, 3)
	u[0].due(700, false)
	if len(u[0].opened) != 0 || u[0].nextDue != 0 {
		t.Fatalf("worker 0 still lists %d datagrams (due %d) after worker 1 sent its one", len(u[0].opened), u[0].nextDue)
	}
	pack(0, 800)
	u[0].due(1700, false)
	sent("not yet due", 1, 3)
	u[0].due(1800, false)
	sent("due", 2, 4)
	pack(1, 2000)
	u[1].due(2001, true)
	sent("shutdown", 3, 5)

	got, dgrams := readFrames(t, rcv, len(want), 300)
	if dgrams != 3 {
		t.Errorf("%d datagrams, want 3", dgrams)
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("frame %d: %x, want %x", i, got[i], want[i])
		}
	}
}

// TestUDPRoomAcrossWorkers: a room of UDP clients spread over two workers,
// each member sending in bursts, as a tick of a game does: every member
// gets every other's frames, each sender's in order, the relay counts
// each delivery once, and the datagrams carry several deliveries each.
func TestUDPRoomAcrossWorkers(t *testing.T) {
	s, stop := startServer(t, Config{UDP: UDPSameAsTCP, UDPWorkers: 2, UDPHold: 5 * time.Millisecond})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const members, rounds = 12, 20
	var cs []*rclient.Conn
	for i := range members {
		cs = append(cs, joinUDP(ctx, t, s, "tick", fmt.Sprintf("m%02d", i)))
	}
	time.Sleep(50 * time.Millisecond) // the member notices are out: count from here
	d0, f0 := testutil.ToFloat64(s.m.UDPDatagrams), testutil.ToFloat64(s.m.DeliveredMessages)
	errs := make(chan error, members)
	for i, c := range cs {
		go func() { // each member reads its deliveries: each sender's in order
			next := map[string]int{}
			c.SetDeadline(time.Now().Add(20 * time.Second))
			for got := 0; got < (members-1)*rounds; {
				f, err := c.Recv()
				if err != nil {
					errs <- fmt.Errorf("member %d after %d deliveries: %w", i, got, err)
					return
				}
				if f.Type != wire.TypeDeliver {
					continue
				}
				from, seq := string(f.User), int(f.Payload[0])
				if seq != next[from] {
					errs <- fmt.Errorf("member %d: frame %d from %s, want %d", i, seq, from, next[from])
					return
				}
				next[from]++
				got++
			}
			errs <- nil
		}()
	}
	for r := range rounds {
		for _, c := range cs {
			if err := c.Send(wire.Send{Mode: wire.Othercast, Payload: []byte{byte(r), 'p', 'o', 's', 'e'}}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	for range members {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	want := float64(members * (members - 1) * rounds)
	deadline := time.Now().Add(5 * time.Second) // the counter follows the last sendmmsg
	for testutil.ToFloat64(s.m.DeliveredMessages)-f0 != want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	dgrams, delivered := testutil.ToFloat64(s.m.UDPDatagrams)-d0, testutil.ToFloat64(s.m.DeliveredMessages)-f0
	t.Logf("%v deliveries in %v datagrams (%.1f each)", delivered, dgrams, delivered/dgrams)
	if delivered != want {
		t.Fatalf("relay counted %v deliveries, the members got %v", delivered, want)
	}
	if dgrams >= delivered/2 {
		t.Fatalf("%v deliveries in %v datagrams: bursts of %d senders were not packed", delivered, dgrams, members)
	}
}

// TestUDPOrderAcrossTransports: a UDP member gets a room's frames in the
// order the relay received them (docs/protocol.md), whichever transport
// their senders use: a TCP member's frame does not overtake a UDP
// member's one that still waits in the receiver's open datagram.
func TestUDPOrderAcrossTransports(t *testing.T) {
	s, stop := startServer(t, Config{UDP: UDPSameAsTCP, UDPWorkers: 1, UDPHold: 300 * time.Millisecond})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := joinUDP(ctx, t, s, "mix", "m")
	u := joinUDP(ctx, t, s, "mix", "u")
	tc, err := rclient.Dial(ctx, s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if _, err := tc.Join("mix", "tc", nil); err != nil {
		t.Fatal(err)
	}
	m.SetDeadline(time.Now().Add(10 * time.Second))
	for _, who := range []string{"u", "tc"} { // the joins, in their order too
		f, err := m.RecvType(wire.TypeMemberJoined)
		if err != nil {
			t.Fatal(err)
		}
		if string(f.User) != who {
			t.Fatalf("member_joined %s, want %s first", f.User, who)
		}
	}
	if err := u.Send(wire.Send{Mode: wire.Othercast, Payload: []byte("first")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // handled, and held in m's open datagram
	if err := tc.Send(wire.Send{Mode: wire.Othercast, Payload: []byte("second")}); err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"u", "tc"} {
		f, err := m.RecvType(wire.TypeDeliver)
		if err != nil {
			t.Fatal(err)
		}
		if string(f.User) != who {
			t.Fatalf("deliver from %s (%q), want %s's first", f.User, f.Payload, who)
		}
	}
}
