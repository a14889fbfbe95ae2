package relay

import (
	"errors"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Read and write bounds.
const (
	maxReadBuf   = 64 << 10 // a loop's read buffer: the most one read takes
	readsPerTurn = 8        // reads of one connection before the loop serves the others
	// turnDeliveries also ends a connection's turn: a sender into a room
	// of 1,000 queues that many deliveries from a few KB, and eight
	// 64 KiB reads of it held its loop (and every join waiting on it) for
	// seconds on a starved host.
	turnDeliveries = 16 << 10
	maxIOVecsOut   = 1024 // chunks per writev; the kernel's IOV_MAX
	// throttlePause is how long a connection is not read after a read in
	// which its sender went over its rate limit.
	throttlePause = 100 * time.Millisecond
)

// tcpConn is a TCP client's connection, served by its loop (loop.go).
// Everything but the atomics is its loop's alone.
type tcpConn struct {
	fd int
	lp *loop
	// readDeadline (relay clock, 0: none) ends reading: the linger after
	// an error frame; aborted cuts the connection at once (memory budget).
	// Both are set from any goroutine, which then posts c to lp.
	readDeadline atomic.Int64
	aborted      atomic.Bool

	slot    int32 // in lp.slots; -1 until registered
	marked  bool  // in lp.next
	timerAt int64 // c's live timer entry; 0: none

	// Reading.
	p          wire.Parser
	arr        arrivals
	readable   bool  // an event said so and no read found it empty since
	pauseUntil int64 // not read before (throttled, or draining after a refusal)
	broken     bool  // a protocol error was answered: input is drained, not read
	readDone   bool

	// Writing.
	writable   bool
	inflight   []*chunk // taken from the queue, not written yet
	off        int      // bytes of inflight[0] written
	delivers   int      // deliver frames in inflight
	writeStart int64    // when inflight's first write began
	holdUntil  int64    // a coalescing hold ends; 0: none
	w          writer
	writeDone  bool
	dead       bool
}

func newTCPClient(s *Server, fd int, lp *loop) *client {
	c := &client{
		s:  s,
		id: s.nextID.Add(1),
		tc: &tcpConn{fd: fd, lp: lp, slot: -1},
	}
	c.tc.p = wire.Parser{MaxFrame: s.cfg.MaxFrame, FromClient: true}
	c.b.lp = lp
	c.out.max = s.cfg.MaxPending
	c.out.mem, c.out.id = &s.mem, c.id
	now := s.now()
	c.unjoinedSince.Store(now)
	c.lastActive.Store(now)
	c.tc.arr.last = now
	c.tc.w.last = -1 << 62 // no write yet: long ago
	return c
}

// signal has c's loop write c's queue (or see it closing).
func (c *client) signal() {
	if lp := c.tc.lp; lp != nil {
		lp.post(c)
	}
}

// signalFrom is signal from a batch flushed on loop from (nil: not a
// loop): a connection of that same loop is marked without a wake-up.
func (c *client) signalFrom(from *loop) {
	if lp := c.tc.lp; lp != nil && lp == from {
		lp.mark(c)
	} else {
		c.signal()
	}
}

// setReadDeadline makes c's loop stop reading it after d.
func (c *client) setReadDeadline(d time.Duration) {
	c.tc.readDeadline.Store(max(c.s.now()+int64(d), 1))
	c.signal()
}

// service does what c is due for: reading, ending the reading, writing,
// and the teardown once both are done.
func (lp *loop) service(c *client, now int64) {
	t := c.tc
	if t.dead || t.slot < 0 {
		return
	}
	if t.aborted.Load() {
		lp.kill(c)
		return
	}
	if !t.readDone {
		if rd := t.readDeadline.Load(); rd != 0 && now >= rd {
			lp.stopReading(c)
		} else if t.readable && now >= t.pauseUntil {
			lp.read(c)
		}
	}
	if !t.writeDone {
		lp.write(c, now)
	}
	if t.readDone && t.writeDone {
		lp.finalize(c)
		return
	}
	lp.schedule(c, t.due(c.s.cfg.WriteTimeout))
}

// due is the earliest time c waits for, 0 if none.
func (t *tcpConn) due(wt time.Duration) int64 {
	var at int64
	early := func(x int64) {
		if x != 0 && (at == 0 || x < at) {
			at = x
		}
	}
	if !t.readDone {
		early(t.readDeadline.Load())
		if t.readable {
			early(t.pauseUntil)
		}
	}
	if !t.writeDone {
		early(t.holdUntil)
		if len(t.inflight) > 0 {
			early(t.writeStart + int64(wt))
		}
	}
	return at
}

// read reads c until the socket is empty, it is paused, or it had its
// turn (then it goes on next round).
func (lp *loop) read(c *client) {
	t := c.tc
	queued := 0
	for i := 0; i < readsPerTurn && queued < turnDeliveries; i++ {
		n, err := unix.Read(t.fd, lp.buf)
		if n > 0 {
			queued += lp.got(c, n)
			if t.readDone || t.pauseUntil > c.s.now() {
				return
			}
			continue
		}
		switch {
		case errors.Is(err, unix.EAGAIN):
			t.readable = false
			return
		case errors.Is(err, unix.EINTR):
			continue
		}
		lp.stopReading(c) // EOF or an error
		return
	}
	lp.mark(c)
}

// got handles n bytes read from c and says how many deliveries they
// queued.
func (lp *loop) got(c *client, n int) int {
	s, t := c.s, c.tc
	if !t.broken && c.out.isClosing() {
		t.broken = true
	}
	if t.broken {
		// Draining input until the linger ends so the peer gets our
		// last frame: slowly, or a flooder cut off would have the relay
		// read and discard gigabytes at loopback speed meanwhile.
		t.pauseUntil = s.now() + int64(throttlePause)
		return 0
	}
	now := s.now()
	c.b.now = now
	t.arr.read(now, n, t.p.Buffered())
	c.b.recvBytes += n
	lp.cur = c
	if ferr := t.p.Feed(lp.buf[:n], lp.handleFn); ferr != nil {
		t.broken = true
		c.refuse(ferr)
	}
	lp.cur = nil
	// Liveness counts whole frames: a trickle of bytes that never
	// completes one keeps nothing alive (the frame timeout ends it).
	if c.b.frames > 0 {
		c.lastActive.Store(now)
	}
	c.trackPartial(now, t.p.PartialStart(), t.p.Buffered(), t.p.Held())
	limited := c.b.limitedMsgs+c.b.limitedBytes > 0
	queued := c.b.queued
	c.b.flush(s.m)
	if limited && !t.broken {
		// Throttle: a sender over its limit is not read for a while, so
		// TCP's flow control slows it down instead of the relay spending
		// a core to read and drop its flood.
		t.pauseUntil = now + int64(throttlePause)
	}
	return queued
}

// stopReading ends c's reading: it leaves its room, and its queue closes
// once what is queued is written (bounded by the write timeout).
func (lp *loop) stopReading(c *client) {
	t := c.tc
	t.readDone = true
	t.readable = false
	c.dropPartial()
	c.leave()
	c.b.flush(c.s.m)
	c.out.closeWith(nil, CloseClosed)
}

// kill ends c at once: nothing more is read or written.
func (lp *loop) kill(c *client) {
	t := c.tc
	if !t.readDone {
		lp.stopReading(c)
	}
	t.writeDone = true
	lp.finalize(c)
}

// finalize closes c's socket and counts the disconnect.
func (lp *loop) finalize(c *client) {
	s, t := c.s, c.tc
	t.dead = true
	c.out.fail(CloseClosed) // drops what is queued, if anything; keeps the reason
	lp.release(c, len(t.inflight))
	unix.Close(t.fd)
	if t.slot >= 0 {
		lp.slots[t.slot] = nil
		lp.free = append(lp.free, t.slot)
		lp.n--
		if lp.n == 0 && cap(lp.slots) > 1024 {
			lp.slots, lp.gens, lp.free = nil, nil, nil // a flood's slots are not kept
		}
	}
	t.w.spare = nil
	if c.refused {
		return
	}
	_, reason := c.out.state()
	s.removeClient(c)
	s.srcs.disconnect(c.src)
	s.nconns.Add(-1)
	s.m.ConnectionsTCP.Dec()
	s.disconnected(reason)
	s.log.Debug("disconnected", zap.Uint64("conn", c.id), zap.Stringer("reason", reason))
}

// write writes c's queue: after a coalescing hold, every queued chunk in
// one writev; a write the socket cannot take whole waits for EPOLLOUT, and
// one that waited Config.WriteTimeout makes c a slow consumer.
func (lp *loop) write(c *client, now int64) {
	t := c.tc
	if len(t.inflight) > 0 {
		if blocked := now - t.writeStart; blocked >= int64(c.s.cfg.WriteTimeout) {
			lp.writeFailed(c, nil, time.Duration(blocked))
			return
		}
		if !t.writable {
			return
		}
		if err := lp.writeOut(c); err != nil {
			lp.writeFailed(c, err, 0)
			return
		}
		if len(t.inflight) > 0 {
			return
		}
	}
	if t.holdUntil != 0 {
		if now < t.holdUntil {
			return
		}
		t.holdUntil = 0
		t.w.endHold(&c.out)
	} else if d := c.s.cfg.WriteCoalesce; t.w.startHold(&c.out, now, int64(d)) {
		t.holdUntil = now + int64(d)
		return
	}
	for {
		q, delivers, closing := c.out.take(t.w.spare)
		if len(q) == 0 {
			t.w.spare = q
			if closing {
				unix.Shutdown(t.fd, unix.SHUT_WR)
				t.writeDone = true
			}
			return
		}
		t.inflight, t.off, t.delivers = q, 0, delivers
		t.writeStart, t.w.last = now, now
		c.s.m.Writes.Inc()
		if err := lp.writeOut(c); err != nil {
			lp.writeFailed(c, err, 0)
			return
		}
		if len(t.inflight) > 0 || !closing {
			// Blocked: EPOLLOUT or the write timeout goes on. Or
			// anything queued during the write flagged a new wake-up:
			// wait for it (and hold) rather than write its head at once.
			return
		}
	}
}

// writeOut writes inflight with writev until it is all written or the
// socket is full.
func (lp *loop) writeOut(c *client) error {
	t := c.tc
	for len(t.inflight) > 0 {
		iov := lp.iov[:0]
		for i, ch := range t.inflight[:min(len(t.inflight), maxIOVecsOut)] {
			b := ch.b
			if i == 0 {
				b = b[t.off:]
			}
			v := unix.Iovec{Base: unsafe.SliceData(b)}
			v.SetLen(len(b))
			iov = append(iov, v)
		}
		lp.iov = iov
		r, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(t.fd), uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
		clear(iov)
		switch e {
		case 0:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			t.writable = false
			return nil
		default:
			return e
		}
		n := int(r)
		c.out.written(n)
		c.s.m.SentBytes.Add(float64(n))
		done := 0
		for _, ch := range t.inflight {
			rest := len(ch.b) - t.off
			if n < rest {
				t.off += n
				break
			}
			n -= rest
			t.off = 0
			done++
		}
		lp.release(c, done)
	}
	if t.delivers > 0 {
		c.s.m.DeliveredMessages.Add(float64(t.delivers))
		t.delivers = 0
	}
	return nil
}

// release returns inflight's first k chunks (written, or dropped) to the
// pool.
func (lp *loop) release(c *client, k int) {
	t := c.tc
	if k == 0 {
		return
	}
	for i, ch := range t.inflight[:k] {
		putChunk(ch)
		t.inflight[i] = nil
	}
	c.out.chunks(-k)
	if k == len(t.inflight) {
		t.w.spare = t.inflight[:0]
		t.inflight = nil
		return
	}
	t.inflight = t.inflight[k:]
}

// writeFailed ends c after a failed write (err) or one blocked over the
// write timeout (err nil): that is a slow consumer, anything else a closed
// peer.
func (lp *loop) writeFailed(c *client, err error, blocked time.Duration) {
	t := c.tc
	reason := CloseClosed
	if err == nil {
		reason = closeFor(wire.ErrSlowConsumer)
	}
	if first := c.out.fail(reason); first && err == nil {
		c.s.m.SlowConsumers.Inc()
		c.s.log.Info("slow consumer: write over --write-timeout", zap.Uint64("conn", c.id),
			zap.String("user", c.user), zap.Duration("write_timeout", c.s.cfg.WriteTimeout), zap.Duration("blocked", blocked))
	}
	lp.release(c, len(t.inflight))
	t.writeDone = true
	if !t.readDone {
		lp.stopReading(c)
	}
}

// arrivals estimates when each frame of a read arrived, so that the rate
// limits charge frames by arrival, not by read: a reader the scheduler ran
// late reads at once what its sender sent over that while, and charged at
// the read's time it would look like a burst (53,847 frames of honest
// rooms were dropped so at host load 25-30). The bytes of a read arrived
// after the previous read returned and before this one did; a frame is
// taken to have arrived at its last byte's share of that span, as if the
// bytes came evenly. The span is at most maxSpread: a sender silent for a
// minute that then sends at once gets at most that much credit over its
// burst, not a minute's.
type arrivals struct {
	last       int64 // when the previous read returned
	start, end int64 // the span of this read's arrivals
	n, off     int   // bytes read; bytes of it its frames have ended at so far (from -held)
}

// maxSpread bounds the span a read's frames are spread over.
const maxSpread = int64(time.Second)

// read starts a read of n bytes at now, held of them before it (the
// partial frame the parser kept from earlier reads).
func (a *arrivals) read(now int64, n, held int) {
	a.start, a.end = max(a.last, now-maxSpread), now
	a.n, a.off = n, -held
	a.last = now
}

// next is the arrival of the next frame of the read, size bytes long.
func (a *arrivals) next(size int) int64 {
	a.off += size
	if a.off >= a.n || a.n <= 0 {
		return a.end
	}
	return a.start + (a.end-a.start)*int64(max(a.off, 0))/int64(a.n)
}

// refuse answers a protocol error with its error frame and closes c.
func (c *client) refuse(err error) {
	var werr *wire.Error
	if !errors.As(err, &werr) {
		c.s.log.Error("read loop", zap.Uint64("conn", c.id), zap.Error(err))
		c.close(wire.ErrMalformed, "internal error")
		return
	}
	switch werr.Code {
	case wire.ErrMalformed, wire.ErrOversized, wire.ErrUnknownType, wire.ErrBadName, wire.ErrBadVersion, wire.ErrBadTarget:
		if werr.Snippet != nil { // from the decoder, not counted yet
			c.s.reject(rejectFor(werr.Code))
		}
	}
	c.s.log.Debug("refused", zap.Uint64("conn", c.id), zap.String("code", werr.Code.String()), zap.String("detail", werr.Detail))
	c.close(werr.Code, werr.Detail)
}

// Coalescing: a connection woken to write with less than coalesceBytes
// queued waits Config.WriteCoalesce (d) before its loop takes the queue, so
// that the rest of a burst (the other members of a room sending in the same
// tick, read by any loop) joins the same writev. (Extending the hold while
// the burst was still arriving, in steps of d/4, bought no fewer writes
// with the bench's clients and cost a timer wake-up per write.)
//
// A hold that gathers nothing when a single frame was queued and the
// connection's last write was more than isolated ago is a miss: the
// connection gets messages one at a time (a receiver in a 1 → N room).
// After holdMisses misses in a row the writer writes at once for the next
// skip wake-ups, starting at minSkip and doubling up to maxSkip while holds
// keep missing, so such a connection does not pay the delay and a timer
// wake-up for nothing, and probes seldom enough that its p99 does not see
// the probes. Other holds that gather nothing are not misses: shortly
// after a write it is the tail of a burst that outlasted the hold, and with
// several frames queued the writer was woken late, after the burst had
// arrived (a busy machine); counting either as a miss turned coalescing
// off for a third of the wake-ups of the connections that need it.
const (
	coalesceBytes = 32 << 10
	holdMisses    = 4
	minSkip       = 16
	maxSkip       = 512
	isolated      = 4 // × d since the last write
)

// writer is a connection's coalescing record.
type writer struct {
	spare  []*chunk
	misses int
	skip   int   // wake-ups left to write without holding
	next   int   // the skip after the next miss streak
	last   int64 // when the last write started (relay clock)
	start  int64 // when the hold began
	before int64 // the pending bytes then
	d      int64
}

// startHold reports whether a wake-up at now holds for d before writing
// (see coalesceBytes).
func (w *writer) startHold(o *outbound, now, d int64) bool {
	if d <= 0 {
		return false
	}
	if w.skip > 0 {
		w.skip--
		return false
	}
	before, _ := o.backlog()
	if before == 0 || before >= coalesceBytes {
		return false // a stale wake-up, or enough to write already
	}
	w.start, w.before, w.d = now, before, d
	return true
}

// endHold scores the hold that startHold began: a hit or a miss.
func (w *writer) endHold(o *outbound) {
	if after, frames := o.backlog(); after == w.before {
		if w.start-w.last < isolated*w.d || frames > 1 {
			return // the tail of a burst, or a burst that was all there
		}
		if w.misses++; w.misses >= holdMisses {
			w.skip = max(w.next, minSkip)
			w.misses, w.next = 0, min(2*w.skip, maxSkip)
		}
		return
	}
	w.misses, w.next = 0, minSkip
}
