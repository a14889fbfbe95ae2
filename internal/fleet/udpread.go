package fleet

import (
	"net"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpReader reads a UDP client's datagrams with recvmmsg: one call takes
// every datagram waiting (up to udpBatchMax), so a room's burst costs its
// receiver one wake-up and one system call instead of one per datagram. It
// starts with one slot of readBuf bytes, doubles its slots when a read
// fills them all, and halves them after shrinkAfter reads that needed at
// most a quarter, so an idle or receive-only client keeps one small buffer
// as before. Read deadlines (the join retry's) work as on conn.Read: the
// netpoller parks the reader through the socket's RawConn.
type udpReader struct {
	rc    syscall.RawConn
	size  int // bytes per slot
	bufs  [][]byte
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	small int
	n     int
	err   error
	fn    func(fd uintptr) bool
}

// mmsghdr is struct mmsghdr (Go pads it as C does on every Linux ABI).
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// udpBatchMax bounds the datagrams one read takes.
const udpBatchMax = 32

func newUDPReader(c *net.UDPConn) (*udpReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &udpReader{rc: rc, size: readBuf}
	r.resize(1)
	r.fn = func(fd uintptr) bool {
		for i := range r.hdrs {
			r.hdrs[i].hdr.Flags = 0
		}
		n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		if e == unix.EAGAIN || e == unix.EINTR {
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

// resize gives the reader k slots of r.size bytes.
func (r *udpReader) resize(k int) {
	slab := make([]byte, k*r.size)
	r.bufs, r.hdrs, r.iovs = r.bufs[:0], make([]mmsghdr, k), make([]unix.Iovec, k)
	for i := range k {
		r.bufs = append(r.bufs, slab[i*r.size:(i+1)*r.size:(i+1)*r.size])
		r.iovs[i].Base = &r.bufs[i][0]
		r.iovs[i].SetLen(r.size)
		r.hdrs[i].hdr.Iov = &r.iovs[i]
		r.hdrs[i].hdr.SetIovlen(1)
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
func (r *udpReader) datagram(i int) []byte { return r.bufs[i][:r.hdrs[i].n] }

// adapt sizes the slots to the last read of n datagrams: more slots when
// all were used, fewer after a run of small reads, bigger slots when a
// datagram filled one (up to maxReadBuf).
func (r *udpReader) adapt(n int) {
	k := len(r.bufs)
	full := false
	for i := range n {
		full = full || int(r.hdrs[i].n) == r.size
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
