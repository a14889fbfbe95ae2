package fleet

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/epoll"
	"github.com/reprise-harness/reprise/internal/prefetch"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/uring"
)

// A poller owns the sockets of its scheduler's logged-in stream clients
// (plain TCP and WebSocket over it) from one goroutine, as the relay's
// event loops own theirs: once a client is joined its reader goroutine
// duplicates the socket's descriptor, closes the net.Conn (which takes
// the socket out of Go's netpoller) and returns; the poller puts the
// descriptor in its epoll set (internal/epoll, edge-triggered), reads
// and consumes each ready client inline, each until its socket is empty,
// and ends it: the reason, the disconnect, the close. A goroutine per
// client parked in the runtime's netpoller cost a park and a wake per
// read (about a microsecond, issue 34: at N:N 8x32 some 25 deliveries a
// read), and a socket in both the runtime's epoll set and the poller's
// cost two epoll callbacks per arrival; one poller wake now serves every
// client that became readable meanwhile, and each arrival wakes one set.
//
// Where the kernel has io_uring, a turn reads its ready clients ringBatch
// at a time in one system call (readBatch, internal/uring) into one
// buffer of the poller's; otherwise, and with Config.PlainSyscalls, one
// read(2) each (readEach) into buffers the clients borrow.
//
// The epoll set is itself waited on through the runtime's netpoller (an
// epoll descriptor is readable while its ready list is not empty), so a
// poller with nothing to read parks like any goroutine and holds no
// thread, and the leave's bounded drain is a read deadline on it.
//
// Others reach a handed client through the poller's inbox (post): a
// disconnect by the scheduler ends its reads, a leave bounds them. The
// scheduler and a leave write through the descriptor's reference count
// (rawFD): the poller's close waits for none of them and happens after
// the last. TLS clients stay on their goroutine (their records are opened
// with the tls.Conn's state, and TLS may start in band), and so do UDP
// ones (udpread.go batches those with recvmmsg already).
type poller struct {
	set *epoll.Set
	ep  *os.File // the set's descriptor (a dup) as the runtime parks on it: never its Fd(), that makes it blocking
	rc  syscall.RawConn

	mu       sync.Mutex
	inbox    []post
	notified bool
	stopping bool
	// handed counts the clients handed over (tests, and the docs' figures).
	handed atomic.Int64

	// The poller goroutine's own.
	slots []*polled // by the id in their epoll events; nil when free
	gens  []int32
	// hot holds, by slot, where a read of the client begins in memory
	// (hotLines): the poller's own table, warm, from which the next
	// clients' lines are asked for while one is read (issue 34).
	hot      []prefetch.Addrs
	evs      []readyEv // a batch's events, by slot
	free     []int32
	spare    []post
	again    []*polled // read maxPollReads times, not empty yet
	scratch  []*polled
	draining []*polled // with a deadline (the leave's)
	until    time.Time // the epoll file's read deadline, zero when none
	done     bool
	failed   error // the set failed: every client ends with it
	fn       func(fd uintptr) bool
	// ev is the read scratch of every client it reads (client.ev): one,
	// warm, rather than one a client, cold at each read (issue 34).
	ev profile.Events
	// ring, when the kernel has io_uring, reads a batch's clients in one
	// system call (readBatch); nil: a read(2) each (readClient).
	ring *uring.Ring
	rb   readBatchScratch
	// clock is the fleet's (Fleet.now), for the time of a round's reads;
	// nil: each client's bytes are timed as they are handled.
	clock func() int64
}

// readBatchScratch is readBatch's, by the place in the batch, and the
// buffer a round reads into: one for the poller, warm, rather than a
// buffer each client of a round would hold, cold. Each client's piece is
// maxReadBuf, whatever its reads were (streamReader.size): a read that
// fills its piece waits for the round's other clients to be handled
// before the next round reads the rest, so a piece a read rarely fills
// keeps the deliveries' latency (only the bytes read touch the cache).
type readBatchScratch struct {
	list   []*polled
	fds    []int32
	bufs   [][]byte
	res    []int32
	epochs []int64
	buf    []byte
}

// ringPiece is the room of a client's piece in the round's buffer: its
// maxReadBuf and a few lines more, so that the pieces' starts do not
// share the core's cache sets (16 KiB apart, they would).
const ringPiece = maxReadBuf + 256

// ringBatch is how many clients one io_uring call reads: enough that the
// call's entry is a small part of each read, few enough that the round's
// bytes stay in the core's caches until they are handled (ringBatch
// reads of 3 KiB, the usual size at N:N, are 48 KiB).
const ringBatch = yieldEvery

// polled is one handed-over client.
type polled struct {
	r  *streamReader
	fd *rawFD
	// fdn is fd's number, for the reads: the poller's copy, not one more
	// cold line a read (issue 34). Set by register.
	fdn int
	// ended ends the client once its reads ended, why (nil: the fleet
	// stopped them): its reason, its disconnect, the descriptor's close
	// (client.handOver).
	ended func(why error)
	slot  int32
	// in: registered in the set; again: on the again list; drainBy: the
	// leave's deadline, zero while none (all the poller's).
	in, again bool
	drainBy   time.Time
}

// readyEv is one event of a batch: a slot, its generation then, and
// whether it said hang-up or error. The batch's events are gathered
// first, touching only the poller's own tables, so that each client's
// lines can be asked for before its turn (prefetchAhead).
type readyEv struct {
	slot, gen int32
	hup       bool
}

// prefetchAhead is how many clients ahead of the one read the poller asks
// for the lines of: one read (a system call and its messages) takes a few
// microseconds, many times a miss.
const prefetchAhead = 2

// post is what another goroutine asks of the poller about a client.
type post struct {
	e    *polled
	kind postKind
	at   time.Time
}

type postKind uint8

const (
	postAdd   postKind = iota // take the client over
	postEnd                   // end its reads now (a disconnect)
	postDrain                 // read until the server closes, or at
)

// errDisconnected ends the reads of a client its scheduler or a reply
// disconnected (the reason is counted already).
var errDisconnected = errors.New("fleet: disconnected")

// maxPollReads bounds the reads of one client per turn, so a client with
// a full socket cannot hold its scheduler's other clients.
const maxPollReads = 8

// yieldEvery is how many clients the poller reads between yields to the
// other goroutines of its core (a scheduler a reader woke, Fleet.nudge):
// a few microseconds each, so a send waits for a few clients' reads, not
// for the whole batch (hundreds).
const yieldEvery = 16

// pollBatch is how many ready sockets one wait returns at most.
const pollBatch = 256

// newPoller makes an epoll set, and an io_uring for its reads unless
// plain (or the kernel has none: then why says why); the caller runs it
// (run) and stops it once no client is handed over (every reader
// goroutine and every handed client ended: they are counted in the
// fleet's wait group).
func newPoller(plain bool) (p *poller, why error, err error) {
	if p, err = newEpollPoller(); err != nil {
		return nil, nil, err
	}
	if plain {
		return p, errPlainSyscalls, nil
	}
	p.ring, why = newRing()
	return p, why, nil
}

// newRing makes a ring for batches of ringBatch sockets (uring.Recv,
// uring.Send).
func newRing() (*uring.Ring, error) {
	r, err := uring.New(ringBatch)
	if err != nil {
		return nil, err
	}
	if r.Entries() < ringBatch {
		r.Close()
		return nil, fmt.Errorf("io_uring: a ring of %d entries, not %d", r.Entries(), ringBatch)
	}
	return r, nil
}

// errPlainSyscalls is why a poller reads with read(2) when told to.
var errPlainSyscalls = errors.New("plain system calls asked for (--plain-syscalls)")

// newEpollPoller is newPoller's epoll set and descriptor.
func newEpollPoller() (*poller, error) {
	set, err := epoll.New(pollBatch)
	if err != nil {
		return nil, err
	}
	fd, err := unix.FcntlInt(uintptr(set.Fd()), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		set.Close()
		return nil, err
	}
	p := &poller{set: set, ep: os.NewFile(uintptr(fd), "epoll")}
	if p.rc, err = p.ep.SyscallConn(); err != nil {
		p.ep.Close()
		set.Close()
		return nil, err
	}
	p.fn = p.turn
	return p, nil
}

// clientsPolled is how many clients f's pollers were handed.
func (f *Fleet) clientsPolled() int64 {
	var n int64
	for _, sh := range f.scheds {
		if sh.poll != nil {
			n += sh.poll.handed.Load()
		}
	}
	return n
}

// post asks the poller to act on e; safe from any goroutine.
func (p *poller) post(e *polled, kind postKind, at time.Time) {
	p.mu.Lock()
	p.inbox = append(p.inbox, post{e, kind, at})
	wake := !p.notified
	p.notified = true
	p.mu.Unlock()
	if wake {
		p.set.Wake()
	}
}

// run is the poller goroutine: it reads ready clients until stopped.
func (p *poller) run() {
	defer p.set.Close()
	defer p.ep.Close()
	if p.ring != nil {
		defer p.ring.Close()
	}
	for !p.done {
		err := p.rc.Read(p.fn)
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
		default: // the set's file failed: nothing can wake the poller any more
			p.fail(err)
		}
		p.expire()
		runtime.Gosched()
	}
}

// stop makes run return; every client must have ended by then.
func (p *poller) stop() {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	p.set.Wake()
}

// turn is one batch of the poller, inside the set's read callback: it
// takes the inbox, then reads the clients epoll says are ready and those
// left over from the last batch. After a batch it lets the other
// goroutines of its core run (a reader woken in the scheduler's stead,
// Fleet.nudge, waits for the batch, not for the poller's time slice),
// then returns false (wait for the set), or true (come back through run)
// when clients are left over, the batch was full or the inbox was taken. An arrival after the
// poll makes the set's descriptor readable for the runtime's netpoller
// (the set is edge-triggered for it too), so the wait misses none.
func (p *poller) turn(uintptr) bool {
	n, err := p.set.Poll()
	if err != nil {
		p.fail(err)
		return true
	}
	evs := p.evs[:0]
	woken := false
	for _, ev := range p.set.Events[:n] {
		if ev.Fd == epoll.WakeID {
			p.set.Woken()
			woken = true
			continue
		}
		if int(ev.Fd) < len(p.slots) && p.gens[ev.Fd] == ev.Pad {
			evs = append(evs, readyEv{ev.Fd, ev.Pad, ev.Events&(unix.EPOLLERR|unix.EPOLLHUP|unix.EPOLLRDHUP) != 0})
		}
	}
	p.evs = evs
	if woken && p.takeInbox() {
		p.done = true
		return true
	}
	// Clients left from the last batch go after the new ones, and one
	// with a new event too is read there, once (its again flag stays set
	// until then).
	again := append(p.scratch[:0], p.again...)
	clear(p.again)
	p.again = p.again[:0]
	if p.ring != nil {
		p.readBatch(p.batchOf(evs, again))
	} else {
		p.readEach(evs, again)
	}
	clear(again)
	p.scratch = again[:0]
	if len(p.again) > 0 || n == len(p.set.Events) || woken {
		// More waits for certain, or the inbox was taken: read again
		// after run's yield and expire (a drain taken now needs its
		// deadline set before the wait).
		return true
	}
	if n > 0 {
		// Yield here, then park: RawConn.Read's wait returns at once
		// when the set became readable since run's Read began (an
		// arrival during this batch), and parks the poller otherwise,
		// without a poll that finds the set empty. Coming back through
		// run made that poll after every batch: a third of the
		// poller's epoll_pwait calls at N:N 8x32 (issue 34).
		runtime.Gosched()
	}
	return false
}

// readEach reads the clients of the batch's events, then those left over
// from the last turn (again), one read(2) at a time (readClient). One
// with a new event too is read with the left-overs, once (its again flag
// stays set until then).
func (p *poller) readEach(evs []readyEv, again []*polled) {
	read := 0
	for i := range evs {
		if e := p.toRead(evs, i); e != nil {
			read = p.readYielding(e, read)
		}
	}
	for _, e := range again { // just read: warm
		if !e.again {
			continue // ended meanwhile
		}
		e.again = false
		if e.in {
			read = p.readYielding(e, read)
		}
	}
}

// readYielding reads e as the batch's read-th client, and lets the other
// goroutines of its core run after every yieldEvery reads; it returns
// the count with e's read.
func (p *poller) readYielding(e *polled, read int) int {
	p.readClient(e)
	if read++; read%yieldEvery == 0 {
		runtime.Gosched()
	}
	return read
}

// takeInbox acts on what other goroutines posted; it reports whether the
// poller is to stop.
func (p *poller) takeInbox() bool {
	p.mu.Lock()
	inbox := p.inbox
	p.inbox = p.spare[:0]
	p.notified = false
	stopping := p.stopping
	p.mu.Unlock()
	for _, m := range inbox {
		switch e := m.e; m.kind {
		case postAdd:
			p.register(e)
		case postEnd:
			if e.in {
				p.end(e, errDisconnected)
			}
		case postDrain:
			if e.in && e.drainBy.IsZero() {
				e.drainBy = m.at
				p.draining = append(p.draining, e)
			}
		}
	}
	clear(inbox)
	p.spare = inbox[:0]
	return stopping
}

// register puts e's descriptor in the set. Edge-triggered: bytes already
// waiting raise an event at once.
func (p *poller) register(e *polled) {
	p.handed.Add(1)
	if p.failed != nil {
		p.endOut(e, p.failed)
		return
	}
	if k := len(p.free); k > 0 {
		e.slot, p.free = p.free[k-1], p.free[:k-1]
	} else {
		e.slot = int32(len(p.slots))
		p.slots = append(p.slots, nil)
		p.gens = append(p.gens, 0)
		p.hot = append(p.hot, prefetch.Addrs{})
	}
	p.gens[e.slot]++
	p.slots[e.slot] = e
	e.in, e.fdn = true, e.fd.fd
	p.hot[e.slot] = hotLines(e)
	if err := p.set.Add(e.fd.fd, unix.EPOLLIN|unix.EPOLLRDHUP, e.slot, p.gens[e.slot]); err != nil {
		p.end(e, err)
	}
}

// hotLines are the cache lines a read of e touches first, in the order
// it touches them: its entry, its reader's fields, its client's first
// lines and the profile's (profile.HotLines). Addresses of objects that
// live as long as the client; a prefetch of a stale one is only a hint
// wasted.
func hotLines(e *polled) prefetch.Addrs {
	r := e.r
	a := prefetch.Addrs{uintptr(unsafe.Pointer(e)), uintptr(unsafe.Pointer(r)), uintptr(unsafe.Pointer(r)) + 64}
	c := r.cl
	if c == nil {
		return a
	}
	a[3], a[4] = uintptr(unsafe.Pointer(c)), uintptr(unsafe.Pointer(c))+64
	n := 5
	if c.ws && c.wsr != nil {
		// A WebSocket read goes through the client's frame reader
		// first: the line that points to it, then the reader (issue
		// 34, perf annotate at one message a read: the pointer's load
		// was 83 % of feedWS's samples, the reader's first field a
		// quarter of WSReader.Feed's).
		a[5], a[6] = uintptr(unsafe.Pointer(c))+unsafe.Offsetof(c.wsr), uintptr(unsafe.Pointer(c.wsr))
		n = 7
	}
	if h, ok := c.pc.(profile.HotLines); ok {
		var more [prefetch.Max]uintptr
		copy(a[n:], h.HotLines(more[:0]))
	}
	return a
}

// readClient reads e's socket until it is empty, at most maxPollReads
// times (then it goes on the again list), or until its reads end.
func (p *poller) readClient(e *polled) {
	r := e.r
	for range maxPollReads {
		r.readFD(uintptr(e.fdn))
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

// toRead is the client of the batch's i-th event when the turn's first
// pass reads it (nil: it ended meanwhile, its slot free or taken again by
// the inbox, or it waits on the again list), its hang-up noted. It asks
// for the lines of the client prefetchAhead events on (at the first
// event, of the first ones too): the client's entry and reader are its
// first loads, a chain of misses otherwise (issue 34).
func (p *poller) toRead(evs []readyEv, i int) *polled {
	if i == 0 {
		for k := range min(prefetchAhead, len(evs)) {
			prefetch.Lines(&p.hot[evs[k].slot])
		}
	}
	if j := i + prefetchAhead; j < len(evs) {
		prefetch.Lines(&p.hot[evs[j].slot])
	}
	x := evs[i]
	e := p.slots[x.slot]
	if e == nil || p.gens[x.slot] != x.gen {
		return nil
	}
	if x.hup {
		e.r.toEnd = true // written only when set: the reader's line stays clean
	}
	if !e.in || e.again {
		return nil
	}
	return e
}

// batchOf lists the clients a turn reads: those of the batch's events,
// then those left over from the last turn (again), each once, as the
// read(2) path takes them.
func (p *poller) batchOf(evs []readyEv, again []*polled) []*polled {
	list := p.rb.list[:0]
	for i := range evs {
		if e := p.toRead(evs, i); e != nil {
			list = append(list, e)
		}
	}
	for _, e := range again {
		if !e.again {
			continue // ended meanwhile
		}
		e.again = false
		if e.in {
			list = append(list, e)
		}
	}
	p.rb.list = list
	return list
}

// readBatch reads list's clients as readClient reads one: until each
// socket is empty, at most maxPollReads times (then it goes on the again
// list), or until its reads end. Each round reads every client still
// listed once, ringBatch of them in one system call (uring.Recv): a
// read(2) a client paid a system call's entry and the file layers above
// the socket, about 40 % of a 3 KB read's cost here (issue 34). The
// bytes are handled after the round's call, client by client, as readFD
// would.
func (p *poller) readBatch(list []*polled) {
	read := 0
	for round := 0; len(list) > 0; round++ {
		if round == maxPollReads {
			for _, e := range list {
				e.again = true
				p.again = append(p.again, e)
			}
			clear(list)
			return
		}
		more := list[:0] // filtered in place: written behind the reads
		for k := 0; k < len(list); k += ringBatch {
			more, read = p.readRound(list[k:min(k+ringBatch, len(list))], more, read)
		}
		clear(list[len(more):])
		list = more
	}
}

// readRound reads each client of chunk once, in one call, hands each its
// bytes, and appends to more those whose sockets hold more; read counts
// the clients read, for the yields.
func (p *poller) readRound(chunk, more []*polled, read int) ([]*polled, int) {
	rb := &p.rb
	if rb.buf == nil {
		rb.buf = make([]byte, ringBatch*ringPiece)
	}
	rb.fds, rb.bufs, rb.res, rb.epochs = rb.fds[:0], rb.bufs[:0], rb.res[:0], rb.epochs[:0]
	off := 0
	for _, e := range chunk {
		r := e.r
		if r.buf != nil { // lent before the handover: the round's buffer reads now
			putReadBuf(r.buf)
			r.buf = nil
		}
		rb.epochs = append(rb.epochs, r.wake())
		rb.fds = append(rb.fds, int32(e.fdn))
		rb.bufs = append(rb.bufs, rb.buf[off:off+maxReadBuf:off+maxReadBuf])
		rb.res = append(rb.res, 0)
		off += ringPiece
	}
	p.ring.Recv(rb.fds, rb.bufs, rb.res) // an error turned it to read(2): the results stand
	var at int64
	if p.clock != nil {
		at = p.clock() // one reading for the round: every read was made by now
	}
	for i := range min(prefetchAhead, len(chunk)) {
		prefetch.Lines(&p.hot[chunk[i].slot])
	}
	for i, e := range chunk {
		if j := i + prefetchAhead; j < len(chunk) {
			prefetch.Lines(&p.hot[chunk[j].slot])
		}
		b := rb.bufs[i]
		n, left, err := readResult(rb.res[i], len(b))
		r := e.r
		r.at = at
		r.finish(b, rb.epochs[i], n, left, err)
		r.at = 0
		switch {
		case r.stop:
			p.end(e, nil)
		case r.err != nil:
			p.end(e, r.err)
		case r.parked:
			r.parked = false
		default:
			more = append(more, e)
		}
		if read++; read%yieldEvery == 0 {
			runtime.Gosched()
		}
	}
	clear(rb.bufs)
	return more, read
}

// readResult is a batched read's result as streamReader.recv returns a
// poller's: a read that did not fill the buffer emptied the socket (the
// set is edge-triggered: an arrival after it raises a new event).
func readResult(res int32, size int) (n, left int, err error) {
	switch {
	case res < 0:
		return 0, -1, syscall.Errno(-res)
	case int(res) < size:
		return int(res), 0, nil
	}
	return int(res), -1, nil
}

// end takes e out of the set and ends the client: why its reads ended
// (nil: the fleet stopped them) says its reason.
func (p *poller) end(e *polled, why error) {
	p.set.Del(e.fd.fd)
	if e.again {
		e.again = false
		for i, a := range p.again {
			if a == e {
				p.again = append(p.again[:i], p.again[i+1:]...)
				break
			}
		}
	}
	e.in = false
	p.slots[e.slot] = nil
	p.free = append(p.free, e.slot)
	p.endOut(e, why)
}

// endOut ends a client that is not (or no longer) in the set.
func (p *poller) endOut(e *polled, why error) {
	e.r.release()
	e.ended(why)
}

// expire ends the drains whose deadline passed and sets the epoll file's
// read deadline to the next one.
func (p *poller) expire() {
	if len(p.draining) == 0 {
		return
	}
	now := time.Now()
	var next time.Time
	keep := p.draining[:0]
	for _, e := range p.draining {
		switch {
		case !e.in:
		case !now.Before(e.drainBy):
			p.end(e, os.ErrDeadlineExceeded)
		default:
			keep = append(keep, e)
			if next.IsZero() || e.drainBy.Before(next) {
				next = e.drainBy
			}
		}
	}
	clear(p.draining[len(keep):])
	p.draining = keep
	if !next.Equal(p.until) {
		p.until = next
		p.ep.SetReadDeadline(next)
	}
}

// fail ends every client with err once the set cannot be waited on.
func (p *poller) fail(err error) {
	p.failed = err
	for _, e := range p.slots {
		if e != nil && e.in {
			p.end(e, err)
		}
	}
	p.takeInbox()
	if !p.stopping {
		time.Sleep(time.Millisecond) // nothing parks it any more: stop spinning
	}
	p.mu.Lock()
	p.done = p.stopping
	p.mu.Unlock()
}

// rawFD is a handed-over client's socket: a descriptor of its own, out
// of the runtime's netpoller. The poller reads it and closes it; the
// scheduler's writes, a reply's, the leave's and the disconnect's
// shutdown go through a reference (syscall.RawConn, as c.raw), and the
// descriptor is closed after the last of them, so none ever acts on a
// number the kernel gave to another socket.
type rawFD struct {
	fd    int
	state atomic.Int64 // references, and fdClosing
}

const fdClosing = 1 << 62

func (s *rawFD) acquire() bool {
	for {
		v := s.state.Load()
		if v&fdClosing != 0 {
			return false
		}
		if s.state.CompareAndSwap(v, v+1) {
			return true
		}
	}
}

func (s *rawFD) release() {
	if s.state.Add(-1) == fdClosing {
		unix.Close(s.fd)
	}
}

// close closes the descriptor now, or after the last reference.
func (s *rawFD) close() {
	if s.state.Or(fdClosing) == 0 {
		unix.Close(s.fd)
	}
}

func (s *rawFD) Control(f func(fd uintptr)) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	f(uintptr(s.fd))
	s.release()
	return nil
}

// Read and Write never wait: f is called once, and a false from it (wait
// for the socket) is EAGAIN.
func (s *rawFD) Read(f func(fd uintptr) bool) error { return s.once(f) }

func (s *rawFD) Write(f func(fd uintptr) bool) error { return s.once(f) }

func (s *rawFD) once(f func(fd uintptr) bool) error {
	if !s.acquire() {
		return net.ErrClosed
	}
	ok := f(uintptr(s.fd))
	s.release()
	if !ok {
		return syscall.EAGAIN
	}
	return nil
}

// writeBy writes all of b before deadline (the leave's, from its own
// goroutine), waiting for room with poll(2).
func (s *rawFD) writeBy(b []byte, deadline time.Time) (int, error) {
	if !s.acquire() {
		return 0, net.ErrClosed
	}
	defer s.release()
	n := 0
	for n < len(b) {
		m, err := unix.Write(s.fd, b[n:])
		if m > 0 {
			n += m
		}
		switch {
		case err == nil || err == unix.EINTR:
			continue
		case err != unix.EAGAIN:
			return n, err
		}
		ms := time.Until(deadline).Milliseconds()
		if ms <= 0 {
			return n, os.ErrDeadlineExceeded
		}
		pfd := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLOUT}}
		if _, err := unix.Poll(pfd, int(min(ms, 1<<30))); err != nil && err != unix.EINTR {
			return n, err
		}
	}
	return n, nil
}
