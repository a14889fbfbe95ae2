package fleet

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

// readBuf is each connection's read buffer to start with: small, because
// a fleet holds tens of thousands of connections, and big enough for tens
// of frames per read under fan-out. A busy receiver's buffer grows up to
// maxReadBuf (see readSizer).
const (
	readBuf     = 4 << 10
	maxReadBuf  = 16 << 10
	shrinkAfter = 256 // reads using under a quarter of a grown buffer
)

// readSizer sizes a connection's read buffer to its traffic, as NATS does:
// a read that fills the buffer doubles it (a busy receiver then needs
// fewer read calls per message: at N:N 16x32, 40% of 4 KiB reads came
// back full), and a run of small reads halves it again, so idle and
// receive-only clients keep a small one.
type readSizer struct{ small int }

// next returns the buffer for the next read after a read of n bytes into
// buf; buf is no longer referenced by then (the parser copies partial
// frames).
func (r *readSizer) next(buf []byte, n int) []byte {
	switch {
	case n == len(buf) && len(buf) < maxReadBuf:
		r.small = 0
		return make([]byte, 2*len(buf))
	case len(buf) > readBuf && n < len(buf)/4:
		if r.small++; r.small >= shrinkAfter {
			r.small = 0
			return make([]byte, len(buf)/2)
		}
	default:
		r.small = 0
	}
	return buf
}

// maxPadRounds bounds the UDP joins re-sent for pad_required.
const maxPadRounds = 4

// client is one replayed client. Its fields are set before its login and
// then owned as noted.
type client struct {
	f      *Fleet
	idx    int
	user   string
	sender bool
	plan   session.Plan
	enc    *session.Encoded
	sh     *shard
	rec    *hists

	conn  net.Conn
	raw   syscall.RawConn // TCP: the shard's non-blocking writes (send.go)
	udp   bool
	token uint64     // UDP session token from joined; written before the shard sees the client
	retry *joinRetry // UDP until joined: the join's re-sends (owned by the reader)
	// confirming re-sends the UDP session's confirmation until the relay
	// answers (set and stopped by the reader).
	confirming *confirmer

	// Owned by the shard once the client is scheduled.
	start   int64 // fleet clock (ns) at which step 0 was due: the joined time
	next    int64 // next step
	due     int64 // fleet clock of step next
	heapIdx int
	wdl     time.Time // current write deadline (UDP)
	// backlog holds bytes the kernel did not take yet (TCP), nil when
	// empty; stuckSince is the fleet clock of its last progress.
	backlog    []byte
	stuckSince int64

	seq uint64 // room-wide sends so far (loss.go); owned by the shard

	loops    atomic.Int64
	joined   atomic.Bool
	dead     atomic.Bool // disconnected: the shard drops it, stop skips its leave
	stopping atomic.Bool // the fleet is stopping: read errors are expected
	lastErr  atomic.Uint32
	once     sync.Once
	// first holds the first bytes received before joined (the reader's
	// only), quoted when the target turns out not to speak the protocol.
	first []byte
}

// firstBytes is how many of a login's first received bytes are kept.
const firstBytes = 48

// errNotReprise is a frame before joined that is neither joined nor error:
// the target speaks something else.
var errNotReprise = errors.New("not a reprise reply")

// attempt dials, sends the join and reads until joined, an error or the
// login timeout; it reports the result on res (the first attempt is
// awaited by the ramp) and then stays the client's reader until the
// connection ends.
func (c *client) attempt(ctx context.Context, res chan<- string) {
	f := c.f
	deadline := time.Now().Add(f.cfg.LoginTimeout)
	conn, err := f.dial(ctx, c.idx, deadline)
	if err != nil {
		c.loginFailed(dialReason(err), res)
		return
	}
	c.conn = conn
	if tc, ok := conn.(*net.TCPConn); ok {
		if c.raw, err = tc.SyscallConn(); err != nil {
			conn.Close()
			c.loginFailed("connect_error", res)
			return
		}
	}
	if !f.track(c) {
		conn.Close()
		report(res, "stopped")
		return
	}
	defer f.untrack(c)
	buf := make([]byte, 0, 256)
	if c.udp {
		buf = wire.AppendDatagram(buf, 0)
	}
	buf = f.script.AppendFrame(buf, c.enc, 0, f.wallNow())
	conn.SetWriteDeadline(deadline)
	if _, err := conn.Write(buf); err != nil {
		conn.Close()
		c.loginFailed("write_error", res)
		return
	}
	c.sh.c.sentFrames[wire.TypeJoin].Add(1)
	c.sh.c.sentBytes.Add(int64(len(buf)))
	if c.udp {
		c.retry = newJoinRetry(deadline, buf)
		conn.SetReadDeadline(c.retry.readDeadline(time.Now()))
	} else {
		conn.SetReadDeadline(deadline)
	}
	reason := c.read(res)
	conn.Close()
	if reason != "" && c.joined.Load() {
		c.disconnect(reason)
	}
}

// report tells the ramp how the first login went; only the first result
// of an attempt counts.
func report(res chan<- string, reason string) {
	if res != nil {
		select {
		case res <- reason:
		default:
		}
	}
}

func (c *client) loginFailed(reason string, res chan<- string) {
	c.f.stats.failed.add(reason)
	c.f.log.Debug("login failed")
	if reason == "port_exhausted" {
		c.f.warnOnce(&c.f.warnedPorts, "WARNING: local ports exhausted (EADDRNOTAVAIL): the kernel has no free ephemeral port towards the target; spread clients with --source-ips or widen net.ipv4.ip_local_port_range")
	}
	report(res, reason)
}

// disconnect marks a logged-in client gone for reason, once.
func (c *client) disconnect(reason string) {
	c.once.Do(func() {
		c.dead.Store(true)
		if c.stopping.Load() {
			return
		}
		c.f.stats.disconn.add(reason)
		c.f.stats.loggedIn.Add(-1)
		c.conn.Close()
	})
}

// leave sends a leave and half-closes a logged-in client at the end of the
// run; its reader then drains what is in flight until the relay closes.
// It runs once the shards stopped, so the backlog is no longer theirs: it
// goes out first, keeping the stream whole.
func (c *client) leave(deadline time.Time) {
	c.once.Do(func() {
		c.f.stats.loggedIn.Add(-1)
		var b []byte
		if c.udp {
			b = wire.AppendDatagram(b, c.token)
		} else {
			b, c.backlog = append(b, c.backlog...), nil
		}
		b = wire.AppendLeave(b)
		c.conn.SetWriteDeadline(deadline)
		if n, err := c.conn.Write(b); err == nil {
			c.sh.c.sentFrames[wire.TypeLeave].Add(1)
			c.sh.c.sentBytes.Add(int64(n))
		}
		c.conn.SetReadDeadline(deadline)
		if tc, ok := c.conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		} else {
			c.conn.Close()
		}
	})
}

// read is the client's reader: it returns the reason the connection ended
// ("" when the fleet stopped it).
func (c *client) read(res chan<- string) string {
	defer func() { c.confirming.stop() }()
	var p wire.Parser
	buf := make([]byte, readBuf)
	var sizer readSizer
	var lat []int64
	var seqs seqTracker
	pads := 0
	cnt := c.sh.c
	for {
		n, err := c.conn.Read(buf)
		if n > 0 && !c.joined.Load() && len(c.first) < firstBytes {
			c.first = append(c.first, buf[:min(n, firstBytes-len(c.first))]...)
		}
		if n > 0 {
			mono := c.f.now()
			c.f.nudge(mono)
			now := c.f.wall(mono)
			lat = lat[:0]
			var msgs, frames, numbered, lost int64
			var ferr error
			handle := func(fr *wire.Frame) error {
				frames++
				if fr.Type != wire.TypeJoined && fr.Type != wire.TypeError && !c.udp && !c.joined.Load() {
					return errNotReprise
				}
				if c.confirming != nil && fr.Type != wire.TypeJoined {
					c.confirming.stop() // the relay answered: confirmed
					c.confirming = nil
				}
				switch fr.Type {
				case wire.TypeDeliver:
					msgs++
					if fr.HasTrace {
						lat = append(lat, (now-fr.Trace)/1000)
						if fr.Mode == wire.Broadcast || fr.Mode == wire.Othercast {
							numbered++
							lost += seqs.see(fr.User, fr.Trace)
						}
					}
				case wire.TypeJoined:
					if !c.joined.Load() {
						c.token = fr.SessionToken
						if c.udp {
							if err := c.confirm(); err != nil {
								return err
							}
						}
						c.loggedIn(res)
					}
				case wire.TypeError:
					// The room may grow between two tries; a few rounds
					// settle it.
					if fr.Code == wire.ErrPadRequired && c.udp && !c.joined.Load() && pads < maxPadRounds {
						pads++
						return c.rejoinPadded(fr.Text)
					}
					c.lastErr.Store(uint32(fr.Code))
					if !c.joined.Load() {
						return &loginError{reason: fr.Code.String()}
					}
				}
				return nil
			}
			if c.udp {
				// One or more whole frames per datagram (docs/protocol.md).
				var fr wire.Frame
				// A datagram that does not decode is dropped once logged
				// in; before, it means the target speaks something else.
				// (Other frames before joined may be reordered datagrams.)
				for d := buf[:n]; len(d) > 0 && ferr == nil; {
					m, err := wire.Decode(d, wire.DefaultMaxFrame, &fr)
					if err != nil {
						if !c.joined.Load() {
							ferr = errNotReprise
						}
						break
					}
					ferr = handle(&fr)
					d = d[m:]
				}
			} else {
				ferr = p.Feed(buf[:n], handle)
			}
			cnt.recvBytes.Add(int64(n))
			cnt.recvFrames.Add(frames)
			if msgs > 0 {
				cnt.recvMsgs.Add(msgs)
			}
			if numbered > 0 {
				cnt.recvNumbered.Add(numbered)
				if lost != 0 {
					cnt.lost.Add(lost)
				}
			}
			if len(lat) > 0 {
				c.rec.recordLatencies(lat)
			}
			if ferr != nil {
				if le, ok := ferr.(*loginError); ok {
					c.loginFailed(le.reason, res)
					return ""
				}
				if !c.joined.Load() {
					c.f.notReprise.CompareAndSwap(nil, &c.first)
					c.loginFailed(reasonProtocol, res)
					return ""
				}
				return reasonProtocol
			}
			buf = sizer.next(buf, n)
		}
		if err != nil {
			if c.retry != nil && !c.joined.Load() && isTimeout(err) && c.retry.again(time.Now()) && c.resendJoin() {
				continue
			}
			return c.readEnded(err, res)
		}
	}
}

// resendJoin sends a UDP client's join again after its wait for joined
// ran out; false if the write failed (the login then fails as it would
// have).
func (c *client) resendJoin() bool {
	r := c.retry
	if _, err := c.conn.Write(r.dgram); err != nil {
		return false
	}
	c.f.stats.joinRetries.Add(1)
	c.sh.c.sentFrames[wire.TypeJoin].Add(1)
	c.sh.c.sentBytes.Add(int64(len(r.dgram)))
	c.conn.SetReadDeadline(r.readDeadline(time.Now()))
	return true
}

// rejoinPadded answers a UDP pad_required (the joined reply would be larger
// than our join datagram) by sending the join again, padded to the size the
// relay asked for.
func (c *client) rejoinPadded(text []byte) error {
	size, err := strconv.Atoi(string(text))
	if err != nil || size > 64<<10 {
		return &loginError{reason: wire.ErrPadRequired.String()}
	}
	join := c.f.script.AppendFrame(nil, c.enc, 0, 0)
	var j wire.Frame
	if _, err := wire.Decode(join, wire.DefaultMaxFrame, &j); err != nil {
		return &loginError{reason: wire.ErrPadRequired.String()}
	}
	unpadded := len(wire.AppendJoin(nil, string(j.Room), string(j.User), j.Auth, 0))
	b := wire.AppendDatagram(nil, 0)
	b = wire.AppendJoin(b, string(j.Room), string(j.User), j.Auth, max(0, size-wire.TokenSize-unpadded))
	if _, err := c.conn.Write(b); err != nil {
		return &loginError{reason: wire.ErrPadRequired.String()}
	}
	c.retry.dgram = b
	c.sh.c.sentFrames[wire.TypeJoin].Add(1)
	c.sh.c.sentBytes.Add(int64(len(b)))
	return nil
}

// reasonProtocol is a login or connection ended by bytes that are not the
// reprise protocol.
const reasonProtocol = "protocol_error"

// confirm sends a heartbeat with the session token right after joined: it
// proves to the relay that this client receives at its address, and until
// then the relay sends the session nothing more (docs/protocol.md, UDP).
// Captures recorded before this step replay too: the fleet does the
// handshake of the relay it talks to, whatever the capture holds. The
// heartbeat is sent again, with the join's backoff, until a frame other
// than joined arrives (the relay sends an unconfirmed session nothing
// else) or the login timeout.
func (c *client) confirm() error {
	b := wire.AppendDatagram(nil, c.token)
	b = wire.AppendHeartbeat(b, c.f.wallNow())
	if _, err := c.conn.Write(b); err != nil {
		return &loginError{reason: "write_error"}
	}
	c.sh.c.sentFrames[wire.TypeHeartbeat].Add(1)
	c.sh.c.sentBytes.Add(int64(len(b)))
	c.confirming = &confirmer{c: c, r: newJoinRetry(c.retry.deadline, b)}
	c.confirming.start()
	return nil
}

// confirmer sends a UDP client's confirmation again until stopped. Its
// timer's callback and the reader share it under mu.
type confirmer struct {
	mu   sync.Mutex
	c    *client
	r    *joinRetry
	t    *time.Timer
	done bool
}

func (k *confirmer) start() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.t = time.AfterFunc(time.Until(k.r.readDeadline(time.Now())), k.fire)
}

func (k *confirmer) fire() {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := k.c
	if k.done || c.dead.Load() || c.stopping.Load() || !k.r.again(time.Now()) {
		return
	}
	if _, err := c.conn.Write(k.r.dgram); err != nil {
		return
	}
	c.sh.c.sentFrames[wire.TypeHeartbeat].Add(1)
	c.sh.c.sentBytes.Add(int64(len(k.r.dgram)))
	k.t.Reset(time.Until(k.r.readDeadline(time.Now())))
}

// stop ends the re-sends; safe on nil.
func (k *confirmer) stop() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.done = true
	if k.t != nil {
		k.t.Stop()
	}
}

// loginError ends a login; reason is its bounded label (an error code's
// name, or write_error).
type loginError struct{ reason string }

func (e *loginError) Error() string { return "login failed: " + e.reason }

// loggedIn moves a client that just got joined onto its shard.
//
// The order matters against Fleet.stop, which sets stopping and then
// looks at joined: whichever runs second sees the other's store, so a
// client that logs in during the stop still leaves and never keeps an
// unbounded read.
func (c *client) loggedIn(res chan<- string) {
	c.retry = nil
	c.conn.SetReadDeadline(time.Time{})
	// The shard's TCP writes never wait, and a raw write fails once a
	// deadline has passed: clear the login's.
	c.conn.SetWriteDeadline(time.Time{})
	c.joined.Store(true)
	c.f.stats.loginOK()
	report(res, "")
	if c.stopping.Load() {
		c.leave(time.Now().Add(time.Second))
		return
	}
	c.start = c.f.now()
	c.next = 1
	c.sh.add(c)
}

func (c *client) readEnded(err error, res chan<- string) string {
	if !c.joined.Load() {
		reason := "closed"
		switch {
		case c.stopping.Load():
			report(res, "stopped")
			return ""
		case isTimeout(err):
			reason = "timeout"
		case errors.Is(err, syscall.ECONNREFUSED):
			reason = "connect_refused"
		case errors.Is(err, syscall.ECONNRESET):
			reason = "reset"
		}
		c.loginFailed(reason, res)
		return ""
	}
	if c.stopping.Load() {
		return ""
	}
	if code := wire.ErrorCode(c.lastErr.Load()); code != 0 {
		return code.String()
	}
	switch {
	case errors.Is(err, io.EOF):
		return "closed_by_relay"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, net.ErrClosed):
		return "write_error" // the shard closed it after a failed write
	}
	return "read_error"
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

// dialReason names a failed dial with a bounded label.
func dialReason(err error) string {
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.EADDRINUSE):
		return "port_exhausted"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connect_refused"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "too_many_open_files"
	case errors.Is(err, context.Canceled):
		return "stopped"
	case isTimeout(err):
		return "connect_timeout"
	}
	return "connect_error"
}

// send writes the due steps of a scheduled client, coalesced into one
// write on TCP, and retries its backlog first (send.go). It runs on the
// shard's goroutine; buf is the shard's scratch buffer, returned for
// reuse.
func (c *client) send(now int64, buf []byte, lags []int64) ([]byte, []int64) {
	sc := c.f.script
	wall := c.f.wall(now)
	buf = buf[:0]
	ends := c.sh.ends[:0]
	cnt := c.sh.c
	var frames int
	for frames < maxBatch {
		st := c.plan.Step(c.next)
		if st.End {
			c.due = never
			break
		}
		due := c.start + int64(st.Due)
		if due > now {
			c.due = due
			break
		}
		lags = append(lags, (now-due)/1000)
		start := len(buf)
		if c.udp {
			buf = binary.BigEndian.AppendUint64(buf, c.token)
		}
		ty := wire.TypeHeartbeat
		if st.Frame == session.Heartbeat {
			buf = wire.AppendHeartbeat(buf, wall)
		} else {
			stamp := wall
			if sc.RoomWide(st.Frame) {
				c.seq++
				stamp = stampSeq(wall, c.seq)
			}
			buf = sc.AppendFrame(buf, c.enc, st.Frame, stamp)
			ty = sc.Type(st.Frame)
		}
		cnt.sentFrames[ty].Add(1)
		c.next++
		frames++
		if st.Loops > 0 {
			c.loops.Store(st.Loops)
		}
		if c.udp {
			if !c.writeUDP(buf[start:]) {
				return buf, lags
			}
			buf = buf[:0]
		} else {
			ends = append(ends, len(buf))
		}
	}
	if frames == maxBatch {
		c.due = now // more are due: come back after the other clients
	}
	c.sh.ends = ends
	if !c.udp {
		c.sendTCP(c.sh.w, buf, ends, now)
		if len(c.backlog) > 0 {
			c.due = min(c.due, now+backlogRetry)
		}
	}
	return buf, lags
}

// writeUDP sends one datagram with a write deadline, refreshed only when
// half of it has passed so most writes skip the timer update.
func (c *client) writeUDP(b []byte) bool {
	now := time.Now()
	if c.wdl.Sub(now) < c.f.cfg.WriteTimeout/2 {
		c.wdl = now.Add(c.f.cfg.WriteTimeout)
		c.conn.SetWriteDeadline(c.wdl)
	}
	n, err := c.conn.Write(b)
	c.sh.c.sentBytes.Add(int64(n))
	if err != nil {
		reason := "write_error"
		if isTimeout(err) {
			reason = "write_timeout"
		}
		c.disconnect(reason)
		return false
	}
	return true
}
