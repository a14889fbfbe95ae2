package fleet

import (
	"io"
	"runtime"
	"sync"
	"syscall"
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
type streamReader struct {
	conn  io.Reader
	rc    syscall.RawConn
	size  int
	sizer readSizer
	buf   *[]byte // lent while the socket has bytes; nil while waiting
	n     int
	err   error
	fn    func(fd uintptr) bool
}

func newStreamReader(conn io.Reader, rc syscall.RawConn) *streamReader {
	r := &streamReader{conn: conn, rc: rc, size: readBuf}
	r.fn = func(fd uintptr) bool {
		if r.buf == nil {
			r.buf = getReadBuf(r.size)
		}
		for {
			n, err := syscall.Read(int(fd), *r.buf)
			switch err {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				putReadBuf(r.buf)
				r.buf = nil
				return false // park until readable (or the deadline)
			}
			r.n, r.err = max(n, 0), err
			return true
		}
	}
	return r
}

// read waits for bytes and returns them, valid until the next read or
// adapt; io.EOF when the peer closed its side.
func (r *streamReader) read() ([]byte, error) {
	if r.rc == nil {
		if r.buf == nil {
			r.buf = getReadBuf(r.size)
		}
		n, err := r.conn.Read(*r.buf)
		return (*r.buf)[:n], err
	}
	if err := r.rc.Read(r.fn); err != nil {
		return nil, err
	}
	runtime.KeepAlive(r)
	if r.err != nil {
		return nil, r.err
	}
	if r.n == 0 {
		return nil, io.EOF
	}
	return (*r.buf)[:r.n], nil
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
