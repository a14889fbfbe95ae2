package fleet

import (
	"errors"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The scheduler never blocks on a socket. A TCP client's due frames go out in
// one non-blocking write per turn; what the kernel does not take (the
// relay reads that connection too slowly, so its socket buffer is full)
// waits in the client's own small backlog, which is retried first, in the
// same write as the next frames, on the client's next turn. One stuck
// client thus costs its scheduler a failed syscall per turn instead of a
// blocked scheduler, and every other client of the scheduler stays on time.
//
// Policy on a backlog that cannot drain: the connection is given up and
// counted by reason, never silently thinned out, so the relay always sees
// the script's byte stream intact:
//   - more than Config.SendBacklog bytes waiting: disconnect
//     "send_backlog_full";
//   - no byte written for Config.WriteTimeout while bytes wait: disconnect
//     "write_timeout" (the same bound a blocking write had).
//
// Frames that had to wait are counted (replay_send_backpressure_total,
// summary sends_delayed_by_backpressure): the server pushed back. Their
// schedule lag is still measured when the scheduler produced them, because
// lag is the fleet's own punctuality.
//
// UDP sends stay plain writes: a datagram socket does not fill up on
// loopback in any meaningful way, and there is no stream to keep whole.
const (
	// backlogRetry is how soon a client with a backlog gets another turn
	// even when none of its frames is due, so the backlog drains once the
	// relay reads again instead of waiting for the next scheduled frame.
	backlogRetry = int64(time.Millisecond)
)

// rawWriter does one non-blocking write(2) through a connection's
// syscall.RawConn. Its callback is built once per scheduler, so a write does
// not allocate; the callback always returns true, so RawConn.Write never
// parks the scheduler waiting for the socket to become writable. The
// socket being non-blocking, the write is a raw system call (see
// streamReader.recv).
type rawWriter struct {
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool
}

func newRawWriter() *rawWriter {
	w := &rawWriter{}
	w.fn = func(fd uintptr) bool {
		w.n, w.err = 0, nil
		if len(w.b) == 0 {
			return true
		}
		n, _, e := unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&w.b[0])), uintptr(len(w.b)))
		if e != 0 {
			w.err = e
		} else {
			w.n = int(n)
		}
		return true
	}
	return w
}

// write writes what it can of b to c without blocking: n bytes were taken
// by the kernel (0 when the socket buffer is full), err is a real failure.
func (w *rawWriter) write(c *client, b []byte) (int, error) {
	w.b = b
	err := c.raw.Write(w.fn)
	n, werr := w.n, w.err
	w.b, w.err = nil, nil
	switch {
	case err != nil: // the connection is closed or its deadline passed
		return 0, err
	case werr == nil:
		return n, nil
	case errors.Is(werr, unix.EAGAIN), errors.Is(werr, unix.EINTR):
		return 0, nil
	}
	return 0, werr
}

// sendTCP hands this turn's frames b to the kernel, behind any backlog,
// in one write. ends are the end offsets of b's frames (for counting the
// ones that had to wait). With no frames due it only retries the backlog.
func (c *client) sendTCP(w *rawWriter, b []byte, ends []int, now int64) {
	if len(c.backlog) > 0 && len(c.backlog)+len(b) > c.f.cfg.SendBacklog {
		// Make room first; only a backlog that stays full is fatal.
		if !c.drain(w, now) {
			return
		}
		if len(c.backlog)+len(b) > c.f.cfg.SendBacklog {
			c.disconnect(disconnectBy(DisconnectBacklogFull))
			return
		}
	}
	if len(c.backlog) > 0 {
		// Behind a backlog every new frame waits; the backlog goes first
		// and the new frames with it, in the same write.
		c.sched.c.delayed.Add(int64(len(ends)))
		c.backlog = append(c.backlog, b...)
		c.drain(w, now)
		return
	}
	if len(b) == 0 {
		return
	}
	n, ok := c.writeRaw(w, b)
	if !ok || n == len(b) {
		return
	}
	c.tookPart(b, ends, n, now)
}

// tookPart keeps what the kernel did not take of a turn's write (b, its
// frames ending at ends, n bytes taken) in the backlog, counting the
// frames that wait behind it, at fleet clock now.
func (c *client) tookPart(b []byte, ends []int, n int, now int64) {
	delayed := 0
	for _, e := range ends {
		if e > n {
			delayed++
		}
	}
	c.sched.c.delayed.Add(int64(delayed))
	c.stuckSince = now
	c.queue(b[n:])
}

// queue keeps b, a tail the kernel did not take, in the backlog, which
// is allocated only while it is needed.
func (c *client) queue(b []byte) {
	if len(b) > c.f.cfg.SendBacklog {
		c.disconnect(disconnectBy(DisconnectBacklogFull))
		return
	}
	if c.backlog == nil {
		c.backlog = make([]byte, 0, min(c.f.cfg.SendBacklog, max(4<<10, 2*len(b))))
	}
	c.backlog = append(c.backlog, b...)
}

// drain writes what it can of the backlog; false when the client was
// disconnected. A backlog that made no progress for the write timeout
// gives the connection up.
func (c *client) drain(w *rawWriter, now int64) bool {
	n, ok := c.writeRaw(w, c.backlog)
	if !ok {
		return false
	}
	if n > 0 {
		c.stuckSince = now
	}
	if n == len(c.backlog) {
		c.backlog = nil // release: most clients never need one again
		return true
	}
	rest := copy(c.backlog, c.backlog[n:])
	c.backlog = c.backlog[:rest]
	if now-c.stuckSince > int64(c.f.cfg.WriteTimeout) {
		c.disconnect(disconnectBy(DisconnectWriteTimeout))
		return false
	}
	return true
}

// writeRaw is one non-blocking write with the byte count and a failure's
// disconnect.
func (c *client) writeRaw(w *rawWriter, b []byte) (int, bool) {
	n, err := w.write(c, b)
	if n > 0 {
		c.sched.c.sentBytes.Add(int64(n))
	}
	if err != nil {
		c.disconnect(disconnectBy(writeFailure(err)))
		return n, false
	}
	return n, true
}

// writeFailure names a failed write: a connection the server reset is a
// reset, whichever of the client's reader or writer saw it first (the
// kernel reports it to one call only; the next write gets EPIPE).
func writeFailure(err error) DisconnectCode {
	if errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.EPIPE) {
		return DisconnectReset
	}
	return DisconnectWriteError
}
