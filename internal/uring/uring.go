// Package uring reads or writes many non-blocking sockets in one system
// call, through a Linux io_uring: an event loop that knows which sockets
// are readable (internal/epoll), or a scheduler with a turn's sends for
// many sockets, hands them over as one batch, and each read or write does
// no less than read(2) or write(2) would, nothing after the call returns.
// A system call a socket pays an entry and exit and the file layers above
// the socket (about 250 ns of a 550 ns read of 3 KB on the project's
// machine kind, issue 34); a batch pays one entry for all.
//
// It is not an io_uring library: no operation outlives the call that
// submitted it (each is MSG_DONTWAIT and completes or fails with EAGAIN
// at once, as New checks on the kernel it runs on), so the kernel never
// touches a buffer after Recv or Send returns, and there is nothing to
// cancel at Close. No timers, no registered buffers, no waiting.
//
// Where the kernel has no io_uring, or forbids it (a container's seccomp
// profile, kernel.io_uring_disabled), New fails and the caller reads with
// read(2) as before. A Ring that meets a kernel it does not expect at run
// time (a read that did not complete in the call) waits for it, and then
// reads each socket with read(2) for the rest of its life.
package uring

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's ABI (include/uapi/linux/io_uring.h).
const (
	opAsyncCancel = 14
	opSend        = 26
	opRecv        = 27

	setupClamp     = 1 << 4
	setupSubmitAll = 1 << 7 // 5.18: one SQE's error does not stop the batch

	enterGetEvents = 1 << 0

	offSQRing = 0
	offCQRing = 0x8000000
	offSQEs   = 0x10000000

	featSingleMmap = 1 << 0
)

type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

type params struct {
	sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
	resv                                                                   [3]uint32
	sqOff                                                                  sqringOffsets
	cqOff                                                                  cqringOffsets
}

type sqe struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off, addr     uint64
	len, opFlags  uint32
	userData      uint64
	bufIndex      uint16
	personality   uint16
	spliceFdIn    int32
	addr3, pad    uint64
}

type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// The ABI's sizes (a compile-time check).
var (
	_ = [1]struct{}{}[unsafe.Sizeof(params{})-120]
	_ = [1]struct{}{}[unsafe.Sizeof(sqe{})-64]
	_ = [1]struct{}{}[unsafe.Sizeof(cqe{})-16]
)

// Ring reads batches of sockets. Not safe for concurrent use: it belongs
// to one event loop.
type Ring struct {
	fd      int
	entries int
	rings   []byte // the SQ and CQ rings (one mapping, or the SQ ring's)
	cqMap   []byte // the CQ ring's own mapping, when not shared
	sqeMap  []byte

	sqHead, sqTail, sqMask *uint32
	sqes                   []sqe
	cqHead, cqTail, cqMask *uint32
	cqes                   []cqe

	// plain: the ring met an operation that did not complete within its
	// call; every read is read(2), and every write write(2), from then on.
	plain bool
	done  []bool // batch's scratch: which of the batch completed
	// probeBuf is probe's buffer: on the heap (a field of the Ring), so
	// that no read the kernel might still hold could point into a stack
	// the runtime moves.
	probeBuf []byte
}

// ErrUnavailable wraps why a Ring cannot be made here.
var ErrUnavailable = errors.New("io_uring unavailable")

// New makes a ring for batches of up to entries reads or writes, and
// checks that MSG_DONTWAIT ones complete within their call (probe).
func New(entries int) (*Ring, error) {
	p := params{flags: setupClamp | setupSubmitAll, cqEntries: 0}
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("%w: io_uring_setup: %v", ErrUnavailable, e)
	}
	r := &Ring{fd: int(fd), entries: int(p.sqEntries), probeBuf: make([]byte, 16)}
	if err := r.mapRings(&p); err != nil {
		r.Close()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := r.probe(); err != nil {
		r.Close()
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	r.done = make([]bool, r.entries)
	return r, nil
}

// mapRings maps the rings and the SQE array.
func (r *Ring) mapRings(p *params) error {
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*int(unsafe.Sizeof(cqe{}))
	single := p.features&featSingleMmap != 0
	if single {
		sqSize = max(sqSize, cqSize)
	}
	var err error
	if r.rings, err = unix.Mmap(r.fd, offSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("map SQ ring: %w", err)
	}
	cq := r.rings
	if !single {
		if r.cqMap, err = unix.Mmap(r.fd, offCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			return fmt.Errorf("map CQ ring: %w", err)
		}
		cq = r.cqMap
	}
	if r.sqeMap, err = unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*int(unsafe.Sizeof(sqe{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fmt.Errorf("map SQEs: %w", err)
	}
	sq := unsafe.Pointer(&r.rings[0])
	r.sqHead = (*uint32)(unsafe.Add(sq, p.sqOff.head))
	r.sqTail = (*uint32)(unsafe.Add(sq, p.sqOff.tail))
	r.sqMask = (*uint32)(unsafe.Add(sq, p.sqOff.ringMask))
	array := unsafe.Slice((*uint32)(unsafe.Add(sq, p.sqOff.array)), p.sqEntries)
	for i := range array {
		array[i] = uint32(i) // SQE i at SQ slot i, for good
	}
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&r.sqeMap[0])), p.sqEntries)
	c := unsafe.Pointer(&cq[0])
	r.cqHead = (*uint32)(unsafe.Add(c, p.cqOff.head))
	r.cqTail = (*uint32)(unsafe.Add(c, p.cqOff.tail))
	r.cqMask = (*uint32)(unsafe.Add(c, p.cqOff.ringMask))
	r.cqes = unsafe.Slice((*cqe)(unsafe.Add(c, p.cqOff.cqes)), p.cqEntries)
	return nil
}

// probe reads an empty socket, writes 3 bytes to its peer and reads them,
// through the ring: each must complete within the call, with EAGAIN, 3
// and 3.
func (r *Ring) probe() error {
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer unix.Close(sp[0])
	defer unix.Close(sp[1])
	r.done = make([]bool, 1)
	b, abc := r.probeBuf[:8], r.probeBuf[8:11]
	copy(abc, "abc")
	res := []int32{0}
	if err := r.submit(opRecv, []int32{int32(sp[0])}, [][]byte{b}, res); err != nil || r.plain {
		return fmt.Errorf("probe: a read of an empty socket did not complete within its call (%v)", err)
	}
	if res[0] != -int32(unix.EAGAIN) {
		return fmt.Errorf("probe: a read of an empty socket returned %d, not EAGAIN", res[0])
	}
	if err := r.submit(opSend, []int32{int32(sp[1])}, [][]byte{abc}, res); err != nil || r.plain || res[0] != 3 {
		return fmt.Errorf("probe: a write of 3 bytes returned %d (%v)", res[0], err)
	}
	if err := r.submit(opRecv, []int32{int32(sp[0])}, [][]byte{b}, res); err != nil || r.plain || res[0] != 3 || string(b[:3]) != "abc" {
		return fmt.Errorf("probe: a read of 3 bytes returned %d (%v)", res[0], err)
	}
	return nil
}

// Entries is the most sockets one Recv or Send takes.
func (r *Ring) Entries() int { return r.entries }

// Recv reads fds[i] into bufs[i] (each non-empty), for every i, in one
// system call, and sets res[i] to the bytes read, 0 at end of stream, or
// the negated errno (-EAGAIN: nothing to read). At most Entries reads.
// When it returns, no read is in flight. An error says the ring failed;
// res is complete even then (the reads it could not make were made with
// read(2)).
func (r *Ring) Recv(fds []int32, bufs [][]byte, res []int32) error {
	return r.batch(opRecv, fds, bufs, res)
}

// Send writes bufs[i] (each non-empty) to fds[i], for every i, in one
// system call, as Recv reads: res[i] is the bytes the socket took (fewer
// than len(bufs[i]) when its buffer filled) or the negated errno (-EAGAIN:
// no room at all, -EPIPE: the connection is shut; never a SIGPIPE).
func (r *Ring) Send(fds []int32, bufs [][]byte, res []int32) error {
	return r.batch(opSend, fds, bufs, res)
}

// batch is Recv or Send.
func (r *Ring) batch(op uint8, fds []int32, bufs [][]byte, res []int32) error {
	if len(fds) > r.entries || len(bufs) != len(fds) || len(res) != len(fds) {
		return fmt.Errorf("uring: a batch of %d (%d buffers, %d results) for a ring of %d", len(fds), len(bufs), len(res), r.entries)
	}
	if len(fds) == 0 {
		return nil
	}
	if r.plain {
		eachPlain(op, fds, bufs, res, nil)
		return nil
	}
	return r.submit(op, fds, bufs, res)
}

// submit is batch on the ring.
func (r *Ring) submit(op uint8, fds []int32, bufs [][]byte, res []int32) error {
	n := len(fds)
	tail := atomic.LoadUint32(r.sqTail)
	mask := *r.sqMask
	for i, fd := range fds {
		b := bufs[i]
		r.sqes[(tail+uint32(i))&mask] = sqe{opcode: op, fd: fd, addr: uint64(uintptr(unsafe.Pointer(&b[0]))), len: uint32(len(b)), opFlags: unix.MSG_DONTWAIT | unix.MSG_NOSIGNAL, userData: uint64(i)}
	}
	atomic.StoreUint32(r.sqTail, tail+uint32(n))
	done := r.done[:n]
	clear(done)
	submitted, err := r.enter(n, 0, 0)
	got := r.reap(done, res)
	if err == nil && submitted == n && got == n {
		return nil // the usual case: every one completed in the call
	}
	// The kernel did not do as New found: take back what it did not
	// submit, wait for what it did (cancelled), do the rest plainly.
	r.plain = true
	if submitted < n {
		atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqHead))
	}
	if werr := r.settle(done, res, submitted); werr != nil {
		err = errors.Join(err, werr)
	}
	eachPlain(op, fds, bufs, res, done)
	if err == nil {
		err = fmt.Errorf("uring: %d of %d submitted, %d completed within the call", submitted, n, got)
	}
	return err
}

// enter submits n SQEs and waits for min completions: a raw system
// call when it does not wait (the runtime's bookkeeping for one that may
// block is for a call that may).
func (r *Ring) enter(n, min int, flags uintptr) (int, error) {
	for {
		var m uintptr
		var e syscall.Errno
		if min == 0 {
			m, _, e = unix.RawSyscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), 0, flags, 0, 0)
		} else {
			m, _, e = unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(n), uintptr(min), flags, 0, 0)
		}
		switch e {
		case 0:
			return int(m), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// reap takes the completions there are: res by their index, done set;
// it returns how many were reads.
func (r *Ring) reap(done []bool, res []int32) int {
	head, tail := atomic.LoadUint32(r.cqHead), atomic.LoadUint32(r.cqTail)
	got := 0
	for ; head != tail; head++ {
		c := r.cqes[head&*r.cqMask]
		if i := c.userData; i < uint64(len(done)) {
			res[i], done[i] = c.res, true
			got++
		}
	}
	atomic.StoreUint32(r.cqHead, head)
	return got
}

// settle cancels each of the first submitted reads not done, one cancel
// by its index (io_uring's oldest kind, 5.5), and waits until every one
// has completed; a read the cancel stopped read nothing and is left not
// done, for read(2).
func (r *Ring) settle(done []bool, res []int32, submitted int) error {
	var inflight []int
	for i := range submitted {
		if !done[i] {
			inflight = append(inflight, i)
		}
	}
	if len(inflight) == 0 {
		return nil
	}
	for k := 0; k < len(inflight); k += r.entries {
		batch := inflight[k:min(k+r.entries, len(inflight))]
		tail := atomic.LoadUint32(r.sqTail)
		for j, i := range batch {
			r.sqes[(tail+uint32(j))&*r.sqMask] = sqe{opcode: opAsyncCancel, fd: -1, addr: uint64(i), userData: cancelTag | uint64(i)}
		}
		atomic.StoreUint32(r.sqTail, tail+uint32(len(batch)))
		if _, err := r.enter(len(batch), 0, 0); err != nil {
			// Wait for them all the same: a read still in flight
			// would write a buffer its caller has taken back.
			atomic.StoreUint32(r.sqTail, atomic.LoadUint32(r.sqHead))
			break
		}
	}
	left := len(inflight)
	for left > 0 {
		if _, err := r.enter(0, 1, enterGetEvents); err != nil {
			return fmt.Errorf("uring: wait for cancelled reads: %w", err)
		}
		left -= r.reap(done, res)
	}
	for _, i := range inflight {
		if res[i] == -int32(unix.ECANCELED) {
			done[i] = false
		}
	}
	return nil
}

// cancelTag marks a cancel's completion, which reap passes over.
const cancelTag = 1 << 63

// eachPlain reads (opRecv, read(2)) or writes (opSend, write(2)) each fd
// not done.
func eachPlain(op uint8, fds []int32, bufs [][]byte, res []int32, done []bool) {
	call := uintptr(unix.SYS_READ)
	if op == opSend {
		call = unix.SYS_WRITE
	}
	for i, fd := range fds {
		if done != nil && done[i] {
			continue
		}
		b := bufs[i]
		for {
			m, _, e := unix.RawSyscall(call, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			if e == unix.EINTR {
				continue
			}
			if e != 0 {
				res[i] = -int32(e)
			} else {
				res[i] = int32(m)
			}
			break
		}
	}
}

// Close releases the ring; no read is in flight between calls.
func (r *Ring) Close() error {
	var errs []error
	for _, m := range [][]byte{r.sqeMap, r.cqMap, r.rings} {
		if m != nil {
			errs = append(errs, unix.Munmap(m))
		}
	}
	r.sqeMap, r.cqMap, r.rings = nil, nil, nil
	errs = append(errs, unix.Close(r.fd))
	return errors.Join(errs...)
}
