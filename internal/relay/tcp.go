package relay

import (
	"errors"
	"net"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Read buffer bounds: a connection starts with a small buffer (idle
// connections are the common case), doubles it while reads fill it, and
// halves it after a run of short reads.
const (
	minReadBuf   = 512
	maxReadBuf   = 64 << 10
	shrinkAfter  = 8
	maxIOVecsOut = 1024 // chunks per writev; the kernel's IOV_MAX
	// throttlePause is how long a reader stops reading after a read in
	// which its sender went over its rate limit.
	throttlePause = 100 * time.Millisecond
)

func newTCPClient(s *Server, nc *net.TCPConn) *client {
	c := &client{
		s:          s,
		id:         s.nextID.Add(1),
		tcp:        nc,
		wake:       make(chan struct{}, 1),
		writerDone: make(chan struct{}),
	}
	c.out.max = s.cfg.MaxPending
	c.out.mem, c.out.id = &s.mem, c.id
	now := s.now()
	c.unjoinedSince.Store(now)
	c.lastActive.Store(now)
	return c
}

// serve runs c's reader on this goroutine and its writer on another, and
// tears c down when the reader is done.
func (c *client) serve() {
	if !c.s.goFn(c.writeLoop) {
		close(c.writerDone)
		c.out.fail(closeFor(wire.ErrShuttingDown))
	}
	c.readLoop()
	c.finish()
}

func (c *client) readLoop() {
	s := c.s
	p := wire.Parser{MaxFrame: s.cfg.MaxFrame, FromClient: true}
	defer c.dropPartial()
	var arr arrivals
	handle := func(f *wire.Frame) error {
		c.b.now = arr.next(f.Size)
		if werr := c.handle(f, 0); werr != nil {
			return werr
		}
		return nil
	}
	arr.last = s.now()
	buf := make([]byte, minReadBuf)
	short := 0
	broken := false // a protocol error was answered: ignore further input
	for {
		n, err := c.tcp.Read(buf)
		if n > 0 && !broken && c.out.isClosing() {
			broken = true
		}
		if n > 0 && broken {
			// Draining input until the linger ends so the peer gets our
			// last frame: slowly, or a flooder cut off would have the relay
			// read and discard gigabytes at loopback speed meanwhile.
			time.Sleep(throttlePause)
		}
		if n > 0 && !broken {
			now := s.now()
			c.b.now = now
			arr.read(now, n, p.Buffered())
			c.b.recvBytes += n
			if ferr := p.Feed(buf[:n], handle); ferr != nil {
				broken = true
				c.refuse(ferr)
			}
			// Liveness counts whole frames: a trickle of bytes that never
			// completes one keeps nothing alive (the frame timeout ends it).
			if c.b.frames > 0 {
				c.lastActive.Store(now)
			}
			c.trackPartial(now, p.PartialStart(), p.Buffered(), p.Held())
			limited := c.b.limitedMsgs+c.b.limitedBytes > 0
			c.b.flush(s.m)
			buf, short = resize(buf, n, short)
			if limited && !broken {
				// Throttle: a sender over its limit is not read for a
				// while, so TCP's flow control slows it down instead of
				// the relay spending a core to read and drop its flood.
				time.Sleep(throttlePause)
			}
		}
		if err != nil {
			return
		}
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

// resize grows buf after a read that filled it and shrinks it after a run
// of reads that used under a quarter of it.
func resize(buf []byte, n, short int) ([]byte, int) {
	switch {
	case n == len(buf) && len(buf) < maxReadBuf:
		return make([]byte, 2*len(buf)), 0
	case n < len(buf)/4 && len(buf) > minReadBuf:
		if short++; short >= shrinkAfter {
			return make([]byte, len(buf)/2), 0
		}
		return buf, short
	}
	return buf, 0
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

// finish tears c down after its reader stopped: it leaves its room, lets
// the writer flush what is queued (bounded by the write deadline), closes
// the socket and counts the disconnect.
func (c *client) finish() {
	s := c.s
	c.leave()
	c.b.flush(s.m)
	c.out.closeWith(nil, CloseClosed)
	c.signal() // also when the queue closed without a wake-up (slow consumer)
	<-c.writerDone
	c.tcp.Close()
	_, reason := c.out.state()
	s.removeClient(c)
	s.srcs.disconnect(c.src)
	s.nconns.Add(-1)
	s.m.ConnectionsTCP.Dec()
	s.disconnected(reason)
	s.log.Debug("disconnected", zap.Uint64("conn", c.id), zap.Stringer("reason", reason))
}

// writeLoop writes c's queue whenever woken: every queued chunk in one
// writev. It returns when the queue is closing and empty (after
// half-closing the socket) or a write fails.
func (c *client) writeLoop() {
	defer close(c.writerDone)
	w := writer{c: c, iov: make(net.Buffers, 0, 8)}
	for range c.wake {
		w.hold()
		for {
			q, delivers, closing := c.out.take(w.spare)
			if len(q) == 0 {
				w.spare = q
				if closing {
					c.tcp.CloseWrite()
					return
				}
				break
			}
			if err := w.write(q); err != nil {
				c.writeFailed(err, time.Since(w.last))
				return
			}
			if delivers > 0 {
				c.s.m.DeliveredMessages.Add(float64(delivers))
			}
			if !closing {
				// Anything queued during the write flagged a new wake-up:
				// wait for it (and hold) rather than write its head at once.
				break
			}
		}
	}
}

// Coalescing: a woken writer with less than coalesceBytes queued waits
// Config.WriteCoalesce (d) before it takes the queue, so that the rest of a
// burst (the other members of a room sending in the same tick, each on its
// own reader goroutine) joins the same writev. (Extending the hold while
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

// writer is writeLoop's state: scratch reused across writes, the
// coalescing hold's record and when the write deadline was last armed.
type writer struct {
	c      *client
	spare  []*chunk
	iov    net.Buffers
	nb     net.Buffers // what WriteTo consumes; iov keeps the backing array
	misses int
	skip   int       // wake-ups left to write without holding
	next   int       // the skip after the next miss streak
	armed  time.Time // when the deadline was last set; zero: never
	last   time.Time // when the last write started
}

// hold waits for more of a burst before a write (see coalesceBytes).
func (w *writer) hold() {
	d := w.c.s.cfg.WriteCoalesce
	if d <= 0 {
		return
	}
	if w.skip > 0 {
		w.skip--
		return
	}
	before, _ := w.c.out.backlog()
	if before == 0 || before >= coalesceBytes {
		return // a stale wake-up, or enough to write already
	}
	start := time.Now()
	time.Sleep(d)
	if after, frames := w.c.out.backlog(); after == before {
		if start.Sub(w.last) < isolated*d || frames > 1 {
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

// write sends q with one writev and returns its chunks to the pool.
func (w *writer) write(q []*chunk) error {
	c := w.c
	w.iov = w.iov[:0]
	total := 0
	for _, ch := range q {
		w.iov = append(w.iov, ch.b)
		total += len(ch.b)
	}
	now := time.Now()
	w.last = now
	w.armDeadline(now)
	// WriteTo takes a pointer that escapes: a field, not a local, so it
	// is not a heap allocation per write.
	w.nb = w.iov
	n, err := w.nb.WriteTo(c.tcp)
	for i, ch := range q {
		putChunk(ch)
		q[i] = nil
	}
	c.out.chunks(-len(q))
	w.spare = q[:0]
	clear(w.iov)
	c.out.written(total)
	c.s.m.Writes.Inc()
	if n > 0 {
		c.s.m.SentBytes.Add(float64(n))
	}
	return err
}

// armDeadline makes sure the next write has a deadline at least 7/8 of
// Config.WriteTimeout away, re-arming it at most every WriteTimeout/8
// instead of before every write (each SetWriteDeadline modifies a runtime
// timer: 3 % of the relay's CPU when it was done per write). A write that
// blocks is still cut off within WriteTimeout. The deadline of a connection
// that wrote nothing for a while has passed, and is re-armed before the
// next write, since more than WriteTimeout/8 has gone by.
func (w *writer) armDeadline(now time.Time) {
	wt := w.c.s.cfg.WriteTimeout
	if !w.armed.IsZero() && now.Sub(w.armed) < wt/8 {
		return
	}
	w.c.tcp.SetWriteDeadline(now.Add(wt))
	w.armed = now
}

// writeFailed closes c after a failed write that began blocked ago: a
// deadline overrun is a slow consumer, anything else a closed peer. The
// slow consumer's log line says how long its write waited: 7/8 of
// --write-timeout to all of it (the deadline is armed lazily), more when
// the relay was too busy to see the deadline pass in time.
func (c *client) writeFailed(err error, blocked time.Duration) {
	reason := CloseClosed
	if errors.Is(err, os.ErrDeadlineExceeded) {
		reason = closeFor(wire.ErrSlowConsumer)
	}
	if first := c.out.fail(reason); first && reason == closeFor(wire.ErrSlowConsumer) {
		c.s.m.SlowConsumers.Inc()
		c.s.log.Info("slow consumer: write over --write-timeout", zap.Uint64("conn", c.id),
			zap.String("user", c.user), zap.Duration("write_timeout", c.s.cfg.WriteTimeout), zap.Duration("blocked", blocked))
	}
	c.tcp.Close()
}
