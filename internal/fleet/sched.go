package fleet

import (
	"context"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reprise-harness/reprise/internal/uring"
)

const (
	// maxBatch caps the frames one client sends in one turn, so a client
	// far behind cannot starve the others of its scheduler.
	maxBatch = 256
	never    = math.MaxInt64
	// nudgeSlack is how late past its due time a sleeping scheduler may
	// be before a reader wakes it (see scheduler.sleepUntil).
	nudgeSlack = int64(100 * time.Microsecond)
)

// scheduler is a goroutine with a min-heap of its clients by next due
// time. It sleeps until the earliest due time, sends what is due
// (coalesced into one non-blocking write per client on TCP, see send.go;
// the writes of up to sendBatchMax clients in one io_uring call where
// the kernel has it, see sendBatch) and measures how late each send was.
// There is one scheduler per core, never a timer per client, and it
// never waits on a socket.
type scheduler struct {
	f    *Fleet
	c    *counters
	rec  *hists
	wake chan struct{}
	// poll reads its logged-in stream clients (nil: each client's
	// goroutine reads); set by Run before the first login.
	poll *poller

	mu       sync.Mutex
	incoming []*client
	// retry lists clients whose reader left bytes in their backlog (an
	// answer the kernel took only in part): the scheduler retries them a
	// backlogRetry apart until the backlog drains, as it does after a
	// send turn, for a client whose next frame may be far off or never
	// come (its script ended).
	retry []*client

	// sleepUntil is the fleet clock the scheduler sleeps until (never
	// while it runs). A Go timer fires only when the P that holds it
	// schedules, and on a host whose cores are oversubscribed that P's
	// thread can be off the CPU for a whole OS time slice (milliseconds)
	// while the fleet's other threads run readers. Readers therefore
	// check it after every read and wake an overdue scheduler themselves
	// (Fleet.nudge), so it runs on whichever thread of the fleet is on a
	// CPU.
	sleepUntil atomic.Int64

	h dueHeap
	// w and ends are the scheduler goroutine's scratch for one client's
	// turn: the non-blocking writer and the end offsets of its frames.
	w    *rawWriter
	ends []int
	// sealed holds a TLS client's turn as records (tls.go's seal).
	sealed []byte
	// index is its place among the fleet's schedulers: the stripe of
	// the rooms' cast counts it adds to (castRoom).
	index int
	// ring, when the kernel has io_uring, writes the turn's plain TCP
	// sends up to sendBatchMax clients at a time (sends); nil: a
	// write(2) each. Set by Run before the first login, closed by run.
	ring  *uring.Ring
	sends sendBatch
}

func newScheduler(f *Fleet, c *counters, rec *hists) *scheduler {
	s := &scheduler{f: f, c: c, rec: rec, wake: make(chan struct{}, 1), w: newRawWriter(), ends: make([]int, 0, maxBatch)}
	s.sleepUntil.Store(never)
	return s
}

// add hands a logged-in client to the scheduler.
func (s *scheduler) add(c *client) {
	s.mu.Lock()
	s.incoming = append(s.incoming, c)
	s.mu.Unlock()
	s.kick()
}

func (s *scheduler) takeIncoming() {
	s.mu.Lock()
	in := s.incoming
	s.incoming = nil
	s.mu.Unlock()
	for _, c := range in {
		c.due = c.start // step 1 is computed on the first turn
		s.h.push(c)
	}
}

// retryBacklog asks the scheduler to drain c's backlog (see retry).
func (s *scheduler) retryBacklog(c *client) {
	s.mu.Lock()
	s.retry = append(s.retry, c)
	s.mu.Unlock()
	s.kick()
}

// drainRetries writes what it can of the listed backlogs at fleet clock
// now; it reports whether some still wait.
func (s *scheduler) drainRetries(now int64) bool {
	s.mu.Lock()
	list := s.retry
	s.retry = nil
	s.mu.Unlock()
	if len(list) == 0 {
		return false
	}
	keep := list[:0]
	for _, c := range list {
		c.wmu.Lock()
		if !c.dead.Load() && len(c.backlog) > 0 && c.drain(s.w, now) && len(c.backlog) > 0 {
			keep = append(keep, c)
		}
		c.wmu.Unlock()
	}
	clear(list[len(keep):])
	if len(keep) == 0 {
		return false
	}
	s.mu.Lock()
	s.retry = append(s.retry, keep...)
	s.mu.Unlock()
	return true
}

// run schedules until ctx ends.
func (s *scheduler) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	if s.ring != nil {
		defer s.ring.Close()
	}
	buf := make([]byte, 0, 64<<10)
	lags := make([]int64, 0, 1024)
	for {
		s.takeIncoming()
		now := s.f.now()
		for len(s.h) > 0 && s.h[0].due <= now {
			if ctx.Err() != nil {
				s.flushSends(now) // counted as sent already
				return
			}
			c := s.h[0].c
			if c.dead.Load() {
				s.h.pop()
				continue
			}
			buf, lags = c.send(now, buf, lags)
			if c.dead.Load() || c.due == never {
				s.h.pop()
				if c.nextFlow() != nil && !c.dead.Load() {
					s.flushSends(now) // its last sends first
					c.nextTurn()      // its plan's handover: once a connection
				}
			} else {
				s.h.fixFirst()
			}
			if len(lags) >= cap(lags)/2 {
				s.rec.recordLags(lags)
				lags = lags[:0]
			}
			now = s.f.now()
		}
		s.flushSends(now)
		if len(lags) > 0 {
			s.rec.recordLags(lags)
			lags = lags[:0]
		}
		wait, due := time.Hour, int64(never)
		if len(s.h) > 0 {
			due = s.h[0].due
			wait = time.Duration(due - now)
		}
		if s.drainRetries(now) && wait > time.Duration(backlogRetry) {
			wait, due = time.Duration(backlogRetry), now+backlogRetry
		}
		s.sleepUntil.Store(due)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-timer.C:
		}
		s.sleepUntil.Store(never)
	}
}

// sendBatch is a scheduler's plain TCP sends of its turn to clients its
// poller owns (their descriptors are rawFDs), held until sendBatchMax of
// them wait or the turn ends, then written in one io_uring call
// (uring.Send): a write(2) a client paid a system call's entry and the
// file layers above the socket (issue 34). The bytes are copied into one
// buffer of the scheduler's, warm; what a socket does not take goes to
// its client's backlog, as sendTCP's would.
type sendBatch struct {
	cs   []*client
	offs []int // where each client's bytes begin in buf (and end: the next's, or len)
	// ends are the end offsets of the clients' frames (relative to each
	// client's bytes), endAt where each client's begin in ends.
	ends  []int
	endAt []int
	buf   []byte
	fds   []*rawFD
	nfds  []int32
	bufs  [][]byte
	res   []int32
	held  []bool // a reference to the descriptor was taken
}

// sendBatchMax is how many clients' sends one io_uring call writes. Four
// keep the deliveries' latency as a write(2) each had it (quiet N:N 8x32,
// p50 1.862 -> 1.863 ms, A/B of 5), for most of sixteen's saving
// (fleet/relay B/A 0.928 against 0.917). Eight or sixteen raised that
// p50 by 4 % in every pair: the relay then takes that many senders'
// frames in one turn and writes each receiver after all of them, a burst
// that sends spread by their own system calls never made.
const sendBatchMax = 4

// pend holds c's turn (b, its frames ending at ends) for the batch, and
// writes the batch once full; false when c's sends are not batched
// (no ring, a TLS or UDP client, replies, a backlog, a goroutine's
// descriptor), and the caller writes them itself.
func (s *scheduler) pend(c *client, b []byte, ends []int, now int64) bool {
	if s.ring == nil || c.replies || len(c.backlog) > 0 || len(b) == 0 {
		return false
	}
	fd, ok := c.raw.(*rawFD)
	if !ok {
		return false
	}
	sb := &s.sends
	for _, p := range sb.cs {
		if p == c { // a second turn in a row (maxBatch): the first goes out first
			s.flushSends(now)
			break
		}
	}
	sb.cs = append(sb.cs, c)
	sb.fds = append(sb.fds, fd)
	sb.offs = append(sb.offs, len(sb.buf))
	sb.buf = append(sb.buf, b...)
	sb.endAt = append(sb.endAt, len(sb.ends))
	sb.ends = append(sb.ends, ends...)
	if len(sb.cs) == sendBatchMax {
		s.flushSends(now)
	}
	return true
}

// flushSends writes the held sends, one io_uring call for all, and acts
// on each client's result at fleet clock now as sendTCP does.
func (s *scheduler) flushSends(now int64) {
	sb := &s.sends
	n := len(sb.cs)
	if n == 0 {
		return
	}
	sb.nfds, sb.bufs, sb.res, sb.held = sb.nfds[:0], sb.bufs[:0], sb.res[:0], sb.held[:0]
	for i, fd := range sb.fds {
		held := fd.acquire() // no close (and reuse of the number) under the write
		sb.held = append(sb.held, held)
		if held {
			sb.nfds = append(sb.nfds, int32(fd.fd))
			sb.bufs = append(sb.bufs, sb.bytes(i))
			sb.res = append(sb.res, 0)
		}
	}
	s.ring.Send(sb.nfds, sb.bufs, sb.res) // an error turned it to write(2): the results stand
	k := 0
	for i, c := range sb.cs {
		var res int32 = -int32(syscall.EBADF)
		if sb.held[i] {
			sb.fds[i].release()
			res, k = sb.res[k], k+1
		}
		s.sent(c, sb.bytes(i), sb.ends[sb.endAt[i]:sb.endEnd(i)], res, now)
	}
	clear(sb.cs)
	clear(sb.fds)
	clear(sb.bufs)
	sb.cs, sb.fds, sb.offs, sb.ends, sb.endAt, sb.buf = sb.cs[:0], sb.fds[:0], sb.offs[:0], sb.ends[:0], sb.endAt[:0], sb.buf[:0]
}

// bytes is the i-th client's bytes.
func (sb *sendBatch) bytes(i int) []byte {
	end := len(sb.buf)
	if i+1 < len(sb.offs) {
		end = sb.offs[i+1]
	}
	return sb.buf[sb.offs[i]:end]
}

// endEnd is where the i-th client's frame ends stop in ends.
func (sb *sendBatch) endEnd(i int) int {
	if i+1 < len(sb.endAt) {
		return sb.endAt[i+1]
	}
	return len(sb.ends)
}

// sent acts on a batched write of b to c (res: the bytes taken, or the
// negated errno; -EBADF: the descriptor was closed already), as sendTCP
// on a write of its own: the bytes counted, a failure disconnects, and
// what the socket did not take waits in the backlog, retried a
// backlogRetry apart (the client's next due time stays as it is).
func (s *scheduler) sent(c *client, b []byte, ends []int, res int32, now int64) {
	var n int
	var err error
	switch e := syscall.Errno(-res); {
	case res >= 0:
		n = int(res)
	case e == syscall.EAGAIN || e == syscall.EINTR:
	case e == syscall.EBADF:
		err = net.ErrClosed
	default:
		err = e
	}
	if n > 0 {
		s.c.sentBytes.Add(int64(n))
	}
	if err != nil {
		c.disconnect(disconnectBy(writeFailure(err)))
		return
	}
	if n == len(b) {
		return
	}
	c.tookPart(b, ends, n, now)
	if len(c.backlog) > 0 {
		s.mu.Lock()
		s.retry = append(s.retry, c)
		s.mu.Unlock()
	}
}

// poke wakes the scheduler if it still sleeps until due; of several
// pokers only one sends.
func (s *scheduler) poke(due int64) {
	if s.sleepUntil.CompareAndSwap(due, never) {
		s.kick()
	}
}

// kick wakes the scheduler's run, at once if it sleeps, or at its next
// wait; kicks while one is pending are one.
func (s *scheduler) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// nudge wakes every scheduler sleeping more than nudgeSlack past its due
// time; now is the fleet clock. Readers call it after each read: two
// atomic loads when all is on time.
func (f *Fleet) nudge(now int64) {
	for _, s := range f.scheds {
		if d := s.sleepUntil.Load(); now-d > nudgeSlack {
			s.poke(d)
		}
	}
}

// dueHeap is a scheduler's clients by due time: a 4-ary min-heap whose
// entries carry their client's due time, so that sifting compares without
// reading the clients (each its own cache line, hundreds per scheduler), in
// half the levels of a binary heap, and with no interface calls
// (container/heap's were a tenth of the scheduler's own time). Ties go
// in no particular order, as before.
type dueHeap []dueEntry

type dueEntry struct {
	due int64
	c   *client
}

// push adds c at its due time.
func (h *dueHeap) push(c *client) {
	*h = append(*h, dueEntry{c.due, c})
	h.up(len(*h) - 1)
}

// pop removes the first client.
func (h *dueHeap) pop() {
	old := *h
	n := len(old) - 1
	old[0], old[n] = old[n], dueEntry{}
	*h = old[:n]
	if n > 0 {
		h.down(0)
	}
}

// fixFirst puts the first client in its place after its due time changed.
func (h dueHeap) fixFirst() {
	h[0].due = h[0].c.due
	h.down(0)
}

func (h dueHeap) up(i int) {
	e := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if h[p].due <= e.due {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
}

func (h dueHeap) down(i int) {
	e, n := h[i], len(h)
	for {
		first := 4*i + 1
		if first >= n {
			break
		}
		m := first
		for k := first + 1; k < min(first+4, n); k++ {
			if h[k].due < h[m].due {
				m = k
			}
		}
		if h[m].due >= e.due {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = e
}
