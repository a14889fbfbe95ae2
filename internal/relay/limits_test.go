package relay

import (
	"net"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/wire"
)

const ms = int64(time.Millisecond)

// TestLimiterAllow: the buckets let a burst through at once, then the
// rate; a frame over either limit charges neither bucket.
func TestLimiterAllow(t *testing.T) {
	type step struct {
		at   int64 // ms
		size int
		want string
	}
	tests := []struct {
		name         string
		msgs, bytes  gcra
		steps        []step
		wantMsgsTATs int64 // ms, after the steps
	}{
		{"burst of 3 then refill at 10/s", newGCRA(10, 3), gcra{}, []step{
			{0, 1, ""}, {0, 1, ""}, {0, 1, ""}, {0, 1, limitMessages},
			{99, 1, limitMessages}, {100, 1, ""}, {100, 1, limitMessages},
		}, 400},
		{"bytes: 1000/s, bucket 500", gcra{}, newGCRA(1000, 500), []step{
			{0, 400, ""}, {0, 200, limitBytes}, {100, 200, ""}, {100, 1, limitBytes},
		}, 0},
		{"over bytes charges no message", newGCRA(10, 2), newGCRA(1000, 100), []step{
			{0, 200, limitBytes}, {0, 10, ""}, {0, 10, ""}, {0, 10, limitMessages},
		}, 200},
		{"no limits", gcra{}, gcra{}, []step{{0, 1 << 20, ""}, {0, 1 << 20, ""}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l limiter
			for i, s := range tt.steps {
				if got := l.allow(s.at*ms, s.size, tt.msgs, tt.bytes); got != s.want {
					t.Fatalf("step %d (%d ms, %d bytes): %q, want %q", i, s.at, s.size, got, s.want)
				}
			}
			if tt.msgs.per > 0 && l.msgs != tt.wantMsgsTATs*ms {
				t.Errorf("message bucket at %d ms, want %d", l.msgs/ms, tt.wantMsgsTATs)
			}
		})
	}
}

// TestLimiterDropped: a run of drops lasts while no second passes without
// one.
func TestLimiterDropped(t *testing.T) {
	var l limiter
	for _, tt := range []struct {
		at   int64 // ms
		want time.Duration
	}{
		{1000, 0}, {1500, 500 * time.Millisecond}, {2400, 1400 * time.Millisecond},
		{3401, 0}, // more than a second after the last drop: a new run
		{3500, 99 * time.Millisecond},
	} {
		if got := l.dropped(tt.at * ms); got != tt.want {
			t.Fatalf("dropped at %d ms: over for %v, want %v", tt.at, got, tt.want)
		}
	}
}

func TestLogLimiter(t *testing.T) {
	l := logLimiter{every: 1000 * ms}
	got := []bool{l.allow(1), l.allow(2), l.allow(999 * ms), l.allow(1001 * ms), l.allow(1002 * ms)}
	want := []bool{true, false, false, true, false}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("allow #%d = %v, want %v (all %v)", i, got[i], want[i], got)
		}
	}
	if n := l.suppressed(); n != 3 {
		t.Fatalf("suppressed %d, want 3", n)
	}
	if n := l.suppressed(); n != 0 {
		t.Fatalf("suppressed after reset %d, want 0", n)
	}
}

// TestLiveness: the idle bound follows the client's heartbeat interval
// once two intervals are known, within [minLiveness, IdleTimeout].
func TestLiveness(t *testing.T) {
	tests := []struct {
		name  string
		beats []int64 // ms
		want  time.Duration
	}{
		{"no heartbeat", nil, 180 * time.Second},
		{"one interval is not enough", []int64{0, 3000}, 180 * time.Second},
		{"3 s heartbeats", []int64{0, 3000, 6000}, 9 * time.Second},
		{"longest of the last four", []int64{0, 3000, 7000, 10000, 13000}, 12 * time.Second},
		{"longest ages out", []int64{0, 5000, 8000, 11000, 14000, 17000}, 9 * time.Second},
		{"at least minLiveness", []int64{0, 100, 200, 300}, minLiveness},
		{"at most the idle timeout", []int64{0, 100_000, 200_000}, 180 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{cfg: Config{IdleTimeout: 180 * time.Second, HeartbeatMisses: 3}}
			c := &client{s: s}
			for _, at := range tt.beats {
				c.beat(at*ms + 1) // the relay clock is never 0 at a heartbeat
			}
			if got := c.idleBound(); got != tt.want {
				t.Fatalf("idle bound %v, want %v", got, tt.want)
			}
		})
	}
}

// TestHandleDoesNotAllocate: the rate limits on the hot path cost no
// allocation, whether a frame passes or is dropped.
func TestHandleDoesNotAllocate(t *testing.T) {
	s, cs := castRoom(t, 32)
	s.log = zap.NewNop()
	s.cfg.RateLimitGrace = time.Hour
	s.rateMsgs, s.rateBytes = newGCRA(100, 10), newGCRA(1<<20, 1<<20)
	s.abuseLog.every = int64(time.Second)
	f := wire.Frame{Type: wire.TypeSend, Mode: wire.Othercast, HasTrace: true, Trace: 1, Payload: make([]byte, 200), Size: 220}
	sender := cs[0]
	var spare []*chunk
	for _, tt := range []struct {
		name string
		step int64 // relay clock advance per frame
	}{{"under the limit", 20 * ms}, {"over the limit", 0}} {
		for i := 0; i < 10; i++ {
			sender.b.now += tt.step
			sender.handle(&f, 0)
			sender.b.pcd = sender.b.pcd[:0]
			spare = drain(cs, spare)
		}
		allocs := testing.AllocsPerRun(200, func() {
			sender.b.now += tt.step
			sender.handle(&f, 0)
			sender.b.pcd = sender.b.pcd[:0]
			spare = drain(cs, spare)
		})
		if raceEnabled {
			t.Skip("allocation counts are meaningless under -race (sync.Pool drops items)")
		}
		if allocs > 0.05 {
			t.Errorf("%s: %.2f allocations per frame, want 0", tt.name, allocs)
		}
	}
	if sender.b.limitedMsgs == 0 || sender.b.queued == 0 {
		t.Errorf("limited %d, queued %d: want both", sender.b.limitedMsgs, sender.b.queued)
	}
}

// BenchmarkHandleCast is one send through handle (the rate limits, then
// the fan-out to 31 recipients), with the limits on (far from their
// bounds, as for a real client) and off: the limits' cost per delivery.
func BenchmarkHandleCast(b *testing.B) {
	for _, limits := range []bool{false, true} {
		name := "limits=off"
		if limits {
			name = "limits=on"
		}
		b.Run(name, func(b *testing.B) {
			s, cs := castRoom(b, 32)
			s.log = zap.NewNop()
			s.cfg.RateLimitGrace = time.Hour
			s.abuseLog.every = int64(time.Second)
			if limits {
				s.rateMsgs, s.rateBytes = newGCRA(250, 500), newGCRA(64<<10, 128<<10)
			}
			f := wire.Frame{Type: wire.TypeSend, Mode: wire.Othercast, HasTrace: true, Trace: 1, Payload: make([]byte, 200), Size: 220}
			var spare []*chunk
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				c := cs[i%32]
				c.b.now += int64(time.Second) // each sender well under its limits
				c.handle(&f, 0)
				c.b.pcd = c.b.pcd[:0]
				if i%16 == 15 {
					spare = drain(cs, spare)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/31, "ns/delivery")
		})
	}
}

// TestArrivalsSpreadAStarvedRead: 300 frames a sender sent at 150 a second
// over 2 s, read at once by a reader the scheduler ran late, pass a limit
// of 250 a second with a burst of 100 when charged by arrival (spread over
// the second before the read, maxSpread), where charged at the read's time
// they would look like a burst of 300; and a sender silent for a minute
// gains at most maxSpread of credit.
func TestArrivalsSpreadAStarvedRead(t *testing.T) {
	msgs := newGCRA(250, 100)
	charge := func(now int64, frames, size int, a *arrivals) (passed int) {
		var l limiter
		l.msgs = now - int64(time.Minute) // idle for long: a full bucket
		a.read(now, frames*size, 0)
		for range frames {
			if l.allow(a.next(size), size, msgs, gcra{}) == "" {
				passed++
			}
		}
		return passed
	}
	now := int64(time.Hour)
	starved := arrivals{last: now - 2*int64(time.Second)}
	if got := charge(now, 300, 20, &starved); got != 300 {
		t.Errorf("a starved read of 300 frames: %d passed, want all", got)
	}
	atOnce := arrivals{last: now}
	if got := charge(now, 300, 20, &atOnce); got != 100 {
		t.Errorf("300 frames sent at once: %d passed, want the burst of 100", got)
	}
	idle := arrivals{last: now - int64(time.Minute)}
	if got := charge(now, 1000, 20, &idle); got > 100+250+1 {
		t.Errorf("after a minute's silence, 1000 frames at once: %d passed, want at most the burst and a second's rate", got)
	}
}

// TestBytesWaiting: a TCP client with bytes in its socket's receive queue
// is not idle, however long ago its loop last read (a starved relay reads
// late); once read, it is judged by its last activity again. A UDP session
// has no socket of its own: never.
func TestBytesWaiting(t *testing.T) {
	peer, conn := tcpPair(t)
	f, err := conn.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := &client{tc: &tcpConn{fd: int(f.Fd())}}
	if c.bytesWaiting() {
		t.Fatal("bytes waiting before any was sent")
	}
	if _, err := peer.Write(wire.AppendHeartbeat(nil, 1)); err != nil {
		t.Fatal(err)
	}
	// Loopback queues the bytes during the write; poll in case a busy
	// host's softirq runs it later.
	deadline := time.Now().Add(5 * time.Second)
	for !c.bytesWaiting() {
		if time.Now().After(deadline) {
			t.Fatal("a sent heartbeat never showed as waiting")
		}
		time.Sleep(time.Millisecond)
	}
	buf := make([]byte, 64)
	if _, err := f.Read(buf); err != nil {
		t.Fatal(err)
	}
	if c.bytesWaiting() {
		t.Error("bytes waiting after they were read")
	}
	if (&client{}).bytesWaiting() {
		t.Error("a UDP session has bytes waiting")
	}
}
