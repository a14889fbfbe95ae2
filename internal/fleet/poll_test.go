package fleet

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pollPeer is one socket read by a poller in TestPoller: the bytes its
// handle saw, and a handle that says stop once stopAt bytes came.
type pollPeer struct {
	snd    net.Conn
	c      *client
	r      *streamReader
	got    []byte
	stopAt int
	e      *polled
}

func newPollPeer(t *testing.T, p *poller, stopAt int) *pollPeer {
	snd, conn, rc := tcpPair(t)
	pp := &pollPeer{snd: snd, c: &client{conn: conn, raw: rc}, stopAt: stopAt}
	pp.r = newStreamReader(conn, rc, func(b []byte) bool {
		pp.got = append(pp.got, b...)
		return pp.stopAt == 0 || len(pp.got) < pp.stopAt
	})
	pp.r.polled = true
	e, ok := p.add(pp.c, pp.r)
	if !ok {
		t.Fatal("the poller refused an open socket")
	}
	pp.e = e
	return pp
}

// TestPoller: one poller reads many sockets edge-triggered, each to the
// byte and in order whatever the sizes and timing of the writes (bytes
// that come while it reads another socket, or while it is about to
// park, wake it again); gives a socket back to its goroutine on request,
// which then reads on with its deadline; ends a socket whose peer closed
// with EOF, and one whose handle said stop with nil.
func TestPoller(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.run(); close(done) }()
	defer func() { p.stop(); <-done }()

	const peers = 12
	var pp []*pollPeer
	for i := range peers {
		stopAt := 0
		if i == 0 {
			stopAt = 50000 // peer 0's handle says stop there (of 100,000 bytes)
		}
		pp = append(pp, newPollPeer(t, p, stopAt))
	}
	want := make([][]byte, peers)
	rng := rand.New(rand.NewPCG(34, 1))
	// Rounds of writes of 1 byte to 40 KiB (past a read buffer's 16 KiB,
	// so a socket needs several reads and turns), with pauses that let
	// the poller park between them.
	for round := range 60 {
		for i, x := range pp {
			if i == 0 || rng.IntN(3) == 0 {
				continue
			}
			n := 1 + rng.IntN(40<<10)
			if rng.IntN(4) != 0 {
				n = 1 + rng.IntN(64)
			}
			b := make([]byte, n)
			for k := range b {
				b[k] = byte(round*31 + i + k)
			}
			want[i] = append(want[i], b...)
			if _, err := x.snd.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		if round%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	// Peer 0's handle stops half-way through its bytes; peer 1's sender
	// closes; peer 2 is asked back, then gets more bytes, read by its
	// goroutine.
	for k := range 10 {
		b := bytes.Repeat([]byte{byte(k)}, 10000)
		want[0] = append(want[0], b...)
		pp[0].snd.Write(b)
	}
	pp[1].snd.Close()
	checkEnd := func(x *pollPeer, want error) {
		t.Helper()
		select {
		case err := <-x.e.back:
			if err != want {
				t.Errorf("ended with %v, want %v", err, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the poller never gave the socket back")
		}
	}
	checkEnd(pp[0], nil)
	checkEnd(pp[1], io.EOF)
	if !bytes.Equal(pp[1].got, want[1]) {
		t.Errorf("peer 1 got %d bytes, want %d (or different ones)", len(pp[1].got), len(want[1]))
	}
	if len(pp[0].got) < pp[0].stopAt || !bytes.Equal(pp[0].got, want[0][:len(pp[0].got)]) {
		t.Errorf("peer 0 got %d bytes, want at least %d of its %d", len(pp[0].got), pp[0].stopAt, len(want[0]))
	}
	p.giveBack(pp[2].e)
	checkEnd(pp[2], errResume)
	pp[2].r.polled = false
	pp[2].snd.Write([]byte("after"))
	want[2] = append(want[2], "after"...)
	pp[2].c.conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if err := pp[2].r.run(); !isTimeout(err) || len(pp[2].got) != len(want[2]) {
		t.Fatalf("peer 2 read on by its goroutine: %v after %d of %d bytes", err, len(pp[2].got), len(want[2]))
	}
	// The others: every byte, in order, and nothing more; then each
	// ends with EOF once its sender closes.
	for i := 3; i < peers; i++ {
		pp[i].snd.Close()
		checkEnd(pp[i], io.EOF)
		if !bytes.Equal(pp[i].got, want[i]) {
			t.Errorf("peer %d got %d bytes, want %d (or different ones)", i, len(pp[i].got), len(want[i]))
		}
	}
	if !bytes.Equal(pp[2].got, want[2]) {
		t.Errorf("peer 2 got %d bytes, want %d (or different ones)", len(pp[2].got), len(want[2]))
	}
	if n := p.handed.Load(); n != peers {
		t.Errorf("%d sockets handed over, want %d", n, peers)
	}
	if len(p.free) != peers {
		t.Errorf("%d free slots after every socket ended, want %d", len(p.free), peers)
	}
}

// TestPollerClosedSocket: a socket closed before it is handed over is
// refused (its goroutine reads on and sees the close).
func TestPollerClosedSocket(t *testing.T) {
	p, err := newPoller()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.run(); close(done) }()
	defer func() { p.stop(); <-done }()
	_, conn, rc := tcpPair(t)
	conn.Close()
	r := newStreamReader(conn, rc, func([]byte) bool { return true })
	if _, ok := p.add(&client{conn: conn, raw: rc}, r); ok {
		t.Fatal("a closed socket was handed over")
	}
	if err := r.run(); err == nil || err == errYield {
		t.Errorf("reading the closed socket: %v", err)
	}
}

// TestFleetPolled: a fleet's logged-in TCP clients are read by their
// schedulers' pollers, with every delivery counted and none lost, and
// leave at the end through their goroutines (the run ends).
func TestFleetPolled(t *testing.T) {
	c := testConfig(t)
	c.Clients = 6
	c.Loop = "100ms,300ms"
	c.Duration = time.Second
	f, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if handed := pollerHanded(f); handed != 6 {
		t.Errorf("%d clients handed to the pollers, want 6", handed)
	}
	if d := s.Deliveries; s.LoginsSucceeded != 6 || d.Expected != 5*s.MessagesSent || d.Received != d.Expected || d.Lost != 0 {
		t.Errorf("logins %d, deliveries %+v for %d sent", s.LoginsSucceeded, d, s.MessagesSent)
	}
}

// pollerHanded is how many clients f's pollers were handed, -1 when a
// scheduler had none.
func pollerHanded(f *Fleet) int64 {
	var n int64
	for _, sh := range f.scheds {
		if sh.poll == nil {
			return -1
		}
		n += sh.poll.handed.Load()
	}
	return n
}

// BenchmarkReadPath is the user-space and runtime cost of the reads
// themselves: each round writes one 1 KiB chunk to each of 64 sockets
// and waits until all of it was read, by a goroutine per socket parked
// in the runtime's netpoller, or by one poller. Under cachegrind
// (instructions per round, load-independent) it shows the park and wake
// a read costs a goroutine.
func BenchmarkReadPath(b *testing.B) {
	const socks, chunk = 64, 1 << 10
	for _, mode := range []string{"goroutines", "poller"} {
		b.Run(mode, func(b *testing.B) {
			var got atomic.Int64
			var want atomic.Int64
			round := make(chan struct{}, 1)
			handle := func(p []byte) bool {
				if got.Add(int64(len(p))) == want.Load() {
					round <- struct{}{}
				}
				return true
			}
			var p *poller
			if mode == "poller" {
				var err error
				if p, err = newPoller(); err != nil {
					b.Fatal(err)
				}
				go p.run()
				defer p.stop()
			}
			var snds []net.Conn
			var wg sync.WaitGroup
			for range socks {
				snd, conn, rc := tcpPair(b)
				snds = append(snds, snd)
				r := newStreamReader(conn, rc, handle)
				if p != nil {
					r.polled = true
					e, ok := p.add(&client{conn: conn, raw: rc}, r)
					if !ok {
						b.Fatal("refused")
					}
					wg.Go(func() { <-e.back })
				} else {
					wg.Go(func() { r.run() })
				}
			}
			buf := make([]byte, chunk)
			b.ResetTimer()
			for i := range b.N {
				want.Store(int64(i+1) * socks * chunk)
				for _, s := range snds {
					s.Write(buf)
				}
				<-round
			}
			b.StopTimer()
			for _, s := range snds {
				s.Close()
			}
			wg.Wait()
		})
	}
}
