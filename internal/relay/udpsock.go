package relay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/wire"
)

// DefaultUDPReadBuffer is the receive buffer the relay asks for on each UDP
// socket: a burst of a 72 Hz room's sends (32 members × ~150 B) times many
// rooms must wait there while a worker fans out the previous batch. The
// kernel's default (net.core.rmem_default, 208 KiB) overflowed under
// 8×32 N:N. As root the relay sets it past net.core.rmem_max
// (SO_RCVBUFFORCE); otherwise the kernel caps it at rmem_max.
const DefaultUDPReadBuffer = 4 << 20

// DefaultUDPCoalesce is the most bytes of a datagram in which the relay
// packs several frames for one client: the size UDP clients pad their
// join to, well under any path MTU, so a packed datagram is never
// fragmented where a single frame would not be.
const DefaultUDPCoalesce = wire.UDPJoinPad

// listenUDP binds n UDP sockets on addr, each taken out of the netpoller
// (udpSock). With n > 1 they share the port
// through SO_REUSEPORT: the kernel hashes each client's address and port
// onto one socket, so a client's datagrams always reach the same worker,
// which owns its session. The first socket fixes the port when addr's is
// 0.
func listenUDP(addr *net.UDPAddr, n, rcvbuf int) ([]*udpSock, error) {
	var conns []*udpSock
	fail := func(err error) ([]*udpSock, error) {
		for _, c := range conns {
			c.Close()
		}
		return nil, err
	}
	a := *addr
	if n > 1 {
		// SO_REUSEPORT would let a second relay on the same port (same
		// user) take half the clients silently: bind once without it
		// first, so a port in use fails here as it does with one socket.
		probe, err := net.ListenUDP("udp", &a)
		if err != nil {
			return nil, fmt.Errorf("listen udp %s: %w", &a, err)
		}
		a.Port = probe.LocalAddr().(*net.UDPAddr).Port
		probe.Close()
	}
	for i := range n {
		c, err := listenOneUDP(&a, n > 1)
		if err != nil {
			return fail(fmt.Errorf("listen udp %s (socket %d of %d): %w", &a, i+1, n, err))
		}
		a.Port = c.LocalAddr().(*net.UDPAddr).Port
		if rcvbuf > 0 {
			if err := setReadBuffer(c, rcvbuf); err != nil {
				c.Close()
				return fail(fmt.Errorf("udp receive buffer: %w", err))
			}
		}
		us, err := newUDPSock(c)
		if err != nil {
			return fail(fmt.Errorf("udp socket %d of %d: %w", i+1, n, err))
		}
		conns = append(conns, us)
	}
	return conns, nil
}

func listenOneUDP(addr *net.UDPAddr, reuse bool) (*net.UDPConn, error) {
	if !reuse {
		return net.ListenUDP("udp", addr)
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", addr.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// setReadBuffer sets SO_RCVBUF to size, past net.core.rmem_max when the
// process may (CAP_NET_ADMIN), else as far as the kernel allows.
func setReadBuffer(c rawConner, size int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) == nil {
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, size)
	})
	return errors.Join(err, serr)
}

// readBuffer is the socket's receive buffer as the kernel set it.
func readBuffer(c rawConner) int {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	rc.Control(func(fd uintptr) { n, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) })
	return n
}

// socketInode is the inode number /proc/net/udp lists the socket under.
func socketInode(c rawConner) (uint64, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var st unix.Stat_t
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fstat(int(fd), &st) }); err != nil {
		return 0, err
	}
	return st.Ino, serr
}

// udpDrops sums the kernel's receive drop counters (datagrams that found
// the socket's receive buffer full, among others) of the sockets with the
// given inodes, from /proc/net/udp and /proc/net/udp6 (the drops column).
func udpDrops(inodes map[uint64]bool) (uint64, error) {
	var total uint64
	found := 0
	for _, path := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		f, err := os.Open(path)
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
			if len(fs) < 13 {
				continue
			}
			ino, err := strconv.ParseUint(fs[9], 10, 64)
			if err != nil || !inodes[ino] {
				continue
			}
			d, err := strconv.ParseUint(fs[12], 10, 64)
			if err != nil {
				continue
			}
			total += d
			found++
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", path, err)
		}
	}
	if found == 0 && len(inodes) > 0 {
		return 0, errors.New("the relay's UDP sockets are not in /proc/net/udp{,6}")
	}
	return total, nil
}

// registerUDPDrops exports the kernel's receive drops of the relay's UDP
// sockets as relay_udp_receive_drops_total.
func (s *Server) registerUDPDrops() error {
	inodes := map[uint64]bool{}
	for _, c := range s.udps {
		ino, err := socketInode(c)
		if err != nil {
			return fmt.Errorf("udp socket inode: %w", err)
		}
		inodes[ino] = true
	}
	var warned atomic.Bool
	return metrics.RegisterUDPDrops(s.reg, func() float64 {
		n, err := udpDrops(inodes)
		if err != nil {
			if !warned.Swap(true) {
				s.log.Warn("relay_udp_receive_drops_total unavailable", zap.Error(err))
			}
			return 0
		}
		return float64(n)
	})
}
