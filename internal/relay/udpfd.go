package relay

import (
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// udpSock is one of the relay's UDP sockets, read and written with
// blocking system calls outside Go's netpoller. The netpoller registers a
// socket for writability as well as readability (edge-triggered), and on
// loopback every datagram sent gives its buffer space back at once, which
// made the socket writable again and woke the netpoller's thread: in an
// 8×32 run, ~12,000 epoll_pwait returns a second, each a context switch
// for nothing, against ~1,000 over TCP. A worker waits in recvmmsg instead
// (MSG_WAITFORONE, with the sweep tick as SO_RCVTIMEO), and shutdown wakes
// it with shutdown(SHUT_RD).
//
// The socket is made by package net (listenUDP: families, dual stack,
// SO_REUSEPORT), then taken out of the netpoller: its descriptor is
// duplicated and the net.UDPConn closed (which unregisters it), and the
// duplicate set blocking.
type udpSock struct {
	fd     int
	v6     bool // an AF_INET6 socket: IPv4 destinations go v4-mapped
	laddr  *net.UDPAddr
	closed atomic.Bool
}

// sendTimeout bounds a send that waits for buffer space (SO_SNDTIMEO).
const sendTimeout = 2 * time.Second

func newUDPSock(c *net.UDPConn) (*udpSock, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	la, _ := c.LocalAddr().(*net.UDPAddr)
	c.Close() // out of the netpoller; the duplicate keeps the socket
	s := &udpSock{fd: fd, laddr: la}
	d, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err == nil {
		s.v6 = d == unix.AF_INET6
		err = unix.SetNonblock(fd, false)
	}
	if err == nil {
		tv := unix.NsecToTimeval(int64(sendTimeout))
		err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

// LocalAddr is the socket's address.
func (s *udpSock) LocalAddr() net.Addr { return s.laddr }

// SyscallConn gives the socket's descriptor to udpReader and udpWriter.
func (s *udpSock) SyscallConn() (syscall.RawConn, error) { return udpRaw{s}, nil }

// setReadTimeout makes a waiting read give up after d (a timeout error):
// the UDP loop's sweep tick.
func (s *udpSock) setReadTimeout(d time.Duration) error {
	tv := unix.NsecToTimeval(int64(max(d, time.Microsecond)))
	return unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
}

// wake ends a read waiting on the socket, and every later one at once:
// for shutdown.
func (s *udpSock) wake() {
	if !s.closed.Load() {
		unix.Shutdown(s.fd, unix.SHUT_RD) // ENOTCONN on an unconnected socket, but it wakes the reader
	}
}

// Close closes the socket; only once nothing reads or writes it any more
// (Server.shutdown closes after every goroutine ended).
func (s *udpSock) Close() error {
	if s.closed.Swap(true) {
		return net.ErrClosed
	}
	return unix.Close(s.fd)
}

// WriteToUDPAddrPort sends b as one datagram to to.
func (s *udpSock) WriteToUDPAddrPort(b []byte, to netip.AddrPort) (int, error) {
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	var sa sockaddr
	n := putSockaddr(&sa, to, s.v6)
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	r, _, e := unix.Syscall6(unix.SYS_SENDTO, uintptr(s.fd), uintptr(p), uintptr(len(b)), 0, uintptr(unsafe.Pointer(&sa)), uintptr(n))
	if e != 0 {
		return 0, os.NewSyscallError("sendto", e)
	}
	return int(r), nil
}

// udpRaw is syscall.RawConn over a udpSock. On the blocking descriptor
// a call that returns EAGAIN timed out (SO_RCVTIMEO, SO_SNDTIMEO): the
// functions udpReader and udpWriter pass report that as not done, and
// Read and Write return a timeout error for it.
type udpRaw struct{ s *udpSock }

var errTimeout = os.ErrDeadlineExceeded

func (r udpRaw) Control(f func(fd uintptr)) error {
	if r.s.closed.Load() {
		return net.ErrClosed
	}
	f(uintptr(r.s.fd))
	return nil
}

func (r udpRaw) Read(f func(fd uintptr) bool) error  { return r.call(f) }
func (r udpRaw) Write(f func(fd uintptr) bool) error { return r.call(f) }

func (r udpRaw) call(f func(fd uintptr) bool) error {
	if r.s.closed.Load() {
		return net.ErrClosed
	}
	if !f(uintptr(r.s.fd)) {
		return errTimeout
	}
	return nil
}

// rawConner is what the batched I/O needs of a socket: a *net.UDPConn or
// a *udpSock.
type rawConner interface {
	SyscallConn() (syscall.RawConn, error)
	LocalAddr() net.Addr
}
