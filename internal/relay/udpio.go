package relay

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Batched UDP I/O: recvmmsg and sendmmsg on one socket, through its
// syscall.RawConn so the Go netpoller still parks the goroutine while the
// socket has nothing to read (and honours the read deadline the UDP loop's
// sweep tick uses). One system call moves many datagrams: the relay's UDP
// fan-out paid one sendto per delivery before.
//
// Written against x/sys/unix rather than x/net/ipv4's ReadBatch and
// WriteBatch because those marshal an IPv4 destination as an AF_INET
// sockaddr even on a dual-stack AF_INET6 socket (the relay's `:7400`),
// where the kernel wants it v4-mapped, and because they allocate a
// net.UDPAddr per received datagram.

// mmsghdr is struct mmsghdr: Go pads it as C does on every Linux ABI.
type mmsghdr struct {
	hdr unix.Msghdr
	n   uint32
}

// sockaddr holds an AF_INET or AF_INET6 address (RawSockaddrInet6 is the
// larger).
type sockaddr = unix.RawSockaddrInet6

// maxMmsg is the most datagrams one sendmmsg is given: few enough that
// the call, made without telling the scheduler (rawTry), holds its P for
// well under a millisecond (≈ 10 µs each on loopback); UIO_MAXIOV (1024)
// is the kernel's bound.
const maxMmsg = 64

// rawTry makes a system call that does not wait (MSG_DONTWAIT) without
// telling Go's scheduler (RawSyscall6): the UDP workers spend most of
// their time in sendmmsg and recvmmsg, and a P in a system call for a
// sysmon tick (20 µs) is taken away and handed to another thread, which
// the worker must get back after the call. In an 8×32 run that was 13 %
// of the relay's CPU (sysmon's wake-ups, thread switches). Only a call
// that would wait (EAGAIN) is made again as a blocking one, through
// Syscall6, which lets the P go.
func rawTry(trap, fd uintptr, hdrs unsafe.Pointer, n int) (uintptr, unix.Errno) {
	r, _, e := unix.RawSyscall6(trap, fd, uintptr(hdrs), uintptr(n), unix.MSG_DONTWAIT, 0, 0)
	return r, e
}

// udpReader reads up to len(bufs) datagrams per call, each with the time
// the kernel received it (SO_TIMESTAMPNS), so that the rate limits charge
// a datagram at its arrival, not at the read: a worker the scheduler ran
// late reads at once what arrived over that while (see arrivals, tcp.go,
// for TCP's estimate; a datagram's is the kernel's own).
type udpReader struct {
	rc    syscall.RawConn
	bufs  [][]byte
	hdrs  []mmsghdr
	iovs  []unix.Iovec
	names []sockaddr
	ctl   []byte // each datagram's control message space (ctlSpace bytes): its receive timestamp
	n     int
	err   error
	wait  bool // fn waits for the socket to be readable (read), or not (poll)
	fn    func(fd uintptr) bool
	// stamps: the socket gives receive timestamps (setsockopt took).
	stamps bool
	// The clock when the last read returned: the relay's (monotonic, ns
	// since its epoch) and the wall clock's (the timestamps' CLOCK_REALTIME).
	now, wall int64
}

// ctlSpace holds one SCM_TIMESTAMPNS control message.
var ctlSpace = unix.CmsgSpace(int(unsafe.Sizeof(unix.Timespec{})))

func newUDPReader(conn rawConner, batch, size int) (*udpReader, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &udpReader{rc: rc, hdrs: make([]mmsghdr, batch), iovs: make([]unix.Iovec, batch), names: make([]sockaddr, batch)}
	slab := make([]byte, batch*size)
	for i := range batch {
		r.bufs = append(r.bufs, slab[i*size:(i+1)*size:(i+1)*size])
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err == nil && serr == nil {
		r.stamps = true
		r.ctl = make([]byte, batch*ctlSpace)
	}
	r.fn = func(fd uintptr) bool {
		for i := range r.hdrs {
			h := &r.hdrs[i].hdr
			r.iovs[i].Base = &r.bufs[i][0]
			r.iovs[i].SetLen(len(r.bufs[i]))
			h.Iov = &r.iovs[i]
			h.SetIovlen(1)
			h.Name = (*byte)(unsafe.Pointer(&r.names[i]))
			h.Namelen = uint32(unsafe.Sizeof(r.names[i]))
			h.Flags = 0
			if r.stamps {
				h.Control = &r.ctl[i*ctlSpace]
				h.SetControllen(ctlSpace)
			}
		}
		// What is queued, without waiting (rawTry). Then, to wait:
		// MSG_WAITFORONE returns what is there once one datagram is (on a
		// blocking udpSock; a netpoller socket returns EAGAIN and waits in
		// the netpoller).
		n, e := rawTry(unix.SYS_RECVMMSG, fd, unsafe.Pointer(&r.hdrs[0]), len(r.hdrs))
		if e == unix.EAGAIN && r.wait {
			n, _, e = unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&r.hdrs[0])), uintptr(len(r.hdrs)), unix.MSG_WAITFORONE, 0, 0)
		}
		if e == unix.EAGAIN || e == unix.EINTR {
			if !r.wait {
				r.n, r.err = 0, nil
				return true
			}
			return false // wait until readable (or the deadline); on a udpSock, its timeout
		}
		r.n, r.err = int(n), nil
		if e != 0 {
			r.n, r.err = 0, e
		}
		return true
	}
	return r, nil
}

// read waits for at least one datagram and returns how many it read.
func (r *udpReader) read() (int, error) {
	r.wait = true
	return r.call()
}

// poll reads the datagrams already queued on the socket, if any, without
// waiting: 0 when there are none.
func (r *udpReader) poll() (int, error) {
	r.wait = false
	return r.call()
}

func (r *udpReader) call() (int, error) {
	if err := r.rc.Read(r.fn); err != nil {
		return 0, err
	}
	runtime.KeepAlive(r)
	return r.n, r.err
}

// clock notes the time a read returned, now on the relay's clock (the
// caller's) and t on the wall clock's: arrival turns the kernel's
// timestamps into the relay's clock with them.
func (r *udpReader) clock(now int64, t time.Time) { r.now, r.wall = now, t.UnixNano() }

// arrival is when the i-th datagram of the last read arrived, on the
// relay's clock: its kernel receive timestamp, within maxAge before the
// read (a wall clock stepped meanwhile moves it no further); the read's
// time when the socket gives no timestamps.
func (r *udpReader) arrival(i int) int64 {
	h := &r.hdrs[i].hdr
	if !r.stamps || int(h.Controllen) < unix.CmsgLen(int(unsafe.Sizeof(unix.Timespec{}))) {
		return r.now
	}
	c := r.ctl[i*ctlSpace:]
	cm := (*unix.Cmsghdr)(unsafe.Pointer(&c[0]))
	if cm.Level != unix.SOL_SOCKET || cm.Type != unix.SCM_TIMESTAMPNS {
		return r.now
	}
	ts := (*unix.Timespec)(unsafe.Pointer(&c[unix.CmsgLen(0)]))
	ago := r.wall - ts.Nano()
	return r.now - min(max(ago, 0), maxAge)
}

// maxAge bounds how far back a datagram is charged: longer than any
// starvation of a worker that its socket's buffer outlasts (4 MiB, seconds
// of traffic), so that datagrams read together are not charged at one
// instant, and short enough that a stepped wall clock moves arrivals
// little. (TCP's arrivals are an estimate, spread over at most maxSpread;
// these are the kernel's.)
const maxAge = 10 * int64(time.Second)

// datagram is the i-th datagram of the last read and its source; ok is
// false for a truncated datagram (over the buffer: not one frame whole).
func (r *udpReader) datagram(i int) (b []byte, from netip.AddrPort, ok bool) {
	h := &r.hdrs[i]
	if h.hdr.Flags&unix.MSG_TRUNC != 0 {
		return nil, netip.AddrPort{}, false
	}
	return r.bufs[i][:h.n], addrPort(&r.names[i]), true
}

// addrPort decodes a kernel sockaddr (v4-mapped addresses unmapped, so a
// session's address compares equal whatever the socket's family).
func addrPort(sa *sockaddr) netip.AddrPort {
	if sa.Family == unix.AF_INET {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), ntohs(sa4.Port))
	}
	return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), ntohs(sa.Port))
}

// ntohs converts a port between network byte order (as a sockaddr holds it
// in memory) and the host's; the same swap both ways.
func ntohs(p uint16) uint16 {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], p)
	return binary.BigEndian.Uint16(b[:])
}

// putSockaddr writes to into sa for a socket of family v6 (AF_INET6,
// IPv4 addresses v4-mapped) or AF_INET, and returns its length.
func putSockaddr(sa *sockaddr, to netip.AddrPort, v6 bool) uint32 {
	if !v6 {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Port: ntohs(to.Port()), Addr: to.Addr().As4()}
		return unix.SizeofSockaddrInet4
	}
	*sa = sockaddr{Family: unix.AF_INET6, Port: ntohs(to.Port()), Addr: to.Addr().As16()}
	return unix.SizeofSockaddrInet6
}

// udpWriter queues frames for UDP clients and sends them with sendmmsg.
// Frames are copied into one arena; consecutive frames with the same bytes
// (one cast to many recipients) share one copy. At flush, the frames queued
// for one client are packed into as few datagrams as fit coalesce bytes
// each (docs/protocol.md: a server→client datagram holds one or more whole
// frames), each datagram gathered from the arena by its own iovecs: on
// loopback and on the wire alike, the cost of UDP is per datagram, and one
// client of a 32-member room gets 31 frames per tick.
type udpWriter struct {
	rc       syscall.RawConn
	v6       bool
	coalesce int // most bytes of a datagram packing several frames; 0: one frame each
	arena    []byte
	msgs     []outMsg
	last     int // arena offset of the last frame copied, -1 for none

	// flush's scratch, kept between flushes
	open   map[netip.AddrPort]int // the datagram still open per client
	dgrams []dgram
	assign []int // msgs[i] goes into dgrams[assign[i]]
	hdrs   []mmsghdr
	iovs   []unix.Iovec
	names  []sockaddr
	batch  []mmsghdr // the chunk fn sends
	sent   int
	err    error
	fn     func(fd uintptr) bool
	// dlv is the deliver frames of each packed datagram; delivered, after
	// a flush, the deliver frames of the datagrams the kernel took
	// (relay_delivered_messages_total counts what was written).
	dlv       []int
	delivered int
}

type outMsg struct {
	off, len int
	to       netip.AddrPort
	dlv      int  // the deliver frames in it
	whole    bool // a datagram already packed (udpServer.pack), sent as it is
}

// dgram is one datagram being packed: its frames are iovs[iov:iov+n].
type dgram struct {
	to        netip.AddrPort
	size, n   int
	iov, used int
}

// Bounds on what a writer holds before it must flush, and on the frames of
// one datagram.
const (
	maxQueuedDatagrams = 8192
	maxQueuedBytes     = 1 << 20
	maxFramesPerDgram  = 64
)

func newUDPWriter(conn rawConner, coalesce int) (*udpWriter, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	la, _ := conn.LocalAddr().(*net.UDPAddr)
	v6 := false
	if err := rc.Control(func(fd uintptr) {
		if d, e := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN); e == nil {
			v6 = d == unix.AF_INET6
		} else {
			v6 = la != nil && la.IP.To4() == nil
		}
	}); err != nil {
		return nil, err
	}
	w := &udpWriter{rc: rc, v6: v6, coalesce: coalesce, last: -1, open: map[netip.AddrPort]int{}}
	w.fn = func(fd uintptr) bool {
		n, e := rawTry(unix.SYS_SENDMMSG, fd, unsafe.Pointer(&w.batch[0]), len(w.batch))
		if e == unix.EAGAIN {
			n, _, e = unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.batch[0])), uintptr(len(w.batch)), 0, 0, 0)
		}
		if e == unix.EAGAIN || e == unix.EINTR {
			return false // the socket's send buffer is full: wait until writable
		}
		w.sent, w.err = int(n), nil
		if e != 0 {
			w.sent, w.err = 0, e
		}
		return true
	}
	return w, nil
}

// add queues frame for to; full reports that the writer should be flushed
// before more is added.
func (w *udpWriter) add(frame []byte, to netip.AddrPort) (full bool) {
	off := w.last
	if off < 0 || w.msgs[len(w.msgs)-1].len != len(frame) || !bytes.Equal(w.arena[off:off+len(frame)], frame) {
		off = len(w.arena)
		w.arena = append(w.arena, frame...)
		w.last = off
	}
	dlv := 0
	if wire.Type(frame[wire.LenSize]) == wire.TypeDeliver {
		dlv = 1
	}
	w.msgs = append(w.msgs, outMsg{off: off, len: len(frame), to: to, dlv: dlv})
	return w.full()
}

// addDatagram queues d, whole frames holding dlv deliver frames, to go to
// to as one datagram of its own; full as for add.
func (w *udpWriter) addDatagram(d []byte, to netip.AddrPort, dlv int) (full bool) {
	off := len(w.arena)
	w.arena = append(w.arena, d...)
	w.last = -1
	w.msgs = append(w.msgs, outMsg{off: off, len: len(d), to: to, dlv: dlv, whole: true})
	return w.full()
}

func (w *udpWriter) full() bool {
	return len(w.msgs) >= maxQueuedDatagrams || len(w.arena) >= maxQueuedBytes
}

// pending is the number of queued frames.
func (w *udpWriter) pending() int { return len(w.msgs) }

// pack assigns the queued frames to datagrams, in order per client, and
// lays out their iovecs and headers.
func (w *udpWriter) pack() []mmsghdr {
	clear(w.open)
	dgs := w.dgrams[:0]
	w.assign = w.assign[:0]
	w.dlv = w.dlv[:0]
	for _, m := range w.msgs {
		if m.whole {
			// Its own datagram; a frame after it for the same client
			// starts another, so none overtakes it.
			delete(w.open, m.to)
			w.dlv = append(w.dlv, m.dlv)
			w.assign = append(w.assign, len(dgs))
			dgs = append(dgs, dgram{to: m.to, size: m.len, n: 1})
			continue
		}
		d, ok := w.open[m.to]
		if !ok || w.coalesce <= 0 || dgs[d].size+m.len > w.coalesce || dgs[d].n == maxFramesPerDgram {
			d = len(dgs)
			dgs = append(dgs, dgram{to: m.to})
			w.dlv = append(w.dlv, 0)
			w.open[m.to] = d
		}
		w.dlv[d] += m.dlv
		dgs[d].size += m.len
		dgs[d].n++
		w.assign = append(w.assign, d)
	}
	if cap(w.iovs) < len(w.msgs) {
		w.iovs = make([]unix.Iovec, len(w.msgs))
	}
	if cap(w.hdrs) < len(dgs) {
		w.hdrs = make([]mmsghdr, len(dgs))
		w.names = make([]sockaddr, len(dgs))
	}
	iovs, hdrs, names := w.iovs[:len(w.msgs)], w.hdrs[:len(dgs)], w.names[:len(dgs)]
	pos := 0
	for i := range dgs {
		dgs[i].iov, pos = pos, pos+dgs[i].n
	}
	for i, m := range w.msgs {
		d := &dgs[w.assign[i]]
		iov := &iovs[d.iov+d.used]
		iov.Base = &w.arena[m.off]
		iov.SetLen(m.len)
		d.used++
	}
	for i := range dgs {
		h := &hdrs[i].hdr
		*h = unix.Msghdr{Iov: &iovs[dgs[i].iov], Name: (*byte)(unsafe.Pointer(&names[i]))}
		h.SetIovlen(dgs[i].n)
		h.Namelen = putSockaddr(&names[i], dgs[i].to, w.v6)
	}
	clear(dgs) // drop the addresses' references
	w.dgrams = dgs[:0]
	return hdrs
}

// flush sends every queued frame, packed into datagrams, maxMmsg
// datagrams per system call, and returns the datagrams and bytes the
// kernel took, the system calls made, and the datagrams it refused (a
// destination it cannot reach), which are skipped.
func (w *udpWriter) flush() (sent, bytes, calls, failed int, err error) {
	w.delivered = 0
	if len(w.msgs) == 0 {
		return 0, 0, 0, 0, nil
	}
	hdrs := w.pack()
	for i := 0; i < len(hdrs); {
		w.batch = hdrs[i:min(len(hdrs), i+maxMmsg)]
		if cerr := w.rc.Write(w.fn); cerr != nil {
			err = cerr // the socket is closed
			break
		}
		calls++
		if w.err != nil {
			// The first datagram of the chunk failed: skip it, go on.
			failed++
			i++
			if !errors.Is(w.err, unix.ECONNREFUSED) && !errors.Is(w.err, unix.EHOSTUNREACH) &&
				!errors.Is(w.err, unix.ENETUNREACH) && !errors.Is(w.err, unix.EPERM) && !errors.Is(w.err, unix.EMSGSIZE) {
				err = w.err
			}
			continue
		}
		for _, h := range w.batch[:w.sent] {
			bytes += int(h.n)
		}
		for _, n := range w.dlv[i : i+w.sent] {
			w.delivered += n
		}
		sent += w.sent
		i += w.sent
	}
	runtime.KeepAlive(w.arena)
	clear(w.msgs) // drop the addresses' references
	w.msgs, w.arena, w.last, w.batch = w.msgs[:0], w.arena[:0], -1, nil
	if cap(w.arena) > 4*maxQueuedBytes {
		w.arena = nil // one huge burst: do not keep its arena
	}
	return sent, bytes, calls, failed, err
}
