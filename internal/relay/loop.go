package relay

import (
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/epoll"
	"github.com/reprise-harness/reprise/internal/wire"
)

// Event loops: the relay's TCP connections are served by a few loops (one
// per GOMAXPROCS), each an edge-triggered epoll over raw non-blocking
// descriptors, not by goroutines of their own: with two goroutines and a
// net.Conn per connection the Go runtime kept about 2.2 KiB for every
// connection the relay had held at once, for good (goroutine structures
// are never freed, poll descriptors and finalizer records are persistent),
// so after a 10,000-connection flood RSS stayed at 3× its idle baseline.
// A loop owns its connections: it alone reads them (handling the frames
// at once, as a connection's reader goroutine did), writes them (their
// outbound queues, with writev) and closes them. Deliveries are queued by
// whichever loop or UDP worker produced them; a connection on another
// loop is posted to that loop's inbox, and an eventfd wakes it.
//
// Lock order: a loop's mutex is a leaf (it guards only its inbox).
type loop struct {
	s   *Server
	set *epoll.Set
	buf []byte
	// handleFn is the parser's callback for the connection being read
	// (cur): one closure per loop, not one per connection.
	cur      *client
	handleFn func(f *wire.Frame) error
	// slots holds the loop's connections by the index their epoll events
	// carry; gens tells a slot's connection from an earlier one's events.
	slots []*client
	gens  []uint32
	free  []int32
	n     int
	// ready is what the current round services; next what the next does.
	ready, next []*client
	timers      timerHeap
	stopSeen    bool // drain saw stopping
	iov         []unix.Iovec
	// A join's member list and its joined frames, for the loop's joins
	// (client.joinRoom): as long as the largest room, once per loop.
	joinNames []string
	joinEnc   []byte

	mu             sync.Mutex
	inbox, adopted []*client
	spareIn, spare []*client
	notified       bool
	stopping       bool
	killed         bool
}

func newLoop(s *Server) (*loop, error) {
	set, err := epoll.New(256)
	if err != nil {
		return nil, err
	}
	lp := &loop{s: s, set: set, buf: make([]byte, maxReadBuf)}
	lp.handleFn = lp.handleFrame
	return lp, nil
}

// adopt hands the loop a new connection; false once the loop stops.
func (lp *loop) adopt(c *client) bool {
	lp.mu.Lock()
	if lp.stopping {
		lp.mu.Unlock()
		return false
	}
	lp.adopted = append(lp.adopted, c)
	wake := !lp.notified
	lp.notified = true
	lp.mu.Unlock()
	if wake {
		lp.set.Wake()
	}
	return true
}

// post asks the loop to service c: its queue has something to write, it
// is closing, or its read deadline changed. Safe from any goroutine.
func (lp *loop) post(c *client) {
	lp.mu.Lock()
	lp.inbox = append(lp.inbox, c)
	wake := !lp.notified
	lp.notified = true
	lp.mu.Unlock()
	if wake {
		lp.set.Wake()
	}
}

// stop makes the loop return once its connections are gone; kill closes
// them at once (after the shutdown grace).
func (lp *loop) stop(kill bool) {
	lp.mu.Lock()
	lp.stopping = true
	lp.killed = lp.killed || kill
	lp.notified = true
	lp.mu.Unlock()
	lp.set.Wake()
}

// mark queues c for the next round; only on the loop's goroutine.
func (lp *loop) mark(c *client) {
	if t := c.tc; !t.marked {
		t.marked = true
		lp.next = append(lp.next, c)
	}
}

// run serves the loop's connections until it is stopped and they are gone.
// Its descriptors are closed by close, after every goroutine that could
// post to it has returned.
func (lp *loop) run() {
	for {
		timeout := -1
		if len(lp.next) > 0 {
			timeout = 0
		} else if at, ok := lp.timers.first(); ok {
			timeout = msUntil(at - lp.s.now())
		}
		n, err := lp.set.Wait(timeout)
		if err != nil {
			lp.s.log.Error("epoll_wait", zap.Error(err))
			lp.killAll()
			return
		}
		for _, e := range lp.set.Events[:n] {
			lp.event(e)
		}
		if lp.drain() {
			return
		}
		now := lp.s.now()
		for {
			at, ok := lp.timers.first()
			if !ok || at > now {
				break
			}
			t := lp.timers.pop()
			if tc := t.c.tc; tc.timerAt == t.at {
				tc.timerAt = 0
				lp.mark(t.c)
			}
		}
		lp.ready, lp.next = lp.next, lp.ready[:0]
		for i, c := range lp.ready {
			c.tc.marked = false
			lp.service(c, now)
			lp.ready[i] = nil
		}
		if lp.stopSeen && lp.n == 0 {
			return // no adoption after stopSeen: its last connection went
		}
	}
}

// close closes the loop's descriptors once no goroutine of the relay runs.
func (lp *loop) close() {
	lp.set.Close()
}

// msUntil is epoll_wait's timeout for a wait of d ns: rounded up, so a
// timer is never found not due yet.
func msUntil(d int64) int {
	if d <= 0 {
		return 0
	}
	return int(min((d+999_999)/1_000_000, 1<<30))
}

// event records what an epoll event says about its connection.
func (lp *loop) event(e unix.EpollEvent) {
	if e.Fd == epoll.WakeID {
		lp.set.Woken()
		return
	}
	if int(e.Fd) >= len(lp.slots) || lp.gens[e.Fd] != uint32(e.Pad) {
		return
	}
	c := lp.slots[e.Fd]
	if c == nil {
		return
	}
	t := c.tc
	if e.Events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		t.readable = true
	}
	if e.Events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		t.writable = true
	}
	lp.mark(c)
}

// drain takes the inbox: new connections, then posted ones. It reports
// whether the loop is done.
func (lp *loop) drain() bool {
	lp.mu.Lock()
	adopted, inbox := lp.adopted, lp.inbox
	lp.adopted, lp.inbox = lp.spare[:0], lp.spareIn[:0]
	lp.notified = false
	stopping, killed := lp.stopping, lp.killed
	lp.mu.Unlock()
	for _, c := range adopted {
		lp.register(c)
	}
	for _, c := range inbox {
		if c.tc.slot >= 0 {
			lp.mark(c)
		}
	}
	clear(adopted)
	clear(inbox)
	lp.spare, lp.spareIn = adopted[:0], inbox[:0]
	if killed {
		lp.killAll()
	}
	lp.stopSeen = stopping
	return stopping && lp.n == 0
}

// register adds c to the loop's epoll set.
func (lp *loop) register(c *client) {
	t := c.tc
	var slot int32
	if k := len(lp.free); k > 0 {
		slot, lp.free = lp.free[k-1], lp.free[:k-1]
	} else {
		slot = int32(len(lp.slots))
		lp.slots = append(lp.slots, nil)
		lp.gens = append(lp.gens, 0)
	}
	lp.gens[slot]++
	lp.slots[slot] = c
	t.slot = slot
	lp.n++
	if err := lp.set.Add(t.fd, unix.EPOLLIN|unix.EPOLLOUT|unix.EPOLLRDHUP, slot, int32(lp.gens[slot])); err != nil {
		lp.s.log.Warn("epoll_ctl add", zap.Uint64("conn", c.id), zap.Error(err))
		t.readDone = true // nothing read: no room to leave
		c.out.fail(CloseClosed)
		t.writeDone = true
		lp.finalize(c)
		return
	}
	t.writable = true
	lp.mark(c)
}

// killAll closes every connection of the loop at once.
func (lp *loop) killAll() {
	for _, c := range lp.slots {
		if c != nil {
			lp.kill(c)
		}
	}
}

// handleFrame acts on one frame of the connection being read.
func (lp *loop) handleFrame(f *wire.Frame) error {
	c := lp.cur
	c.b.now = c.tc.arr.next(f.Size)
	if werr := c.handle(f, 0); werr != nil {
		return werr
	}
	return nil
}

// Timers: each connection has at most one live entry, at timerAt (the
// earliest thing it waits for); entries left from an earlier timerAt are
// skipped when they come up.
type timerEntry struct {
	at int64
	c  *client
}

// timerHeap is a min-heap by at (no container/heap: its interface boxes
// every entry pushed, an allocation per write held).
type timerHeap []timerEntry

func (h *timerHeap) push(e timerEntry) {
	*h = append(*h, e)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p].at <= a[i].at {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

func (h *timerHeap) pop() timerEntry {
	a := *h
	e := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a[n] = timerEntry{}
	a = a[:n]
	if n == 0 && cap(a) > 1024 {
		a = nil // a flood's timers are not kept
	}
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && a[l].at < a[m].at {
			m = l
		}
		if r := l + 1; r < n && a[r].at < a[m].at {
			m = r
		}
		if m == i {
			break
		}
		a[m], a[i] = a[i], a[m]
		i = m
	}
	*h = a
	return e
}

func (h timerHeap) first() (int64, bool) {
	if len(h) == 0 {
		return 0, false
	}
	return h[0].at, true
}

// schedule makes sure c's loop services it by at.
func (lp *loop) schedule(c *client, at int64) {
	t := c.tc
	if at == 0 || t.timerAt != 0 && t.timerAt <= at {
		return
	}
	t.timerAt = at
	lp.timers.push(timerEntry{at, c})
}
