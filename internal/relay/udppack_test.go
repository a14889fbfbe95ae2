package relay

import (
	"bytes"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

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
