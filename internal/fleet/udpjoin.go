package fleet

import (
	"math/rand/v2"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// udpReadBuffer is each UDP client socket's receive buffer: a client of a
// 32-member room gets a burst of 31 deliveries per 72 Hz tick, and its
// reader goroutine may wait for a CPU while the fleet runs thousands; the
// kernel's default (208 KiB, charged by the kernel's per-datagram size,
// not the payload) overflowed under 8×32 N:N on two loaded cores. It is a
// cap, not an allocation: an idle client costs nothing more.
const udpReadBuffer = 1 << 20

// setUDPReadBuffer raises c's receive buffer to size, past
// net.core.rmem_max when the process may (root), else as far as the
// kernel allows; a failure leaves the default, and loss is counted anyway.
func setUDPReadBuffer(c *net.UDPConn, size int) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		if unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, size) != nil {
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, size)
		}
	})
}

// A UDP join or its joined can be lost: that is not a refusal, so a UDP
// client sends its join again until it gets joined, an error, or its login
// timeout. The relay answers a repeated join from the same address with
// the same session (docs/protocol.md, "UDP specifics").
const (
	joinRetryFirst = 250 * time.Millisecond
	joinRetryMax   = 2 * time.Second
)

// joinRetry paces one UDP client's join datagrams: the first re-send after
// joinRetryFirst, then doubling up to joinRetryMax, each wait jittered by
// ±20% so clients that lost their joins together do not retry together.
type joinRetry struct {
	deadline time.Time // the login timeout
	wait     time.Duration
	dgram    []byte // the join datagram to send again (padded if the relay asked)
}

func newJoinRetry(deadline time.Time, dgram []byte) *joinRetry {
	return &joinRetry{deadline: deadline, wait: joinRetryFirst, dgram: dgram}
}

// readDeadline is when the reader stops waiting for joined before it
// sends the join again (never past the login timeout).
func (r *joinRetry) readDeadline(now time.Time) time.Time {
	w := r.wait + time.Duration((rand.Float64()*0.4-0.2)*float64(r.wait))
	if t := now.Add(w); t.Before(r.deadline) {
		return t
	}
	return r.deadline
}

// again reports whether there is time left to send the join again, and
// backs off for the next wait.
func (r *joinRetry) again(now time.Time) bool {
	if !now.Before(r.deadline) {
		return false
	}
	r.wait = min(2*r.wait, joinRetryMax)
	return true
}
