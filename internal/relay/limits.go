package relay

import (
	"context"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/room"
	"github.com/reprise-harness/reprise/internal/wire"
)

// Rate limits: every sender (TCP connection or UDP session) has two token
// buckets, one counting frames and one counting bytes. A frame that would
// overdraw either is dropped, whatever its type, and counted; a sender
// whose frames keep being dropped (no second without a drop) for
// Config.RateLimitGrace is disconnected with rate_limited. So a flooder
// spends its own budget and then its connection, and the members of its
// room see at most the bucket's rate from it.
//
// The buckets are kept as GCRA's theoretical arrival time (one int64 each,
// no allocation, no lock: only the sender's reading goroutine touches
// them), which is a token bucket of size burst refilled at rate.
type gcra struct {
	per int64 // nanoseconds of credit one unit costs (1 s / rate); 0: no limit
	tol int64 // bucket size in nanoseconds of credit (burst × per)
}

func newGCRA(rate float64, burst int) gcra {
	if rate <= 0 {
		return gcra{}
	}
	per := max(int64(float64(time.Second)/rate), 1)
	return gcra{per: per, tol: int64(max(burst, 1)) * per}
}

// limiter is one sender's state: the two buckets' arrival times and its
// current run of drops.
type limiter struct {
	msgs, bytes int64 // theoretical arrival times, relay clock ns
	overSince   int64 // first drop of the current run, 0: none
	lastDrop    int64
}

// dropGap ends a run of drops: a sender with no drop for this long is back
// under its limit.
const dropGap = int64(time.Second)

// Over-limit kinds, the labels of relay_rate_limited_frames_total.
const (
	limitMessages = metrics.LimitMessages
	limitBytes    = metrics.LimitBytes
)

// allow charges one frame of size bytes at now to both buckets, or to
// neither. It returns "" if the frame may pass, else the limit it is over.
func (l *limiter) allow(now int64, size int, msgs, bytes gcra) string {
	switch chargeBoth(&l.msgs, &l.bytes, now, size, msgs, bytes) {
	case overMessages:
		return limitMessages
	case overBytes:
		return limitBytes
	}
	return ""
}

// chargeBoth charges one frame of size bytes at now to a pair of buckets
// (their theoretical arrival times tm and tb), or to neither: a sender's
// or a room's. It returns 0 if the frame may pass, else which bucket it
// would overdraw.
func chargeBoth(tm, tb *int64, now int64, size int, msgs, bytes gcra) int {
	m := max(*tm, now)
	if msgs.per > 0 {
		m += msgs.per
		if m-now > msgs.tol {
			return overMessages
		}
	}
	b := max(*tb, now)
	if bytes.per > 0 {
		b += int64(size) * bytes.per
		if b-now > bytes.tol {
			return overBytes
		}
	}
	*tm, *tb = m, b
	return 0
}

// Room rate limits: what all of a room's members together send into it,
// a share per sending member (Config.RoomRateMessages, RoomRateBytes)
// times the members that sent in the last window (at least one), so that a
// room of honest members is never limited whatever its size, and senders
// each under their own limit (which leaves room for one client's bursts)
// cannot together push more into a room than honest ones send: ten
// senders at 250 frames a second into a room of 25 got 727,200 deliveries
// in 10 s when the room's limit was one number for every room. The
// buckets live in the room
// (room.Meter), charged with the shard locked; a send over them is dropped
// and counted (relay_rate_limited_frames_total{limit="room_messages"|
// "room_bytes"}). Nobody is disconnected for them: the room's honest
// members would be cut with the flooders.
//
// Each reader charges with its own clock reading, which may be older than
// another's that charged the room before it (a goroutine the scheduler ran
// late): a room is charged at the latest time it has seen, so a late
// reader's frames are not taken for a burst.

// Which room bucket a frame would overdraw.
const (
	overMessages = 1
	overBytes    = 2
)

// senderWindow is how long a member that sent counts as a sender of its
// room: its share stays with the room for one to two windows after.
const senderWindow = int64(time.Second)

// admitRoom charges a send of size bytes at now from a member (whose
// window is the last window it was counted a sender in) to both of its
// room's buckets, or to neither; msgs and bytes are one sender's share. It
// returns 0 if the send may pass, else which bucket it would overdraw.
func admitRoom(m *room.Meter, window *int64, now int64, size int, msgs, bytes gcra) int {
	now = max(now, m.Charged)
	if now-m.Window >= senderWindow {
		m.Before, m.Senders = m.Senders, 0
		if now-m.Window >= 2*senderWindow {
			m.Before = 0
		}
		m.Window = now
	}
	if *window != m.Window {
		*window = m.Window
		m.Senders++
	}
	n := int64(max(m.Senders, m.Before, 1))
	// The buckets' levels, in nanoseconds of one sender's share: each unit
	// adds its per, and n senders' shares drain n nanoseconds of it a
	// nanosecond; the buckets hold n times one sender's burst. (A level,
	// not an arrival time as a sender's limiter keeps, so that a sender
	// joining or leaving rescales the room's bucket and not its fill.)
	drain := (now - m.Charged) * n
	lm, lb := max(m.Msgs-drain, 0), max(m.Bytes-drain, 0)
	if msgs.per > 0 {
		if lm += msgs.per; lm > msgs.tol*n {
			return overMessages
		}
	}
	if bytes.per > 0 {
		if lb += int64(size) * bytes.per; lb > bytes.tol*n {
			return overBytes
		}
	}
	m.Msgs, m.Bytes, m.Charged = lm, lb, now
	return 0
}

// dropped records a dropped frame at now and reports how long the sender
// has been over its limit without a second's break.
func (l *limiter) dropped(now int64) time.Duration {
	if l.overSince == 0 || now-l.lastDrop > dropGap {
		l.overSince = now
	}
	l.lastDrop = now
	return time.Duration(now - l.overSince)
}

// overLimit handles a frame the limiter dropped: counted, logged (rate
// limited), and after the grace a refusal that disconnects the sender.
func (c *client) overLimit(kind string) *wire.Error {
	s := c.s
	if kind == limitMessages {
		c.b.limitedMsgs++
	} else {
		c.b.limitedBytes++
	}
	over := c.lim.dropped(c.b.now)
	if over == 0 && s.abuseLog.allow(c.b.now) {
		s.log.Info("sender over its rate limit: dropping its frames", zap.Uint64("conn", c.id),
			zap.String("user", c.user), zap.String("limit", kind), zap.Int64("log_lines_suppressed", s.abuseLog.suppressed()))
	}
	if over <= s.cfg.RateLimitGrace {
		return nil
	}
	if s.abuseLog.allow(c.b.now) {
		s.log.Info("sender over its rate limit too long: disconnecting", zap.Uint64("conn", c.id),
			zap.String("user", c.user), zap.Duration("over_for", over), zap.Int64("log_lines_suppressed", s.abuseLog.suppressed()))
	}
	return refusal(wire.ErrRateLimited, "over the relay's rate limit ("+kind+") for "+over.Truncate(time.Millisecond).String())
}

// logLimiter lets one log line through per interval across all
// goroutines and counts the ones it held back, so an abuser cannot fill the
// relay's log (or its disk) by abusing it.
type logLimiter struct {
	every   int64
	next    atomic.Int64
	dropped atomic.Int64
}

// allow reports whether a line may be logged at now (relay clock ns).
func (l *logLimiter) allow(now int64) bool {
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+l.every) {
		l.dropped.Add(1)
		return false
	}
	return true
}

// suppressed returns and resets the count of lines held back.
func (l *logLimiter) suppressed() int64 { return l.dropped.Swap(0) }

// Liveness: a client that heartbeats is expected to keep doing so. Once it
// has sent livenessSamples+1 heartbeats, a joined client from which nothing
// arrives for Config.HeartbeatMisses times its heartbeat interval (the
// longest of its last livenessSamples intervals, so jitter does not count
// against it) is removed with idle_timeout. The bound is at least
// minLiveness and at most Config.IdleTimeout, which still applies to
// clients that never heartbeat.
const (
	livenessSamples = 4
	minLiveness     = 5 * time.Second
)

// beat records a heartbeat at now and updates the client's liveness bound.
func (c *client) beat(now int64) {
	s := c.s
	if c.hbLast != 0 && s.cfg.HeartbeatMisses > 0 {
		c.hbGaps[c.hbN%livenessSamples] = now - c.hbLast
		c.hbN++
		if c.hbN >= 2 {
			longest := slices.Max(c.hbGaps[:min(c.hbN, livenessSamples)])
			bound := min(max(int64(s.cfg.HeartbeatMisses)*longest, int64(minLiveness)), int64(s.cfg.IdleTimeout))
			c.liveness.Store(bound)
		}
	}
	c.hbLast = now
}

// idleBound is how long c may stay silent: its liveness bound once it has
// one, else the idle timeout.
func (c *client) idleBound() time.Duration {
	if l := c.liveness.Load(); l > 0 {
		return time.Duration(l)
	}
	return c.s.cfg.IdleTimeout
}

// bytesWaiting reports whether a TCP client's bytes sit in its socket's
// receive queue, unread: they arrived, so it is not idle. Its loop reads
// them when it runs; a relay starved of CPU (a busy host) gets to them
// late, and without this check it cut clients whose heartbeats had come
// in time (seen under load: a client heartbeating every 100 ms cut by a
// 600 ms idle timeout). A loop reads every readable connection, so bytes
// do not wait for long on a relay that runs; a throttled client is
// sending, not idle. UDP sessions share one socket: judged by lastActive.
func (c *client) bytesWaiting() bool {
	if c.isUDP() {
		return false
	}
	n, err := unix.IoctlGetInt(c.tc.fd, unix.SIOCINQ)
	return err == nil && n > 0
}

func idleText(d time.Duration) string {
	return "nothing received for " + d.Truncate(time.Millisecond).String()
}

// Partial frames: a reader publishes how much memory its parser holds for
// an incomplete frame (partialHeld) and since when that frame has been
// arriving (partialSince); the sweeper closes a connection whose frame is
// not complete within Config.FrameTimeout, and when the sum over all
// connections passes Config.PartialBudget it closes the connections with
// the largest partial frames until the rest fit.

// trackPartial publishes the parser's partial frame after a read at now:
// start is its stream offset, buffered and held its bytes and capacity.
func (c *client) trackPartial(now, start int64, buffered, held int) {
	s := c.s
	if buffered == 0 {
		held = 0
		if c.partialSince.Load() != 0 {
			c.partialSince.Store(0)
		}
	} else if c.partialSince.Load() == 0 || start != c.partialStart {
		c.partialStart = start
		c.partialSince.Store(now)
	}
	if d := int64(held) - c.partialHeld.Load(); d != 0 {
		c.partialHeld.Store(int64(held))
		if total := s.partial.Add(d); d > 0 {
			if total > s.cfg.PartialBudget {
				select {
				case s.evict <- struct{}{}:
				default:
				}
			}
			if s.mem.limit > 0 && total+s.mem.total() > s.mem.limit {
				s.mem.wake()
			}
		}
	}
}

// dropPartial takes c's partial frame out of the relay's sum when its
// reader is done.
func (c *client) dropPartial() {
	if h := c.partialHeld.Swap(0); h != 0 {
		c.s.partial.Add(-h)
	}
	c.partialSince.Store(0)
}

// checkPartial closes c if its partial frame is older than the frame
// timeout.
func (c *client) checkPartial(now int64) {
	since := c.partialSince.Load()
	if since == 0 || now-since <= int64(c.s.cfg.FrameTimeout) {
		return
	}
	if c.close(wire.ErrFrameTimeout, "frame not complete within "+c.s.cfg.FrameTimeout.String()+" of its first byte") {
		c.s.m.FrameTimeouts(metrics.CauseTimeout)
	}
}

// evictPartial closes the connections with the largest partial frames
// until the rest fit the budget. Connections already closing are not
// counted: their memory goes when their reader returns.
func (s *Server) evictPartial() {
	type held struct {
		c *client
		n int64
	}
	var list []held
	var total int64
	s.eachClient(func(c *client) {
		if n := c.partialHeld.Load(); n > 0 && !c.out.isClosing() {
			list = append(list, held{c, n})
			total += n
		}
	})
	slices.SortFunc(list, func(a, b held) int { return int(b.n - a.n) })
	for _, h := range list {
		if total <= s.cfg.PartialBudget {
			return
		}
		if h.c.close(wire.ErrFrameTimeout, "partial frames over the relay's memory budget; this connection held the largest ("+strconv.FormatInt(h.n, 10)+" bytes)") {
			s.m.FrameTimeouts(metrics.CauseBudget)
		}
		total -= h.n
	}
}

// Memory given back: after a flood of connections, a stall of members that
// do not read or an attack of partial frames, the relay's heap is left far
// larger than its live data, and the Go runtime would keep that memory for
// minutes (its next GC is due at twice the peak), and the queues' chunk
// slabs stay mapped for the next burst. So once what the relay holds (heldBytes: queued chunks,
// partial frames, and reclaimConnCost per connection) has fallen by
// reclaimBytes and to half its peak or less, and stopped falling (the
// closed connections are gone), the relay returns the freed memory to the
// OS, and again reclaimEvery and 3 × reclaimEvery later (a loaded host
// runs the loops that close connections late). Not while most of the
// peak is still held: a full collection of a large heap takes seconds on
// a loaded host, for little. The collections run on their own goroutine
// (reclaimLoop), so the sweeper's timeouts and budget cuts never wait for
// them.
const (
	reclaimBytes    = 8 << 20
	reclaimEvery    = int64(5 * time.Second)
	reclaimConnCost = 16 << 10 // a connection's state and its join's queued chunks (12 KiB at a 10,000-connection flood's peak), rounded up
)

// heldBytes is what the relay holds that a flood or a stall grows.
func (s *Server) heldBytes() int64 {
	return s.mem.total() + s.partial.Load() + s.nconns.Load()*reclaimConnCost
}

// reclaim runs at every sweep tick (the sweeper's own state) and asks
// reclaimLoop to return memory when it is due.
func (s *Server) reclaim(now int64) {
	cur := s.heldBytes()
	falling := cur < s.heldLast
	s.heldLast = cur
	s.heldPeak = max(s.heldPeak, cur)
	if s.reclaimAgain > 0 && !falling && now >= s.reclaimAt {
		s.reclaimAgain--
		s.reclaimAt = now + 2*reclaimEvery
		s.freeOS()
		return
	}
	if falling || s.heldPeak-cur < reclaimBytes || cur > s.heldPeak/2 || now-s.lastReclaim < reclaimEvery {
		return
	}
	s.log.Info("memory returned to the OS", zap.Int64("held_bytes", cur), zap.Int64("peak_bytes", s.heldPeak),
		zap.Int64("partial_bytes", s.partial.Load()), zap.Int64("queued_bytes", s.mem.total()))
	s.freeOS()
	s.heldPeak, s.lastReclaim, s.reclaimAgain, s.reclaimAt = cur, now, 2, now+reclaimEvery
}

// freeOS asks reclaimLoop for a pass, without waiting.
func (s *Server) freeOS() {
	select {
	case s.reclaimc <- struct{}{}:
	default: // one is under way
	}
}

// reclaimLoop returns freed memory to the OS when the sweeper asks.
func (s *Server) reclaimLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.reclaimc:
			// The heap (partial frames, connections' state; two
			// collections, as when the chunks were pooled on it), then
			// the queues' chunk slabs no queue uses (arena.go).
			runtime.GC()
			debug.FreeOSMemory()
			chunks.freeSlabs()
		}
	}
}
