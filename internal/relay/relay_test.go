package relay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	rclient "github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/room"
	"github.com/reprise-harness/reprise/internal/wire"
)

// startServer runs an in-process relay on 127.0.0.1 (no UDP, no metrics
// listener) until the returned stop is called.
func startServer(t testing.TB, cfg Config) (*Server, func()) {
	t.Helper()
	return startServerLog(t, cfg, nil)
}

// startServerLog is startServer with the relay's log going to log.
func startServerLog(t testing.TB, cfg Config, log *zap.Logger) (*Server, func()) {
	t.Helper()
	cfg.Listen = "127.0.0.1:0"
	if cfg.UDP == "" {
		cfg.UDP = "off"
	}
	s, err := New(cfg, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	return s, func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		})
	}
}

// TestChurn: 10,000 connect/join/leave/close cycles from parallel clients
// leave the registry empty and no goroutine behind.
func TestChurn(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, stop := startServer(t, Config{UDP: UDPSameAsTCP})
	defer stop()
	addr := s.Addr().String()
	const cycles, workers = 10_000, 32
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= cycles {
					return
				}
				if err := cycle(addr, s.UDPAddr().String(), i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Connections() != 0 || s.Rooms() != 0 || s.Members() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after churn: %d connections, %d rooms, %d members", s.Connections(), s.Rooms(), s.Members())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cycle is one client's life: connect, join, leave (or just close, or a UDP
// session every 16th), close.
func cycle(tcpAddr, udpAddr string, i int64) error {
	ctx := context.Background()
	room, user := fmt.Sprintf("room-%d", i%97), fmt.Sprintf("user-%d", i)
	var c *rclient.Conn
	var err error
	if i%16 == 15 {
		c, err = rclient.DialUDP(ctx, udpAddr)
	} else {
		c, err = rclient.Dial(ctx, tcpAddr)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Join(room, user, nil); err != nil {
		return fmt.Errorf("cycle %d: %w", i, err)
	}
	if i%3 == 0 && i%16 != 15 {
		return nil // close without leave (a UDP session would stay until its idle timeout)
	}
	return c.Leave()
}

// TestOutboundCap: the queue takes frames up to max bytes, then refuses,
// drops what it held for the slow_consumer error frame alone and stays
// closed.
func TestOutboundCap(t *testing.T) {
	o := outbound{max: 10_000}
	frame := make([]byte, 300)
	accepted := 0
	for i := 0; i < 100; i++ {
		_, ok := o.appendFrame(frame)
		if !ok {
			break
		}
		accepted++
		if o.Pending() > o.max {
			t.Fatalf("pending %d over max %d", o.Pending(), o.max)
		}
	}
	if accepted != 33 {
		t.Errorf("accepted %d frames of 300 bytes under a 10000-byte cap, want 33", accepted)
	}
	if closing, reason := o.state(); !closing || reason.String() != "slow_consumer" {
		t.Errorf("closing %v reason %v", closing, reason)
	}
	if o.Pending() != len(slowConsumerFrame) {
		t.Errorf("pending %d after drop, want the error frame's %d", o.Pending(), len(slowConsumerFrame))
	}
	if q, _, _ := o.take(nil); len(q) != 1 || string(q[0].b) != string(slowConsumerFrame) {
		t.Error("the queue after the drop is not the slow_consumer error frame alone")
	}
	if _, ok := o.appendFrame(frame); !ok {
		t.Error("closed queue reported a new overflow")
	}
}

// TestOutboundSignalOncePerFlush: only the first frame queued since the
// writer last took the queue asks for a wake-up.
func TestOutboundSignalOncePerFlush(t *testing.T) {
	o := outbound{max: 1 << 20}
	want := []bool{true, false, false}
	for i, w := range want {
		if sig, _ := o.appendFrame([]byte("abc")); sig != w {
			t.Errorf("append %d: signal %v, want %v", i, sig, w)
		}
	}
	q, _, _ := o.take(nil)
	if len(q) != 1 || string(q[0].b) != "abcabcabc" {
		t.Fatalf("took %d chunks", len(q))
	}
	if sig, _ := o.appendFrame([]byte("d")); !sig {
		t.Error("first append after take did not ask for a signal")
	}
}

// castRoom builds a room of n TCP-like clients (never written to: their
// queues are drained by hand) on a bare server.
func castRoom(t testing.TB, n int) (*Server, []*client) {
	s := &Server{cfg: Config{MaxPending: 1 << 20, MaxFrame: wire.DefaultMaxFrame}, rooms: room.NewRegistry[*client](0)}
	var cs []*client
	for i := 0; i < n; i++ {
		c := &client{s: s, tc: &tcpConn{fd: -1, slot: -1}}
		c.out.max = s.cfg.MaxPending
		sh := s.rooms.Shard("r")
		rm, err := sh.Join("r", fmt.Sprintf("user-%d", i), c)
		if err != nil {
			t.Fatal(err)
		}
		c.user, c.room, c.shard = fmt.Sprintf("user-%d", i), rm, sh
		cs = append(cs, c)
	}
	return s, cs
}

func drain(cs []*client, spare []*chunk) []*chunk {
	for _, c := range cs {
		q, _, _ := c.out.take(spare)
		n := 0
		for i, ch := range q {
			n += len(ch.b)
			putChunk(ch)
			q[i] = nil
		}
		c.out.written(n)
		spare = q[:0]
	}
	return spare
}

// TestCastDoesNotAllocate: in the steady state a send costs no allocation,
// however many recipients it has: the deliver is encoded once into reused
// scratch and copied into pooled chunks.
func TestCastDoesNotAllocate(t *testing.T) {
	_, cs := castRoom(t, 32)
	f := wire.Frame{Type: wire.TypeSend, Mode: wire.Othercast, HasTrace: true, Trace: 1, Payload: make([]byte, 200)}
	sender := cs[0]
	var spare []*chunk
	for i := 0; i < 10; i++ { // warm up scratch, pools
		sender.cast(&f)
		sender.b.pcd = sender.b.pcd[:0]
		spare = drain(cs, spare)
	}
	allocs := testing.AllocsPerRun(200, func() {
		for j := 0; j < 10; j++ {
			sender.cast(&f)
		}
		sender.b.pcd = sender.b.pcd[:0]
		spare = drain(cs, spare)
	})
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	// sync.Pool may drop chunks at a GC; allow a rare refill.
	if allocs > 0.5 {
		t.Errorf("%.2f allocations per 10 sends to 31 recipients, want 0", allocs)
	}
	if sender.b.queued == 0 {
		t.Error("nothing delivered")
	}
}

// BenchmarkCast is the fan-out of one send to 31 recipients, without
// sockets: encode once, copy into each queue, drain.
func BenchmarkCast(b *testing.B) {
	_, cs := castRoom(b, 32)
	f := wire.Frame{Type: wire.TypeSend, Mode: wire.Othercast, HasTrace: true, Trace: 1, Payload: make([]byte, 200)}
	var spare []*chunk
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		cs[i%32].cast(&f)
		cs[i%32].b.pcd = cs[i%32].b.pcd[:0]
		if i%16 == 15 {
			spare = drain(cs, spare)
		}
	}
	b.ReportMetric(float64(b.N*31)/b.Elapsed().Seconds(), "deliveries/s")
}

// BenchmarkFanOutTCP is the whole path over loopback TCP: one sender, 31
// receivers in one room, 200-byte othercasts; an op is one send delivered
// to all 31.
func BenchmarkFanOutTCP(b *testing.B) {
	s, stop := startServer(b, Config{})
	defer stop()
	addr := s.Addr().String()
	ctx := context.Background()
	const members = 32
	var conns []*rclient.Conn
	for i := 0; i < members; i++ {
		c, err := rclient.Dial(ctx, addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Join("bench", fmt.Sprintf("u%d", i), nil); err != nil {
			b.Fatal(err)
		}
		conns = append(conns, c)
	}
	// Let the join notices arrive before counting delivers.
	var wg sync.WaitGroup
	var received atomic.Int64
	ctxR, cancelR := context.WithCancel(ctx)
	for _, c := range conns[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctxR.Err() == nil {
				c.SetDeadline(time.Now().Add(200 * time.Millisecond))
				f, err := c.Recv()
				if err != nil {
					continue
				}
				if f.Type == wire.TypeDeliver {
					received.Add(1)
				}
			}
		}()
	}
	m := wire.Send{Mode: wire.Othercast, Payload: make([]byte, 200)}
	sender := conns[0]
	sender.SetDeadline(time.Time{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := sender.Send(m); err != nil {
			b.Fatal(err)
		}
		// Keep the queues bounded: wait when more than 256 sends are in flight.
		for int64(i-256)*(members-1) > received.Load() {
			time.Sleep(50 * time.Microsecond)
		}
	}
	want := int64(b.N) * (members - 1)
	for deadline := time.Now().Add(10 * time.Second); received.Load() < want && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	cancelR()
	wg.Wait()
	if received.Load() != want {
		b.Fatalf("received %d of %d deliveries", received.Load(), want)
	}
	b.ReportMetric(float64(want)/b.Elapsed().Seconds(), "deliveries/s")
}
