package fleet

import (
	"errors"
	"io"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Read buffers are lent, not owned: a reader takes one from these pools
// when its socket is readable and gives it back when a read finds the
// socket empty (EAGAIN), just before it parks. An idle or receive-only
// client then holds no read buffer at all while it waits (4 KiB less per
// client: at 10,000 idle clients, 40 MB of the fleet's 165 MB), and a busy
// one keeps its buffer for as long as its reads find bytes. The pools hold
// *[]byte so that putting one back allocates nothing.
var readPools [readClasses]sync.Pool

// readClasses are the buffer sizes readBuf << i up to maxReadBuf.
const readClasses = 3

// The classes span readBuf..maxReadBuf exactly (a compile-time check).
var _ = [1]struct{}{}[maxReadBuf-readBuf<<(readClasses-1)]

// readClass is the pool of a buffer size (a power-of-two multiple of
// readBuf up to maxReadBuf).
func readClass(size int) int {
	c := 0
	for readBuf<<c < size && c < readClasses-1 {
		c++
	}
	return c
}

// getReadBuf lends a buffer of size bytes.
func getReadBuf(size int) *[]byte {
	if p, ok := readPools[readClass(size)].Get().(*[]byte); ok && len(*p) == size {
		return p
	}
	b := make([]byte, size)
	return &b
}

// putReadBuf gives a lent buffer back; nil is ignored.
func putReadBuf(p *[]byte) {
	if p != nil {
		readPools[readClass(len(*p))].Put(p)
	}
}

// streamReader reads a TCP connection (plain or carrying WebSocket) into
// a lent buffer, through the socket's RawConn so that the wait for bytes
// happens without a buffer: the netpoller parks the reader as conn.Read
// would, and read deadlines (the login's) work the same. The buffer is
// sized to the traffic by a readSizer. A connection without a RawConn
// (none the fleet dials) is read with Read into a buffer kept throughout.
//
// Each read's bytes are handled inside the RawConn callback, and the
// socket tells with each read how many bytes it still holds (TCP_INQ,
// Linux 4.18): when none, the reader parks straight away. A plain read
// loop needs a second read(2) that fails with EAGAIN before every park,
// one syscall more per wake-up (half of the fleet's reads at N:N).
// Parking after a read that emptied the socket loses no wake-up: bytes
// that come after it mark the socket ready again. A FIN does too, but one
// that came before the read (its readiness cleared by RawConn.Read) is
// not seen by a read that returns data: TCP_INQ then reports 1 ("read
// again"), and so does the hint for bytes that came during the read.
// Where the hint is missing (another kernel) the reader reads until
// EAGAIN as before. A read that filled the buffer, or one after which
// more waits, returns from the callback first, so a Close from another
// goroutine (it waits for the callback to return) waits for one read at
// most.
type streamReader struct {
	// What a read touches first (issue 34: one cold line fewer a read).
	size  int
	sizer readSizer
	buf   *[]byte // lent while the socket has bytes; nil while waiting
	// cl, when set, takes each read's bytes (client.take), called
	// directly: a closure's object was one more cold line a read (issue
	// 34). Otherwise handle does.
	cl     *client
	handle func([]byte) bool
	inq    bool // TCP_INQ is on: reads say what is left
	stop   bool // handle said stop
	err    error
	// canYield, when set, says the client may go to its scheduler's
	// poller (poll.go): the read that finds it so then ends run with
	// errYield instead of going on or parking. polled says a poller reads
	// it now; parked, that the last read emptied the socket (either way),
	// or ended so that the client be handed over.
	canYield func() bool
	polled   bool
	parked   bool
	// toEnd: read until EAGAIN whatever TCP_INQ says (the poller's, for
	// a socket that reported a hang-up or an error: a reset after the
	// last bytes leaves TCP_INQ at 0 and raises no further event).
	toEnd bool
	// at is the fleet clock at which the poller's batched read of these
	// bytes was made (readRound), 0 for a read now: the deliveries'
	// latency ends when the bytes were read, not when their turn in the
	// round to be handled came.
	at int64
	// marker marks the client's caught-up reads for the drain
	// (readmark.go); the zero value marks nothing.
	marker readMarker
	// yieldMark is the mark of a read that emptied the socket and then
	// ended run for the handover, set by handedOver once the client's
	// descriptor is the poller's: the drain reads that descriptor once
	// the mark says caught up (client.caughtUp), so the mark must come
	// after it. 0: none.
	yieldMark int64

	conn io.Reader
	rc   syscall.RawConn
	fn   func(fd uintptr) bool // readFD, for rc.Read
}

// errYield ends run when the socket is empty and canYield says yes.
var errYield = errors.New("fleet: reader handed to the poller")

// newStreamReader reads conn; handle (or, when nil, the client the caller
// sets as cl) gets each read's bytes (valid during the call) and returns
// false to stop reading. It runs inside the RawConn's callback, so it
// must not close conn (Close would wait for the callback to return).
func newStreamReader(conn io.Reader, rc syscall.RawConn, handle func([]byte) bool) *streamReader {
	r := &streamReader{conn: conn, rc: rc, size: readBuf, handle: handle}
	if rc != nil {
		rc.Control(func(fd uintptr) {
			r.inq = unix.SetsockoptInt(int(fd), unix.SOL_TCP, unix.TCP_INQ, 1) == nil
		})
	}
	r.fn = r.readFD
	return r
}

// readFD is the RawConn callback (fn), and the poller's read of the
// client (called directly: no closure to load, issue 34): it reads fd
// and hands each read's bytes to handle, as streamReader says.
func (r *streamReader) readFD(fd uintptr) bool {
	if r.buf == nil {
		r.buf = getReadBuf(r.size)
	}
	epoch := r.wake()
	for {
		n, left, err := r.recv(int(fd), *r.buf)
		if err != syscall.EINTR {
			return r.finish(*r.buf, epoch, n, left, err)
		}
	}
}

// wake begins one read of the socket: the read mark's epoch for it
// (readMarker.wake).
func (r *streamReader) wake() (epoch int64) {
	r.yieldMark = 0
	return r.marker.wake()
}

// finish acts on one read into b begun at epoch (n bytes, left what the
// socket still holds, -1 unknown) and returns what readFD returns: false
// to park (a goroutine's reader that emptied its socket), true to come
// back (more waits, or an interrupted read), or to end (r.stop, r.err)
// or be handed over (r.parked). The poller's batched reads (poll.go)
// call it for each read of a batch, b a piece of the poller's own
// buffer.
func (r *streamReader) finish(b []byte, epoch int64, n, left int, err error) bool {
	switch {
	case err == syscall.EINTR:
		return true // read again
	case err == syscall.EAGAIN:
		return r.empty(epoch) // park until readable (or the deadline)
	case err != nil:
		r.err = err
		r.marker.ended()
		return true
	case n == 0:
		r.err = io.EOF
		r.marker.ended()
		return true
	}
	full := n == len(b)
	if !r.take(b[:n]) {
		r.stop = true
		r.marker.ended()
		return true
	}
	r.adapt(n)
	more := full || left != 0 || r.toEnd
	if r.canYield != nil && r.canYield() {
		// Hand over now (the login just ended): the poller reads
		// what is left. A socket this read emptied is marked so
		// at the handover, or the drain would wait on this client
		// until its next arrival (a server's keepalive, 25 s for
		// socket.io).
		if !more {
			r.yieldMark = epoch
		}
		r.parked = true
		return true
	}
	if more {
		return true // more waits (or a FIN, or unknown): read again, outside the callback
	}
	// The socket is empty: park without reading it again.
	return r.empty(epoch)
}

// take hands one read's bytes on (cl, else handle) and says whether to
// read on.
func (r *streamReader) take(b []byte) bool {
	if r.cl != nil {
		return r.cl.takeAt(b, r.at)
	}
	return r.handle(b)
}

// empty gives the buffer back once a read (of epoch's wake) found the
// socket empty, marks it so, and says whether to park in the netpoller
// (false) or return (the poller's reads, or a reader about to hand
// itself over, whose mark waits for handedOver).
func (r *streamReader) empty(epoch int64) bool {
	putReadBuf(r.buf)
	r.buf = nil
	if !r.polled && r.canYield != nil && r.canYield() {
		r.yieldMark = epoch
		r.parked = true
		return true
	}
	r.marker.emptied(epoch)
	if r.polled {
		r.parked = true
		return true
	}
	return false
}

// handedOver is called once the client's descriptor is its poller's
// (client.handOver): a read that emptied the socket before the handover
// marks it now.
func (r *streamReader) handedOver() {
	if r.yieldMark != 0 {
		r.marker.emptied(r.yieldMark)
		r.yieldMark = 0
	}
}

// recv reads into b; left is what the socket still holds after the read
// (1 for a FIN not yet read), -1 when unknown.
//
// The socket is non-blocking, so the read never waits: it goes in as a
// raw system call, without the runtime's bookkeeping for one that may
// block (entersyscall and exitsyscall, an atomic status change each way:
// 3% of the fleet's CPU at N:N, issue 34).
//
// A poller's read (polled) is a plain read(2), and one that did not fill
// b emptied the socket: the poller's epoll set is edge-triggered and
// raises an event for every arrival after the read found the queue
// empty (bytes, or a FIN, which comes with EPOLLRDHUP), so nothing is
// missed, and read(2) is cheaper than recvmsg(2) with a control message
// (the message header copied in and the hint copied out: 3 % of the
// fleet's CPU at N:N 8x32, issue 34). A goroutine's reads need the hint:
// the runtime's netpoller forgets a readiness that came before
// RawConn.Read (see streamReader).
func (r *streamReader) recv(fd int, b []byte) (n, left int, err error) {
	if r.polled || !r.inq {
		m, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch {
		case e != 0:
			return 0, -1, e
		case r.polled && int(m) < len(b):
			return int(m), 0, nil
		}
		return int(m), -1, nil
	}
	var oob [32]byte // one cmsg of an int: 24 bytes on 64-bit
	iov := unix.Iovec{Base: &b[0]}
	iov.SetLen(len(b))
	msg := unix.Msghdr{Iov: &iov, Iovlen: 1, Control: &oob[0]}
	msg.SetControllen(len(oob))
	m, _, e := unix.RawSyscall(unix.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	if e != 0 {
		return 0, -1, e
	}
	return int(m), inqHint(oob[:msg.Controllen]), nil
}

// inqHint reads the TCP_CM_INQ control message of a recvmsg, -1 when
// there is none.
func inqHint(oob []byte) int {
	const hdr = unix.SizeofCmsghdr
	if len(oob) < hdr+4 {
		return -1
	}
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	if h.Level != unix.SOL_TCP || h.Type != unix.TCP_CM_INQ || h.Len < hdr+4 {
		return -1
	}
	return int(*(*int32)(unsafe.Pointer(&oob[hdr])))
}

// run reads until handle says stop (nil), the peer closes its side
// (io.EOF), a read fails (a deadline passed, the connection closed) or
// a read emptied the socket of a reader that may yield (errYield). After
// a deadline or errYield it may be called again.
func (r *streamReader) run() error {
	r.stop, r.err = false, nil
	if r.rc == nil {
		for {
			if r.buf == nil {
				r.buf = getReadBuf(r.size)
			}
			n, err := r.conn.Read(*r.buf)
			if n > 0 {
				if !r.take((*r.buf)[:n]) {
					return nil
				}
				r.adapt(n)
			}
			if err != nil {
				return err
			}
		}
	}
	for {
		if err := r.rc.Read(r.fn); err != nil {
			return err
		}
		runtime.KeepAlive(r)
		if r.stop {
			return nil
		}
		if r.err != nil {
			return r.err
		}
		if r.parked {
			r.parked = false
			return errYield
		}
	}
}

// adapt sizes the next read's buffer after a read of n bytes.
func (r *streamReader) adapt(n int) {
	if s := r.sizer.next(r.size, n); s != r.size {
		putReadBuf(r.buf)
		r.buf, r.size = nil, s
	}
}

// release gives back a buffer still lent (the reader is done).
func (r *streamReader) release() {
	putReadBuf(r.buf)
	r.buf = nil
}
