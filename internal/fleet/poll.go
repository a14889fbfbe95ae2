package fleet

import (
	"errors"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A poller reads the sockets of its scheduler's logged-in stream clients
// (plain TCP and WebSocket over it) from one goroutine: an epoll set of
// their sockets, edge-triggered, whose ready clients it reads and
// consumes inline, each until its socket is empty. A goroutine per
// client parked in the runtime's netpoller costs a park and a wake per
// read (about a microsecond, issue 34: at N:N 8x32 some 25 deliveries a
// read, so 40 ns a delivery); one poller wake serves every client that
// became readable meanwhile.
//
// The epoll set is itself waited on through the runtime's netpoller (an
// epoll descriptor is readable while its ready list is not empty), so a
// poller with nothing to read parks like any reader and holds no thread.
//
// A client's reader goroutine stays its owner: it logs the client in
// (deadlines, TLS, retries), hands it over once joined and its socket is
// empty, and waits; the poller gives it back with the reason its reads
// ended, or to go on reading itself when its read needs a deadline (the
// leave's drain, which epoll does not bound). TLS clients are never
// handed over (their records are opened with the tls.Conn's state), nor
// UDP ones (udpread.go batches those with recvmmsg already).
type poller struct {
	ep   *os.File // the epoll set (never its Fd(): that makes it blocking)
	epfd int
	rc   syscall.RawConn
	wake int // an eventfd in the set: evictions wait

	mu    sync.Mutex
	slots []*polled // by the id in their epoll event; nil when free
	free  []int32
	evict []*polled // asked back by their clients (leave)
	// handed counts the clients handed over (tests, and the docs' figures).
	handed atomic.Int64

	// The poller goroutine's own.
	closed  bool
	evs     []unix.EpollEvent
	again   []*polled // read maxPollReads times, not empty yet
	scratch []*polled
	fn      func(fd uintptr) bool
}

// polled is one handed-over client.
type polled struct {
	c *client
	r *streamReader
	// back takes the end of the client's reads: nil (the fleet stopped
	// the reads), errResume (read on in the goroutine) or the error.
	back chan error
	id   int32
	// in: registered in the set; again: on the again list (the poller's).
	in, again bool
	read      func(fd uintptr)
}

// errResume gives a client back to its goroutine to read on.
var errResume = errors.New("fleet: reads resumed by the client's goroutine")

// wakeID is the eventfd's id in the set.
const wakeID = -1

// maxPollReads bounds the reads of one client per turn, so a client with
// a full socket cannot hold its scheduler's other clients.
const maxPollReads = 8

// yieldEvery is how many clients the poller reads between yields to the
// other goroutines of its core (a scheduler a reader woke, Fleet.nudge):
// a few microseconds each, so a send waits for a few clients' reads, not
// for the whole batch (hundreds).
const yieldEvery = 16

// pollBatch is how many ready sockets one epoll_wait returns at most.
const pollBatch = 256

// newPoller makes an epoll set; the caller runs it (run) and closes it
// once no client is handed over.
func newPoller() (*poller, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: wakeID}
	if err := unix.EpollCtl(fd, unix.EPOLL_CTL_ADD, wake, &ev); err != nil {
		unix.Close(fd)
		unix.Close(wake)
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		unix.Close(wake)
		return nil, err
	}
	p := &poller{ep: os.NewFile(uintptr(fd), "epoll"), epfd: fd, wake: wake, evs: make([]unix.EpollEvent, pollBatch)}
	if p.rc, err = p.ep.SyscallConn(); err != nil {
		p.ep.Close()
		unix.Close(wake)
		return nil, err
	}
	p.fn = p.turn
	return p, nil
}

// add hands c, read by r, over; false when its socket cannot join the set
// (closed): the goroutine reads on. The reply comes on the returned
// channel.
func (p *poller) add(c *client, r *streamReader) (*polled, bool) {
	e := &polled{c: c, r: r, back: make(chan error, 1)}
	e.read = func(fd uintptr) { e.r.fn(fd) }
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		e.id = p.free[n-1]
		p.free = p.free[:n-1]
		p.slots[e.id] = e
	} else {
		e.id = int32(len(p.slots))
		p.slots = append(p.slots, e)
	}
	e.in = true
	p.mu.Unlock()
	var err error
	cerr := c.raw.Control(func(fd uintptr) {
		// Edge-triggered: bytes already waiting raise an event at once.
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLET, Fd: e.id}
		err = unix.EpollCtl(p.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
	})
	if cerr != nil || err != nil {
		p.mu.Lock()
		p.release(e)
		p.mu.Unlock()
		return nil, false
	}
	p.handed.Add(1)
	return e, true
}

// release frees e's slot; p.mu held.
func (p *poller) release(e *polled) {
	e.in = false
	p.slots[e.id] = nil
	p.free = append(p.free, e.id)
}

// giveBack asks the poller to return e to its goroutine (errResume),
// unless its reads ended first (the goroutine then gets that end).
func (p *poller) giveBack(e *polled) {
	p.mu.Lock()
	p.evict = append(p.evict, e)
	p.mu.Unlock()
	var one = [8]byte{1}
	unix.Write(p.wake, one[:])
}

// run is the poller goroutine: it reads ready clients until the set is
// closed (stop).
func (p *poller) run() {
	defer unix.Close(p.wake)
	for {
		if err := p.rc.Read(p.fn); err != nil || p.closed {
			return
		}
		runtime.Gosched()
	}
}

// stop closes the set; run returns. Every client must be back with its
// goroutine by then.
func (p *poller) stop() {
	p.ep.Close()
}

// turn is one batch of the poller, inside the set's read callback: it
// reads the clients epoll says are ready and those left over from the
// last batch. It returns false (park) when there were none, true to
// come back after run let the other goroutines of its core run: a
// reader woken in the scheduler's stead (Fleet.nudge) waits for the
// batch, not for the poller's time slice.
func (p *poller) turn(epfd uintptr) bool {
	n, err := epollWait(int(epfd), p.evs)
	if err != nil {
		if err == syscall.EINTR {
			return true
		}
		p.closed = true
		return true
	}
	p.mu.Lock()
	ready := p.scratch[:0]
	for _, ev := range p.evs[:n] {
		if ev.Fd == wakeID {
			var b [8]byte
			unix.Read(p.wake, b[:])
			continue
		}
		if e := p.slots[ev.Fd]; e != nil {
			e.r.toEnd = e.r.toEnd || ev.Events&(unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) != 0
			if !e.again {
				ready = append(ready, e)
			}
		}
	}
	evict := p.evict
	p.evict = nil
	p.mu.Unlock()
	// Clients left from the last batch go after the new ones.
	for _, e := range p.again {
		e.again = false
	}
	ready = append(ready, p.again...)
	clear(p.again)
	p.again = p.again[:0]
	for i, e := range ready {
		if e.in {
			p.readClient(e)
		}
		if i%yieldEvery == yieldEvery-1 {
			runtime.Gosched()
		}
	}
	for _, e := range evict {
		if e.in {
			p.end(e, errResume)
		}
	}
	clear(ready)
	p.scratch = ready[:0]
	return n > 0 || len(p.again) > 0
}

// readClient reads e's socket until it is empty, at most maxPollReads
// times (then it goes on the again list), or until its reads end.
func (p *poller) readClient(e *polled) {
	r := e.r
	for range maxPollReads {
		if err := e.c.raw.Control(e.read); err != nil {
			p.end(e, err)
			return
		}
		switch {
		case r.stop:
			p.end(e, nil)
			return
		case r.err != nil:
			p.end(e, r.err)
			return
		case r.parked:
			r.parked = false
			return
		}
	}
	e.again = true
	p.again = append(p.again, e)
}

// end takes e out of the set and gives it back to its goroutine with why
// its reads ended.
func (p *poller) end(e *polled, why error) {
	e.c.raw.Control(func(fd uintptr) {
		unix.EpollCtl(p.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	})
	if e.again {
		e.again = false
		for i, a := range p.again {
			if a == e {
				p.again = append(p.again[:i], p.again[i+1:]...)
				break
			}
		}
	}
	p.mu.Lock()
	p.release(e)
	p.mu.Unlock()
	e.back <- why
}

// epollWait is epoll_wait with a timeout of 0 as a raw system call: it
// never blocks, so it needs none of the runtime's bookkeeping for one
// that may.
func epollWait(epfd int, evs []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
