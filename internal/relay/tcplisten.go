package relay

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// tcpListener is the relay's TCP listening socket, accepted from with
// blocking accept4 calls outside Go's netpoller, so an accepted connection
// is a bare descriptor for a loop (loop.go), with no net.Conn, poll
// descriptor or finalizer the runtime would keep. The socket is made by
// package net (address parsing, dual stack), then taken out of the
// netpoller as udpSock's are; shutdown(SHUT_RD) wakes a waiting accept.
type tcpListener struct {
	fd     int
	addr   *net.TCPAddr
	woken  atomic.Bool
	closed atomic.Bool
}

func newTCPListener(ln *net.TCPListener) (*tcpListener, error) {
	rc, err := ln.SyscallConn()
	if err != nil {
		ln.Close()
		return nil, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		ln.Close()
		return nil, err
	}
	addr, _ := ln.Addr().(*net.TCPAddr)
	ln.Close() // out of the netpoller; the duplicate keeps the socket
	if derr != nil {
		return nil, derr
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &tcpListener{fd: fd, addr: addr}, nil
}

// Addr is the listener's address.
func (l *tcpListener) Addr() net.Addr { return l.addr }

// accept waits for a connection and returns it non-blocking, with its
// peer's address (v4-mapped addresses unmapped). After wake it returns
// net.ErrClosed.
func (l *tcpListener) accept() (int, netip.Addr, error) {
	for {
		fd, sa, err := unix.Accept4(l.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if l.woken.Load() {
			if err == nil {
				unix.Close(fd)
			}
			return -1, netip.Addr{}, net.ErrClosed
		}
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED):
			continue
		case err != nil:
			return -1, netip.Addr{}, err
		}
		var src netip.Addr
		switch a := sa.(type) {
		case *unix.SockaddrInet4:
			src = netip.AddrFrom4(a.Addr)
		case *unix.SockaddrInet6:
			src = netip.AddrFrom16(a.Addr).Unmap()
		}
		return fd, src, nil
	}
}

// wake ends a waiting accept, and every later one at once: for shutdown.
func (l *tcpListener) wake() {
	if !l.woken.Swap(true) && !l.closed.Load() {
		unix.Shutdown(l.fd, unix.SHUT_RD)
	}
}

// Close closes the socket; only once nothing accepts any more.
func (l *tcpListener) Close() error {
	if l.closed.Swap(true) {
		return net.ErrClosed
	}
	return unix.Close(l.fd)
}

// setConnOptions sets an accepted connection's options as package net
// would: no Nagle delay, and keepalive probes that find a peer that
// vanished without a FIN (a half-open connection) within about Idle +
// Count × Interval of silence, also from clients that never heartbeat.
func setConnOptions(fd int) error {
	for _, o := range []struct{ level, opt, v int }{
		{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
		{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 10},
		{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 5},
		{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3},
	} {
		if err := unix.SetsockoptInt(fd, o.level, o.opt, o.v); err != nil {
			return err
		}
	}
	return nil
}
