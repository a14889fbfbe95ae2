package fleet

import (
	"math/bits"
	"net"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpReader reads a UDP client's datagrams with recvmmsg: one call takes
// every datagram waiting (up to udpBatchMax), so a room's burst costs its
// receiver one wake-up and one system call instead of one per datagram. It
// starts with one slot of readBuf bytes, doubles its slots when a read
// fills them all, and halves them after shrinkAfter reads that needed at
// most a quarter. The slots (buffers and recvmmsg's headers) are lent from
// a pool per shape: taken when the socket is readable, given back whenever
// a read finds no datagram, so an idle client holds none while it waits,
// whatever burst (a room's join notices) grew its slots before. Read
// deadlines (the join retry's) work as on conn.Read: the netpoller parks
// the reader through the socket's RawConn.
type udpReader struct {
	rc    syscall.RawConn
	size  int       // bytes per slot
	k     int       // slots
	slots *udpSlots // lent while the socket has datagrams, else nil
	small int
	n     int
	err   error
	fn    func(fd uintptr) bool
}

// udpSlots are k buffers of one size wired to recvmmsg's headers.
type udpSlots struct {
	bufs [][]byte
	hdrs []mmsghdr
	iovs []unix.Iovec
}

// mmsghdr is struct mmsghdr (Go pads it as C does on every Linux ABI).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// udpBatchMax bounds the datagrams one read takes.
const udpBatchMax = 32

// udpKClasses are the slot counts 1, 2, 4 ... udpBatchMax.
const udpKClasses = 6

// The slot counts span 1..udpBatchMax exactly (a compile-time check).
var _ = [1]struct{}{}[udpBatchMax-1<<(udpKClasses-1)]

// udpPools hold slot sets by slot count and buffer size class.
var udpPools [udpKClasses][readClasses]sync.Pool

func udpPool(k, size int) *sync.Pool {
	return &udpPools[bits.Len(uint(k))-1][readClass(size)]
}

// getUDPSlots lends k slots of size bytes.
func getUDPSlots(k, size int) *udpSlots {
	if s, ok := udpPool(k, size).Get().(*udpSlots); ok {
		return s
	}
	slab := make([]byte, k*size)
	s := &udpSlots{bufs: make([][]byte, k), hdrs: make([]mmsghdr, k), iovs: make([]unix.Iovec, k)}
	for i := range k {
		s.bufs[i] = slab[i*size : (i+1)*size : (i+1)*size]
		s.iovs[i].Base = &s.bufs[i][0]
		s.iovs[i].SetLen(size)
		s.hdrs[i].hdr.Iov = &s.iovs[i]
		s.hdrs[i].hdr.SetIovlen(1)
	}
	return s
}

func newUDPReader(c *net.UDPConn) (*udpReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &udpReader{rc: rc, size: readBuf, k: 1}
	r.fn = func(fd uintptr) bool {
		if r.slots == nil {
			r.slots = getUDPSlots(r.k, r.size)
		}
		h := r.slots.hdrs
		for i := range h {
			h[i].hdr.Flags = 0
		}
		// MSG_DONTWAIT: it never waits, so a raw call (streamReader.recv).
		n, _, e := unix.RawSyscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&h[0])), uintptr(len(h)), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EINTR {
			return false
		}
		if e == unix.EAGAIN {
			r.release()
			return false // wait until readable (or the deadline)
		}
		r.n, r.err = int(n), nil
		if e != 0 {
			r.n, r.err = 0, e
		}
		return true
	}
	return r, nil
}

// resize gives the reader k slots of r.size bytes from the next read on.
func (r *udpReader) resize(k int) {
	r.release()
	r.k = k
}

// release gives the slots back (the socket is empty, or the reader is
// done); safe to repeat.
func (r *udpReader) release() {
	if r.slots != nil {
		udpPool(len(r.slots.bufs), len(r.slots.bufs[0])).Put(r.slots)
		r.slots = nil
	}
}

// read waits for at least one datagram and returns how many it read.
func (r *udpReader) read() (int, error) {
	if err := r.rc.Read(r.fn); err != nil {
		return 0, err
	}
	runtime.KeepAlive(r)
	if r.err != nil {
		return 0, r.err
	}
	return r.n, nil
}

// datagram is the i-th datagram of the last read (cut short if it was
// larger than a slot: it then fails to decode, as with conn.Read).
func (r *udpReader) datagram(i int) []byte { return r.slots.bufs[i][:r.slots.hdrs[i].n] }

// adapt sizes the slots to the last read of n datagrams: more slots when
// all were used, fewer after a run of small reads, bigger slots when a
// datagram filled one (up to maxReadBuf).
func (r *udpReader) adapt(n int) {
	k := r.k
	full := false
	for i := range n {
		full = full || int(r.slots.hdrs[i].n) == r.size
	}
	switch {
	case full && r.size < maxReadBuf:
		r.size *= 2
		r.small = 0
		r.resize(k)
	case n == k && k < udpBatchMax:
		r.small = 0
		r.resize(2 * k)
	case k > 1 && n <= k/4:
		if r.small++; r.small >= shrinkAfter {
			r.small = 0
			r.resize(k / 2)
		}
	default:
		r.small = 0
	}
}
