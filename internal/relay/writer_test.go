package relay

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	rclient "github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestHoldBackoff: holds that gather nothing make the writer stop holding
// for a number of wake-ups that doubles while holds keep missing (up to
// maxSkip), and a hold that gathers something resets it.
func TestHoldBackoff(t *testing.T) {
	const d = int64(time.Millisecond)
	var o outbound
	o.max = 1 << 20
	o.appendFrame([]byte("queued"))
	w := writer{last: -1 << 62}
	now := int64(0)
	// held reports whether one wake-up held (and scores the hold).
	held := func() bool {
		now += 100 * d
		if !w.startHold(&o, now, d) {
			return false
		}
		w.endHold(&o)
		return true
	}
	want := minSkip
	for round := 0; round < 8; round++ {
		for i := 0; i < holdMisses; i++ {
			if !held() {
				t.Fatalf("round %d: miss %d did not hold", round, i)
			}
		}
		if w.skip != want {
			t.Fatalf("round %d: skip %d after %d misses, want %d", round, w.skip, holdMisses, want)
		}
		for i := 0; i < want; i++ {
			if held() {
				t.Fatalf("round %d: wake-up %d of %d held", round, i, want)
			}
		}
		want = min(2*want, maxSkip)
	}
	// A hold during which bytes arrive is a hit: the backoff starts over.
	if !w.startHold(&o, now, d) {
		t.Fatal("no hold after the backoff")
	}
	o.appendFrame([]byte("more"))
	w.endHold(&o)
	if w.next != minSkip || w.misses != 0 {
		t.Fatalf("after a hit: next %d misses %d, want %d and 0", w.next, w.misses, minSkip)
	}
	// A hold that gathers nothing right after a write is a burst's tail:
	// no miss.
	w.skip, w.misses = 0, 0
	for i := 0; i < 2*holdMisses; i++ {
		now += 100 * d
		w.last = now - d
		if w.startHold(&o, now, d) {
			w.endHold(&o)
		}
	}
	if w.skip != 0 || w.misses != 0 {
		t.Fatalf("tails counted as misses: skip %d misses %d", w.skip, w.misses)
	}
	// Nor is one that gathers nothing with several frames queued (a late
	// wake-up after a whole burst arrived): the queue holds three now.
	w.last = -1 << 62
	for i := 0; i < 2*holdMisses; i++ {
		if held() != true {
			t.Fatal("a late wake-up did not hold")
		}
	}
	if w.skip != 0 || w.misses != 0 {
		t.Fatalf("late wake-ups counted as misses: skip %d misses %d", w.skip, w.misses)
	}
	// Nothing queued, or a queue over coalesceBytes: no hold at all; nor
	// with no coalescing configured.
	for _, pending := range []int64{0, coalesceBytes} {
		o.queued = pending + o.released.Load()
		if w.startHold(&o, now, d) {
			t.Errorf("pending %d: held", pending)
		}
	}
	o.queued = 10 + o.released.Load()
	if w.startHold(&o, now, 0) {
		t.Error("held with no coalescing")
	}
}

// TestWriteDeadlineAfterIdle: the write deadline is armed lazily (at most
// every WriteTimeout/8), so a connection that wrote nothing for several
// write timeouts has a deadline in the past; its next writes must re-arm
// it and succeed, not fail as a slow consumer.
func TestWriteDeadlineAfterIdle(t *testing.T) {
	defer goleak.VerifyNone(t)
	const wt = 80 * time.Millisecond
	s, stop := startServer(t, Config{WriteTimeout: wt, WriteCoalesce: 200 * time.Microsecond})
	defer stop()
	a, b := joinConn(t, s, "a"), joinConn(t, s, "b")
	defer a.Close()
	defer b.Close()
	a.SetDeadline(time.Now().Add(5 * time.Second))
	b.SetDeadline(time.Now().Add(5 * time.Second))
	for i, idle := range []time.Duration{0, wt / 8, wt / 4, wt, 3 * wt, wt / 2} {
		time.Sleep(idle)
		if err := a.Send(wire.Send{Mode: wire.Othercast, Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		f, err := b.RecvType(wire.TypeDeliver)
		if err != nil {
			t.Fatalf("after %v idle: %v", idle, err)
		}
		if f.Payload[0] != byte(i) {
			t.Fatalf("message %d: payload %d", i, f.Payload[0])
		}
	}
	if got := testutil.ToFloat64(s.m.SlowConsumers); got != 0 {
		t.Errorf("%v slow consumers", got)
	}
}

// TestWriteTimeoutSlowConsumer: a member that stops reading, with a queue
// cap too big to be reached, is disconnected by the write timeout about
// WriteTimeout after the write to it began to wait, while its room keeps
// getting everything.
//
// The wait is the relay's own measure (the slow consumer log line's
// "blocked"), not the time since the flood began: when a write first finds
// the member's socket buffers full depends on how fast the flood runs and
// how far the kernel grew the relay's send buffer (2.3 s into a 3.3 s
// flood on a loaded host, where the bound from the flood's start failed).
func TestWriteTimeoutSlowConsumer(t *testing.T) {
	defer goleak.VerifyNone(t)
	const wt = 300 * time.Millisecond
	logs := observeLog()
	// The sender floods on purpose: no rate limits.
	s, stop := startServerLog(t, Config{WriteTimeout: wt, MaxPending: 256 << 20, WriteCoalesce: 200 * time.Microsecond, RateMessages: -1, RateBytes: -1}, logs.log)
	defer stop()
	sender, healthy := joinConn(t, s, "sender"), joinConn(t, s, "healthy")
	defer sender.Close()
	defer healthy.Close()
	nc, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc.(*net.TCPConn).SetReadBuffer(4096)
	slow := rclient.New(nc)
	defer slow.Close()
	slow.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := slow.Join("r", "slow", nil); err != nil {
		t.Fatal(err)
	}
	const total = 2000 // 8 MB: far more than the slow member's socket buffers hold
	got := make(chan int, 1)
	healthy.SetDeadline(time.Now().Add(30 * time.Second))
	go func() {
		n := 0
		for {
			f, err := healthy.Recv()
			if err != nil {
				got <- n
				return
			}
			if f.Type == wire.TypeDeliver {
				if n++; n == total {
					got <- n
					return
				}
			}
		}
	}()
	payload := make([]byte, 4000)
	const n = total
	// The flood's own deadline, not the join's 5 s: 8 MB of sends with
	// their pauses took longer than that on a loaded host (2 runs in 266).
	sender.SetDeadline(time.Now().Add(30 * time.Second))
	late := startLateness()
	defer late.stop()
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := sender.Send(wire.Send{Mode: wire.Othercast, Payload: payload}); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			time.Sleep(time.Millisecond)
		}
	}
	cut := logs.wait(writeTimeoutCut, 3*time.Second)
	lag := late.stop()
	if len(cut) != 1 {
		t.Fatalf("%d write timeout cuts %v after the flood began (slow consumers %v); want 1", len(cut), time.Since(start), testutil.ToFloat64(s.m.SlowConsumers))
	}
	// The deadline is armed at most wt/8 before a write; the cut comes
	// when the writer runs after it passed, which is as late as this
	// process's timers ran (up to 0.33 s at load 20, where the cut always
	// came within that of wt, in 122 runs).
	f := cut[0].ContextMap()
	blocked, _ := f["blocked"].(time.Duration)
	if most := wt + lag + wt/4; f["user"] != "slow" || blocked < wt*7/8 || blocked > most {
		t.Errorf("cut %v after the flood began: user %v, its write blocked %v; want slow, %v to %v (timers ran up to %v late)",
			cut[0].Time.Sub(start), f["user"], blocked, wt*7/8, most, lag)
	}
	if got := testutil.ToFloat64(s.m.SlowConsumers); got != 1 {
		t.Errorf("%v slow consumers, want 1", got)
	}
	// The healthy member gets every deliver; on a loaded machine reading
	// 8 MB may take a while (it once took over a second at load 36).
	if m := <-got; m != n {
		t.Errorf("healthy member got %d of %d delivers", m, n)
	}
}

// lateness measures how late this process's timers run: the most a
// 1 ms sleep overslept, from startLateness until stop.
type lateness struct {
	once sync.Once
	quit chan struct{}
	done chan struct{}
	most time.Duration // the probe's until done
}

func startLateness() *lateness {
	l := &lateness{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		for {
			select {
			case <-l.quit:
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			l.most = max(l.most, time.Since(t0)-time.Millisecond)
		}
	}()
	return l
}

// stop ends the measure (again: a no-op) and returns the most a sleep
// overslept.
func (l *lateness) stop() time.Duration {
	l.once.Do(func() { close(l.quit); <-l.done })
	return l.most
}

// writeTimeoutCut is the relay's log message for a slow consumer cut by
// the write timeout.
const writeTimeoutCut = "slow consumer: write over --write-timeout"

// testLog is a relay log kept in memory for a test to read.
type testLog struct {
	log  *zap.Logger
	logs *observer.ObservedLogs
}

func observeLog() testLog {
	core, logs := observer.New(zap.InfoLevel)
	return testLog{log: zap.New(core), logs: logs}
}

// wait returns the entries logged with msg once there is one, or when
// within has passed.
func (l testLog) wait(msg string, within time.Duration) []observer.LoggedEntry {
	end := time.Now().Add(within)
	for {
		e := l.logs.FilterMessage(msg).All()
		if len(e) > 0 || time.Now().After(end) {
			return e
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func joinConn(t *testing.T, s *Server, user string) *rclient.Conn {
	t.Helper()
	c, err := rclient.Dial(context.Background(), s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Join("r", user, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

// tcpPair is a connected loopback TCP pair: the dialling side and the
// accepted side, both closed at the test's end.
func tcpPair(t *testing.T) (peer, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	accepted, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { accepted.Close() })
	return peer, accepted
}

// TestWriteDoesNotAllocate: a loop's writev of queued chunks to a real
// loopback connection allocates nothing in the steady state.
func TestWriteDoesNotAllocate(t *testing.T) {
	peer, nc := tcpPair(t)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	f, err := nc.(*net.TCPConn).File() // a blocking duplicate: every write is whole
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &Server{cfg: Config{WriteTimeout: time.Second}}
	s.m = newTestMetrics(t)
	lp := &loop{s: s}
	c := &client{s: s, tc: &tcpConn{fd: int(f.Fd()), lp: lp}}
	c.out.max = 1 << 20
	frame := make([]byte, 220)
	round := func() {
		for i := 0; i < 31; i++ {
			c.out.appendFrame(frame)
		}
		q, _, _ := c.out.take(c.tc.w.spare)
		c.tc.inflight, c.tc.off = q, 0
		if err := lp.writeOut(c); err != nil {
			t.Fatal(err)
		}
		if len(c.tc.inflight) > 0 {
			t.Fatal("a blocking write left bytes unwritten")
		}
	}
	for i := 0; i < 10; i++ {
		round()
	}
	allocs := testing.AllocsPerRun(200, round)
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
	}
	if allocs > 0.1 {
		t.Errorf("%.2f allocations per write of 31 frames, want 0", allocs)
	}
}

func newTestMetrics(t *testing.T) *metrics.Relay {
	t.Helper()
	m, err := metrics.NewRelay(prometheus.NewRegistry(), func() int { return 0 }, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	return m
}
