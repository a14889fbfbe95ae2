package fleet

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/session"
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

// next returns the buffer size for the next read after a read of n bytes
// into a buffer of size bytes; that buffer is no longer referenced by
// then (the parser copies partial frames).
func (r *readSizer) next(size, n int) int {
	switch {
	case n == size && size < maxReadBuf:
		r.small = 0
		return 2 * size
	case size > readBuf && n < size/4:
		if r.small++; r.small >= shrinkAfter {
			r.small = 0
			return size / 2
		}
	default:
		r.small = 0
	}
	return size
}

// client is one replayed client. Its fields are set before its login and
// then owned as noted.
type client struct {
	// The first five cache lines are laid out by who touches them: a
	// poller reads hundreds of clients in turn and a scheduler sends for
	// hundreds, each cold by its next turn, so every line a read or a
	// send touches is a miss; and a line one core writes while the other
	// reads it moves between them at each access (issue 34).
	//
	// Line 0: read by the reader and the scheduler alike, written only
	// at the client's login and its end (joined, dead, stopping).
	f        *Fleet
	pc       profile.Client // the protocol: its bytes and what the server's mean
	sched    *scheduler
	rec      *hists
	fc       *flowCounters // its flow's, in a --flows fleet; nil otherwise
	joined   atomic.Bool
	dead     atomic.Bool // disconnected: the scheduler drops it, stop skips its leave
	stopping atomic.Bool // the fleet is stopping: read errors are expected
	ws       bool        // WebSocket: messages travel in frames (ws.go)
	udp      bool
	// replies: the profile answers some of what it reads, so the reader
	// writes too (under wmu).
	replies bool
	// tlsOn says the client speaks TLS (set with tls, never cleared).
	tlsOn bool

	// Line 1: the reader's, written at each read (casts, readMark);
	// idx, sender and inst, set when the client is made and read by
	// neither side's hot path, fill the line.
	// casts are the casts it received (deliveries.go).
	casts atomic.Int64
	// readMark says how far its reader caught up, for the drain
	// (readmark.go): stored twice a wake.
	readMark atomic.Int64
	lastErr  atomic.Pointer[string] // the server's last error reason
	// ev is its reads' scratch: its reader goroutine's, then, once
	// handed over, its poller's (one for all its clients).
	ev *profile.Events
	// readRes is where its reads tell the login's result (readStream's).
	readRes chan<- LoginResult
	idx     int
	// plainPastTLS: a plaintext client went past the login step where
	// the profile starts TLS in band, and the server sent nothing since
	// (the reader's).
	plainPastTLS bool
	sender       bool
	inst         *instance // the server-assigned one, if any (instances.go)

	// Lines 2 and 3: what a send reads and writes, owned by the
	// scheduler once the client is scheduled.
	plan  session.Plan
	start int64 // fleet clock (ns) at which step 0 was due: the joined time
	next  int64 // next step
	due   int64 // fleet clock of step next
	// player is the script the client plays (its flow's, with --flows).
	player profile.Player
	// room counts its room's casts (deliveries.go).
	room *castRoom
	raw  syscall.RawConn // TCP: the scheduler's non-blocking writes (send.go)
	// backlog holds bytes the kernel did not take yet (TCP), nil when
	// empty.
	backlog []byte

	// Line 4: the scheduler's, touched by sends of room-wide casts
	// (ownOthers) and of loops (loops). ownOthers is the client's own
	// casts that its room's others receive; inAt and outAt are the room's
	// count when the client began and stopped receiving its casts (outAt
	// -1 until then; deliveries.go).
	ownOthers   atomic.Int64
	loops       atomic.Int64
	stuckSince  int64 // fleet clock of the backlog's last progress
	inAt, outAt atomic.Int64
	wdl         time.Time // current write deadline (UDP)

	user string
	conn net.Conn
	// readReason is why its reads ended, when they ended for what they
	// read (take's; readStream's answer).
	readReason Disconnect
	// tls is the connection's TLS layer (nil: plaintext) and wire what it
	// writes its records to (tls.go). Set by the login, before the
	// client reaches a scheduler.
	tls  *tls.Conn
	wire *tlsWire
	// sock is a TLS client's conn; recs its record layer once it dropped
	// the tls.Conn (tlsdetach.go: the reader's, then under wmu).
	sock *tlsSock
	recs *tlsRecords
	// tlsErr ended the reads of a TLS connection: an alert, a bad
	// record, the server's close_notify (the reader's).
	tlsErr error
	// deadline is the login's; upgrade, once a login step asked for TLS
	// in band, holds the next step, sent once the handshake is done (the
	// reader's; nil for every other client, which pays one pointer).
	deadline time.Time
	upgrade  *inBandTLS
	wsMixed  bool       // the recorded client sent text and binary frames: pc tells which (profile.WSFramer)
	wsKey    []byte     // the client's masking key
	zip      *wsDeflate // permessage-deflate, when the server accepted it
	retry    *joinRetry // UDP until joined: the login's re-sends (owned by the reader)
	// wmu orders the reader's replies after the login (an MQTT PUBACK, a
	// WebSocket pong) with the scheduler's writes, when the profile has any
	// (replies); the reprise profile never replies once logged in.
	wmu       sync.Mutex
	rw        *rawWriter // the reader's, for replies (under wmu)
	wsr       *profile.WSReader
	wsScratch []byte // holds replies while feedWS frames them (the reader's)
	// confirming re-sends the UDP session's confirmation until the relay
	// answers (set and stopped by the reader).
	confirming *confirmer
	// polled is set once the client is handed to its scheduler's poller
	// (under hmu, which orders the handover with a leave); handedOver
	// and toSched are the reader goroutine's: it returned, its poller
	// ends the client; it is to join its scheduler once handed over.
	polled     atomic.Pointer[polled]
	hmu        sync.Mutex
	handedOver bool
	toSched    bool

	once sync.Once
	// first holds the first bytes received before joined (the reader's
	// only), quoted when the target turns out not to speak the protocol.
	first []byte
	// loginSent: a login failure from now on is labelled with the login
	// step it failed in (the reader's).
	loginSent bool

	// tn is a client's playing connections in turn (turns.go); nil for
	// every other client, which pays one pointer for it.
	tn *turnState
}

// firstBytes is how many of a login's first received bytes are kept.
const firstBytes = 48

// attempt dials, sends the join and reads until joined, an error or the
// login timeout; it reports the result on res (the first attempt is
// awaited by the ramp) and then stays the client's reader until the
// connection ends.
func (c *client) attempt(ctx context.Context, res chan<- LoginResult) {
	f := c.f
	deadline := time.Now().Add(f.cfg.LoginTimeout)
	addr, jar, why, ok := c.httpSteps(ctx, deadline)
	if !ok {
		c.loginFailed(why, res)
		return
	}
	if addr == "" {
		addr = c.turnConnect() // a later turn's server (turns.go)
	}
	conn, err := f.dial(ctx, c.idx, deadline, addr)
	if err != nil {
		if ctx.Err() != nil { // the run ended (its duration's deadline): not a connect timeout
			report(res, loginFail(LoginStopped))
			return
		}
		why := dialReason(err)
		why.elsewhere = addr != ""
		c.loginFailed(why, res)
		return
	}
	c.conn = conn
	if uc, ok := conn.(*net.UDPConn); ok {
		setUDPReadBuffer(uc, udpReadBuffer)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		if c.raw, err = tc.SyscallConn(); err != nil {
			conn.Close()
			c.loginFailed(loginFail(LoginConnectError), res)
			return
		}
	}
	if !f.track(c) {
		conn.Close()
		report(res, loginFail(LoginStopped))
		return
	}
	handed := false // to the reader goroutine, which then untracks
	defer func() {
		if !handed {
			f.untrack(c)
		}
	}()
	conn.SetWriteDeadline(deadline)
	conn.SetReadDeadline(deadline)
	c.deadline = deadline
	if f.tlsCfg != nil && !f.inBandTLS {
		if err := c.startTLS(ctx, deadline); err != nil {
			conn.Close()
			if c.stopping.Load() || ctx.Err() != nil { // the run ended during the handshake
				report(res, loginFail(LoginStopped))
				return
			}
			c.loginFailed(tlsFailure(err), res)
			return
		}
	}
	var early []byte
	if c.ws {
		req := c.pc.UpgradeRequest()
		if jar != nil {
			req = c.withCookies(req, addr, jar)
		}
		if early, c.zip, err = wsHandshake(c.conn, req, f.cfg.WSDeflate); err != nil {
			conn.Close()
			if c.stopping.Load() || ctx.Err() != nil { // the run ended during the upgrade: not an upgrade timeout
				report(res, loginFail(LoginStopped))
				return
			}
			c.loginFailed(upgradeReason(err), res)
			return
		}
	}
	login, err := c.sendLogin()
	if err != nil {
		conn.Close()
		c.loginFailed(loginFail(LoginWriteError), res)
		return
	}
	if c.udp && len(login) > 0 {
		c.retry = newJoinRetry(deadline, login)
		conn.SetReadDeadline(c.retry.readDeadline(time.Now()))
	}
	// The reader is a goroutine of its own, started from here so that its
	// stack holds the read loop only: parked there, an idle client's stack
	// is shallow enough for the collector to shrink it (a UDP client's
	// stayed at 8 KiB under attempt's frames, 4 KiB more per idle client).
	handed = true
	f.wg.Go(func() { c.readUntilEnd(res, early) })
}

// readUntilEnd is the client's reader goroutine: it reads until the
// connection ends, closes it and marks a logged-in client gone.
func (c *client) readUntilEnd(res chan<- LoginResult, early []byte) {
	reason := c.read(res, early)
	if c.handedOver {
		return // its poller ends it (poll.go)
	}
	c.readsEnded(reason)
	c.conn.Close()
	c.f.untrack(c)
}

// readsEnded counts the end of a client's reads, before its socket is
// closed: a scheduler draining this client's backlog meanwhile would
// fail its write on the closed socket and count the reader's reason
// (send_backlog_full, a server's error) as its own write_error.
func (c *client) readsEnded(reason Disconnect) {
	if c.stopping.Load() && c.joined.Load() {
		c.leftUnsent()
	}
	if reason.code != DisconnectNone && c.joined.Load() {
		c.disconnect(reason)
	}
}

// report tells the ramp how the first login went; only the first result
// of an attempt counts.
func report(res chan<- LoginResult, reason LoginResult) {
	if res != nil {
		select {
		case res <- reason:
		default:
		}
	}
}

func (c *client) loginFailed(reason LoginResult, res chan<- LoginResult) {
	if c.loginSent {
		reason.step = c.pc.LoginStage()
	}
	if c.turnIndex() > 0 {
		// A next connection's (turns.go): not a login of its own.
		reason.turn = c.tn.name
		c.f.stats.next.failed.add(reason.String())
	} else {
		c.f.stats.failed.add(reason.String())
	}
	c.f.log.Debug("login failed", zap.Int("client", c.idx), zap.Stringer("reason", reason))
	if reason.code.IsTLS() {
		c.f.tlsFailed(reason)
	}
	if reason.code == LoginPortExhausted {
		c.f.warnOnce(&c.f.warnedPorts, "WARNING: local ports exhausted (EADDRNOTAVAIL): the kernel has no free ephemeral port towards the target; spread clients with --source-ips or widen net.ipv4.ip_local_port_range")
	}
	report(res, reason)
}

// disconnect marks a logged-in client gone for reason, once, and gives
// its connection up. On TCP it shuts the socket down and ends the reads
// rather than close it: the scheduler calls it holding wmu, and a close waits
// for the reader's read callback to return, which may be waiting for wmu
// to answer the server (the scheduler hung for good when a server reset its
// clients). The reader then stops and closes the socket (readUntilEnd).
func (c *client) disconnect(reason Disconnect) {
	c.once.Do(func() {
		c.leftRoom()
		c.dead.Store(true)
		c.turnOver() // it plays no next turn
		if c.stopping.Load() {
			return
		}
		c.f.stats.disconn.add(reason.String())
		c.f.stats.loggedIn.Add(-1)
		if e := c.polled.Load(); e != nil {
			// A socket the server reset raises no event on shutdown: its
			// poller ends the reads.
			c.raw.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RDWR) })
			c.sched.poll.post(e, postEnd, time.Time{})
			return
		}
		if c.raw == nil || c.raw.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_RDWR) }) != nil {
			c.conn.Close()
			return
		}
		c.conn.SetReadDeadline(time.Now())
	})
}

// leave sends a leave and half-closes a logged-in client at the end of the
// run; its reader then drains what is in flight until the server closes
// or the deadline. Closing earlier would lose sends already counted: a
// socket closed with unread bytes, or receiving more after its close,
// answers with a reset, which discards what still waits in its send
// queue (a slow server had not read it yet). A WebSocket client also
// sends its close frame, which the server answers once it has taken
// every message before it. It runs once the schedulers stopped, so the
// backlog is no longer theirs: it goes out first, keeping the stream
// whole.
func (c *client) leave(deadline time.Time) {
	c.once.Do(func() {
		c.leftRoom()
		c.f.stats.loggedIn.Add(-1)
		c.wmu.Lock()
		b := append([]byte(nil), c.backlog...)
		c.backlog = nil
		c.wmu.Unlock()
		start := len(b)
		b = c.frame(c.pc.AppendLeave(b), start)
		left := len(b) > start
		if c.ws {
			b = profile.AppendWSFrame(b, profile.WSClose, wsNormalClose, c.wsKey)
		}
		c.hmu.Lock()
		e := c.polled.Load()
		c.hmu.Unlock()
		if e != nil {
			// Handed over: its poller drains, bounded by the deadline.
			if n, err := e.fd.writeBy(b, deadline); err == nil && left {
				c.sched.c.sentFrames[c.f.player.LeaveKind()].Add(1)
				c.sched.c.sentBytes.Add(int64(n))
			}
			c.sched.poll.post(e, postDrain, deadline)
			e.fd.Control(func(fd uintptr) { unix.Shutdown(int(fd), unix.SHUT_WR) })
			return
		}
		out := c.conn
		if c.tlsOn {
			// The backlog is records already; the goodbye is sealed behind
			// it, and the close_notify after (into the wire: CloseWrite
			// also moves the socket's write deadline, set again below).
			c.wmu.Lock()
			b = c.seal(b[:start], append([]byte(nil), b[start:]...))
			if c.recs != nil {
				b = c.recs.closeNotify(b)
			} else {
				c.tls.CloseWrite()
				b = c.wire.take(b)
			}
			c.wmu.Unlock()
			out = c.wire.TCPConn
		}
		out.SetWriteDeadline(deadline)
		if n, err := out.Write(b); err == nil && left {
			c.sched.c.sentFrames[c.f.player.LeaveKind()].Add(1)
			c.sched.c.sentBytes.Add(int64(n))
		}
		out.SetReadDeadline(deadline) // its goroutine drains, bounded by it
		if tc, ok := out.(*net.TCPConn); ok {
			tc.CloseWrite()
		} else {
			c.conn.Close()
		}
	})
}

// wsNormalClose is a close frame's payload: 1000, normal closure.
var wsNormalClose = []byte{0x03, 0xe8}

// leftUnsent counts, for a client whose leave ended before the server
// closed (its bound passed), the bytes its kernel still held
// unacknowledged: sends counted as sent that the close may lose.
func (c *client) leftUnsent() {
	if c.raw == nil {
		return
	}
	var n int
	c.raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
	if n > 0 {
		c.f.stats.leaveUnsent.Add(int64(n))
		c.f.stats.leaveCut.Add(1)
	}
}

// read is the client's reader: it returns the reason the connection ended
// (DisconnectNone when the fleet stopped it). early are bytes that came with the
// WebSocket upgrade's answer.
func (c *client) read(res chan<- LoginResult, early []byte) Disconnect {
	defer func() { c.confirming.stop() }()
	var ev profile.Events
	c.ev = &ev // until a poller takes the client (handOver)
	if len(early) > 0 {
		if reason, done := c.consume(early, &ev, res); done {
			return reason
		}
	}
	if uc, ok := c.conn.(*net.UDPConn); ok && !c.ws {
		if ur, err := newUDPReader(uc); err == nil {
			defer ur.release()
			return c.readUDP(ur, &ev, res)
		}
	}
	for {
		reason := c.readStream(res)
		if c.upgrade == nil {
			return reason
		}
		if err := c.upgradeTLS(); err != nil {
			if c.stopping.Load() {
				report(res, loginFail(LoginStopped))
			} else {
				c.loginFailed(tlsFailure(err), res)
			}
			return Disconnect{}
		}
	}
}

// readStream reads a stream connection until it ends, or until a login
// step asks for TLS in band (c.upgrade).
func (c *client) readStream(res chan<- LoginResult) Disconnect {
	c.readRes, c.readReason = res, Disconnect{}
	var handle func([]byte) bool // nil: the reader calls c.take itself
	if c.tls != nil {
		// The socket's bytes are records: read as a plain connection's
		// (raw, into a lent buffer), then opened (tls.go's openTLS).
		// Records the login's blocking reads left in the tls.Conn are
		// opened first: no readiness would wake the reader for them.
		c.wire.feeding = true
		take := c.take
		handle = func(b []byte) bool { return c.openTLS(b, take) }
		if !handle(nil) {
			return c.tlsEnded(c.readReason, res)
		}
	}
	r := newStreamReader(c.conn, c.raw, handle)
	if handle == nil {
		r.cl = c
	}
	if c.raw != nil {
		r.marker = readMarker{mark: &c.readMark, epoch: &c.f.readEpoch}
	}
	defer func() {
		if !c.handedOver {
			r.release()
			r.marker.ended()
		}
	}()
	if c.canPoll() {
		r.canYield = func() bool { return c.joined.Load() && !c.stopping.Load() && !c.dead.Load() }
	}
	for {
		err := r.run()
		if err == errYield {
			r.canYield = nil // the goroutine reads on unless the poller takes it
			c.handedOver = c.handOver(r, func(err error) Disconnect {
				if err == nil {
					return c.tlsEnded(c.readReason, res)
				}
				return c.readEnded(err, res)
			})
			if c.toSched {
				c.toSched = false
				c.sched.add(c)
			}
			if c.handedOver {
				return Disconnect{}
			}
			r.parked = false
			continue
		}
		if err == nil {
			return c.tlsEnded(c.readReason, res)
		}
		if c.retry != nil && !c.joined.Load() && isTimeout(err) && c.retry.again(time.Now()) && c.resendJoin() {
			continue
		}
		return c.readEnded(err, res)
	}
}

// take consumes one read's bytes (valid during the call) for its reader,
// and says whether to read on. A method the reader calls itself, not a
// closure: the closure's object was one more cold line a read (issue 34).
func (c *client) take(b []byte) bool { return c.takeAt(b, 0) }

// takeAt is take of bytes read at mono, the fleet clock (0: now).
func (c *client) takeAt(b []byte, mono int64) bool {
	if c.plainPastTLS {
		c.plainPastTLS = false // the server answered after the starttls step: it did not want TLS there
	}
	if !c.joined.Load() && len(c.first) < firstBytes {
		c.first = append(c.first, b[:min(len(b), firstBytes-len(c.first))]...)
	}
	// Written only when the reads end: a store each read to a cold line
	// of its own (the captured reason) cost a miss (issue 34).
	if mono == 0 {
		mono = c.f.now()
	}
	c.f.nudge(mono)
	r, done := c.consumeAt(b, mono, c.ev, c.readRes)
	if done {
		c.readReason = r
	}
	return !done
}

// canPoll says a client's reads go to its scheduler's poller once it is
// joined: a plain stream (TCP or WebSocket over it), not TLS.
func (c *client) canPoll() bool {
	return c.sched.poll != nil && c.tls == nil && !c.tlsOn && c.raw != nil
}

// handOver gives a joined client to its scheduler's poller for good
// (poll.go): it duplicates the socket's descriptor and closes the
// net.Conn, which takes the socket out of the runtime's netpoller, and
// the poller reads the duplicate from now on. False: the goroutine reads
// on (the fleet is stopping, whose leave is then bounded by the
// net.Conn's deadline; or the descriptor could not be duplicated).
func (c *client) handOver(r *streamReader, finish func(error) Disconnect) bool {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	if c.stopping.Load() || c.dead.Load() {
		return false
	}
	nfd, derr := -1, error(nil)
	if err := c.raw.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		return false
	}
	c.conn.Close() // the socket stays open: nfd refers to it
	fd := &rawFD{fd: nfd}
	c.raw = fd
	r.polled, r.parked = true, false
	c.ev = &c.sched.poll.ev // the poller's reads share its scratch, warm for each
	// and its latency counts: its scheduler's, so that a poller's reads
	// count into one set rather than the four its clients were spread
	// over (the counts' increments were most of consume's own time,
	// misses: issue 34). The poller reads one client at a time, so it
	// never contends with itself for their lock.
	c.rec = c.f.stats.rec[c.sched.index]
	r.handedOver() // after c.raw's write: the drain reads c.raw once marked
	e := &polled{r: r, fd: fd}
	e.ended = func(why error) {
		c.readsEnded(finish(why))
		c.polled.Store(nil)
		fd.close()
		c.f.untrack(c)
		c.f.wg.Done()
	}
	c.polled.Store(e)
	c.f.wg.Add(1) // done by e.ended
	c.sched.poll.post(e, postAdd, time.Time{})
	return true
}

// inBandTLS is the step a client sends once the TLS its login step asked
// for in band is up: its bytes and their kinds.
type inBandTLS struct {
	pending []byte
	kinds   []int
}

// upgradeTLS starts TLS in band on a client whose login step asked for
// it, then sends the next step (held in c.upgrade).
func (c *client) upgradeTLS() error {
	u := c.upgrade
	c.upgrade = nil
	ctx, cancel := context.WithDeadline(context.Background(), c.deadline)
	defer cancel()
	if err := c.startTLS(ctx, c.deadline); err != nil {
		return err
	}
	if len(u.pending) == 0 {
		return nil
	}
	if _, err := c.conn.Write(u.pending); err != nil {
		return err
	}
	for _, k := range u.kinds {
		c.sched.c.sentFrames[k].Add(1)
		c.flowSent(k)
	}
	c.sched.c.sentBytes.Add(int64(len(u.pending)))
	return nil
}

// readUDP is read for a UDP client: up to udpBatchMax datagrams per
// recvmmsg (udpread.go), all at the time the batch was read (one clock
// reading and one nudge a batch, as for a stream read of many frames),
// consumed by consumeUDP.
func (c *client) readUDP(ur *udpReader, ev *profile.Events, res chan<- LoginResult) Disconnect {
	for {
		n, err := ur.read()
		var mono int64
		if n > 0 {
			mono = c.f.now()
			c.f.nudge(mono)
		}
		if reason, done := c.consumeUDP(ur, n, mono, ev, res); done {
			return reason
		}
		ur.adapt(n)
		if err != nil {
			if c.retry != nil && !c.joined.Load() && isTimeout(err) && c.retry.again(time.Now()) && c.resendJoin() {
				continue
			}
			return c.readEnded(err, res)
		}
	}
}

// consume hands bytes read to the profile and acts on what they meant;
// done says the reader must stop (a refused login, bytes that are not the
// protocol), with the reason the connection ends.
func (c *client) consume(b []byte, ev *profile.Events, res chan<- LoginResult) (reason Disconnect, done bool) {
	mono := c.f.now()
	c.f.nudge(mono)
	return c.consumeAt(b, mono, ev, res)
}

// consumeAt is consume of bytes read at mono (the fleet's clock), the
// schedulers already nudged.
func (c *client) consumeAt(b []byte, mono int64, ev *profile.Events, res chan<- LoginResult) (reason Disconnect, done bool) {
	now := c.f.wall(mono)
	c.lendLatency(ev)
	var err error
	if c.ws {
		err = c.feedWS(b, now, ev)
	} else {
		err = c.pc.Feed(b, now, ev)
	}
	c.settleLatency(ev)
	return c.account(b, len(b), ev, err, res)
}

// lendLatency readies ev for a read's decode, with the client's latency
// counts under their lock: the profile counts latencies into them as it
// decodes (no second pass over a slice of them); the decode is pure work
// on the read's bytes, so the lock is held only as long as one read takes.
func (c *client) lendLatency(ev *profile.Events) {
	ev.Reset()
	c.rec.latMu.Lock()
	ev.Latency = c.rec.latency
}

// settleLatency takes the counts back from ev after the decode.
func (c *client) settleLatency(ev *profile.Events) {
	ev.Latency = nil
	c.rec.latency.SettleSome()
	c.rec.latMu.Unlock()
}

// consumeUDP consumes the n datagrams of one UDP read: each as it came
// until the client is logged in and confirmed (the login's steps act
// datagram by datagram), then the read's in one go.
func (c *client) consumeUDP(ur *udpReader, n int, mono int64, ev *profile.Events, res chan<- LoginResult) (reason Disconnect, done bool) {
	if n > 0 && c.joined.Load() && c.confirming == nil && !c.replies {
		return c.consumeDatagrams(ur, n, mono, ev, res)
	}
	for i := range n {
		d := ur.datagram(i)
		if !c.joined.Load() && len(c.first) < firstBytes {
			c.first = append(c.first, d[:min(len(d), firstBytes-len(c.first))]...)
		}
		if reason, done := c.consumeAt(d, mono, ev, res); done {
			return reason, true
		}
	}
	return Disconnect{}, false
}

// consumeDatagrams is consumeAt for the n datagrams of one UDP read (ur's)
// of a client logged in, confirmed and answering nothing: one lock, one
// settle of the latency counts and one set of count updates for the read,
// as a stream read of many frames has, where each datagram paid them
// (issue 34: consumeAt's own time was 15 ns a message over UDP, a read
// holding several datagrams). A datagram the profile cannot take ends the
// read there, as it ended the reader before.
func (c *client) consumeDatagrams(ur *udpReader, n int, mono int64, ev *profile.Events, res chan<- LoginResult) (reason Disconnect, done bool) {
	now := c.f.wall(mono)
	c.lendLatency(ev)
	var err error
	var d []byte
	size := 0
	for i := range n {
		d = ur.datagram(i)
		size += len(d)
		if err = c.pc.Feed(d, now, ev); err != nil {
			break
		}
	}
	c.settleLatency(ev)
	return c.account(d, size, ev, err, res)
}

// account acts on what a read's bytes meant (ev; err: the profile could
// not take them, b the bytes it failed on): the counts, the server's
// error, answers, the login's steps, the end of the connection. size is
// the read's bytes.
func (c *client) account(b []byte, size int, ev *profile.Events, err error, res chan<- LoginResult) (reason Disconnect, done bool) {
	cnt := c.sched.c
	cnt.recvBytes.Add(int64(size))
	cnt.recvFrames.Add(ev.Frames)
	if ev.Messages > 0 {
		cnt.recvMsgs.Add(ev.Messages)
		if c.fc != nil {
			c.fc.received.Add(ev.Messages)
		}
	}
	if ev.Casts > 0 {
		c.casts.Add(ev.Casts)
	}
	if ev.Numbered > 0 {
		cnt.recvNumbered.Add(ev.Numbered)
		if ev.Lost != 0 {
			cnt.lost.Add(ev.Lost)
		}
	}
	if ev.Error != "" {
		e := ev.Error
		c.lastErr.Store(&e)
	}
	if ev.Skipped > 0 {
		c.f.stats.undecodable.addN(ev.SkipReason, ev.Skipped)
	}
	// A client that is leaving answers nothing: its write side is shut
	// (or about to be), and a failed write would end its drain early.
	// An answer that cannot be written because the server closed, having
	// said why in the same read (a WebSocket close frame), ends the
	// connection for what the read found (err, below), not as a write
	// error: a strict server's late-pong close came out as write_error.
	if ev.StartTLS && c.f.tlsCfg == nil {
		// A plaintext fleet goes on in plaintext; a server that closes
		// now wanted the TLS the profile starts here (tlsAnswer).
		c.plainPastTLS = true
	}
	if ev.StartTLS && c.f.tlsCfg != nil && c.tls == nil && !c.joined.Load() {
		// The handshake runs outside this read (readStream returns), and
		// the next step waits for it.
		u := &inBandTLS{pending: append([]byte(nil), ev.Reply...)}
		for _, r := range ev.Replies {
			u.kinds = append(u.kinds, r.Kind)
		}
		c.upgrade = u
		return Disconnect{}, true
	}
	if len(ev.Reply) > 0 && !(c.stopping.Load() && c.joined.Load()) {
		why := c.reply(ev)
		switch {
		case why == DisconnectNone:
			for _, r := range ev.Replies {
				cnt.sentFrames[r.Kind].Add(1)
				c.flowSent(r.Kind)
			}
		case err != nil:
		case !c.joined.Load():
			c.loginFailed(loginFail(LoginWriteError), res)
			return Disconnect{}, true
		default:
			return disconnectBy(why), true
		}
	}
	if ev.Failed != "" && !c.joined.Load() {
		c.loginFailed(refusedBy(ev.Failed), res)
		return Disconnect{}, true
	}
	if ev.Confirmed && c.confirming != nil {
		c.confirming.stop() // the server answered: confirmed
		c.confirming = nil
		c.joinedRoom() // the relay casts to it from now on
	}
	if len(ev.Confirm) > 0 && !c.joined.Load() {
		if err := c.confirm(ev.Confirm); err != nil {
			c.loginFailed(loginFail(LoginWriteError), res)
			return Disconnect{}, true
		}
	}
	if ev.LoggedIn && !c.joined.Load() {
		c.loggedIn(res)
	}
	if err != nil {
		login, reason := loginFail(LoginProtocolError), disconnectBy(DisconnectProtocolError)
		var wc *wsClosed
		if errors.As(err, &wc) {
			login, reason = c.wsClose(wc)
		}
		if !c.joined.Load() {
			if r, ok := c.tlsAnswer(login.code); ok {
				login = r
			} else if login.code == LoginProtocolError {
				c.f.wrongProtocol.CompareAndSwap(nil, &wrongAnswer{c.first, err})
			}
			c.loginFailed(login, res)
			return Disconnect{}, true
		}
		if reason.code == DisconnectProtocolError {
			c.f.protocolError(c.idx, b, err)
		}
		return reason, true
	}
	return Disconnect{}, false
}

// sendLogin writes the login's first step (each message its own datagram
// over UDP) and returns the bytes of the last write, which a UDP login
// sends again; the later steps come back from the profile as replies.
func (c *client) sendLogin() ([]byte, error) {
	now := c.f.wallNow()
	var buf, last []byte
	for i := 0; ; i++ {
		start := len(buf)
		var k int
		var ok bool
		if buf, k, ok = c.pc.AppendLogin(buf, i, now); !ok {
			break
		}
		buf = c.frame(buf, start)
		c.sched.c.sentFrames[k].Add(1)
		c.flowSent(k)
		if c.udp {
			if _, err := c.conn.Write(buf); err != nil {
				return nil, err
			}
			c.sched.c.sentBytes.Add(int64(len(buf)))
			last = append(last[:0], buf...)
			buf = buf[:0]
		}
	}
	if c.udp {
		buf = last
	} else if len(buf) > 0 {
		if _, err := c.conn.Write(buf); err != nil {
			return nil, err
		}
		c.sched.c.sentBytes.Add(int64(len(buf)))
	}
	c.loginSent = true
	return buf, nil
}

// reply sends what the profile answers to the server: before the login
// straight away (a padded UDP join replaces the login to send again),
// after it in order with the scheduler's writes. It returns why it could not
// (DisconnectNone: it could): the write failed, or the answer would
// overfill the client's send backlog.
func (c *client) reply(ev *profile.Events) DisconnectCode {
	b := append([]byte(nil), ev.Reply...) // framed already (feedWS)
	if c.udp && c.joined.Load() {
		// Its own deadline: the scheduler's (writeUDP) lapses WriteTimeout
		// after the scheduler's last write, in a gap of the script or once
		// the sends stopped, while the server still pings.
		c.conn.SetWriteDeadline(time.Now().Add(c.f.cfg.WriteTimeout))
	}
	if c.udp && len(ev.Replies) > 1 {
		// One datagram per message.
		prev := 0
		for _, r := range ev.Replies {
			n, err := c.conn.Write(b[prev:r.End])
			if err != nil {
				return DisconnectWriteError
			}
			c.sched.c.sentBytes.Add(int64(n))
			prev = r.End
		}
		return DisconnectNone
	}
	if c.udp || !c.joined.Load() {
		if ev.Relogin && c.retry != nil {
			c.retry.dgram = b
		}
		if _, err := c.conn.Write(b); err != nil {
			return DisconnectWriteError
		}
		if ev.Relogin {
			c.sched.c.sentFrames[c.f.player.Kinds().Index("join")].Add(1)
		}
		c.sched.c.sentBytes.Add(int64(len(b)))
		return DisconnectNone
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.dead.Load() {
		return DisconnectNone
	}
	if c.tlsOn {
		b = c.seal(nil, b)
	}
	return c.writeLocked(b)
}

// writeLocked writes b after the login, in order with the scheduler's
// writes (the caller holds wmu): behind the backlog, or raw and what the
// kernel did not take into it.
func (c *client) writeLocked(b []byte) DisconnectCode {
	if len(c.backlog) > 0 {
		if len(c.backlog)+len(b) > c.f.cfg.SendBacklog {
			return DisconnectBacklogFull
		}
		c.backlog = append(c.backlog, b...)
		c.sched.retryBacklog(c)
		return DisconnectNone
	}
	if c.rw == nil {
		c.rw = newRawWriter()
	}
	n, err := c.rw.write(c, b)
	switch {
	// Fails the reader, which closes; queue would close from inside the
	// read callback (a Close there waits for itself).
	case err != nil:
		return DisconnectWriteError
	case len(b)-n > c.f.cfg.SendBacklog:
		return DisconnectBacklogFull
	}
	c.sched.c.sentBytes.Add(int64(n))
	if n < len(b) {
		// The scheduler drains it (retryBacklog): this client may have
		// no turn due for long. The write timeout counts from now.
		c.stuckSince = c.f.now()
		c.queue(b[n:])
		c.sched.retryBacklog(c)
	}
	return DisconnectNone
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
	c.sched.c.sentFrames[c.f.player.Kinds().Index("join")].Add(1)
	c.sched.c.sentBytes.Add(int64(len(r.dgram)))
	c.conn.SetReadDeadline(r.readDeadline(time.Now()))
	return true
}

// reasonProtocol is a login or connection ended by bytes that are not the
// profile's protocol.
const reasonProtocol = "protocol_error"

// confirm sends the profile's confirmation (reprise over UDP: a heartbeat
// with the session token) right after joined: it
// proves to the relay that this client receives at its address, and until
// then the relay sends the session nothing more (docs/protocol.md, UDP).
// Captures recorded before this step replay too: the fleet does the
// handshake of the relay it talks to, whatever the capture holds. The
// heartbeat is sent again, with the join's backoff, until a frame other
// than joined arrives (the relay sends an unconfirmed session nothing
// else) or the login timeout.
func (c *client) confirm(b []byte) error {
	b = append([]byte(nil), b...)
	if _, err := c.conn.Write(b); err != nil {
		return err
	}
	c.sched.c.sentFrames[c.f.player.HeartbeatKind()].Add(1)
	c.sched.c.sentBytes.Add(int64(len(b)))
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
	c.sched.c.sentFrames[c.f.player.HeartbeatKind()].Add(1)
	c.sched.c.sentBytes.Add(int64(len(k.r.dgram)))
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

// loggedIn moves a client that just got joined onto its scheduler.
//
// The order matters against Fleet.stop, which sets stopping and then
// looks at joined: whichever runs second sees the other's store, so a
// client that logs in during the stop still leaves and never keeps an
// unbounded read.
func (c *client) loggedIn(res chan<- LoginResult) {
	if c.wire != nil {
		c.wire.buffer() // from now on the scheduler writes the records
	}
	c.retry = nil
	c.f.place(c) // before joinedRoom: the instance's casts count from here
	c.joinedRoom()
	c.conn.SetReadDeadline(time.Time{})
	// The scheduler's TCP writes never wait, and a raw write fails once a
	// deadline has passed: clear the login's.
	c.conn.SetWriteDeadline(time.Time{})
	if c.nextFlow() != nil {
		// Until its next turn's login has its result; before joined,
		// which a disconnect (turnOver) needs.
		c.f.turnsPending.Add(1)
	}
	c.joined.Store(true)
	if c.turnIndex() > 0 {
		c.f.stats.nextOK()
		c.f.httpTimes.record(c.tn.name, time.Since(c.tn.loginAt))
	} else {
		c.f.stats.loginOK()
	}
	if c.fc != nil {
		c.fc.logins.Add(1)
	}

	report(res, LoginResult{})
	if c.stopping.Load() {
		c.leave(time.Now().Add(c.f.cfg.LeaveTimeout))
		return
	}
	c.start = c.f.now()
	c.next = int64(c.player.LoginSteps())
	if c.canPoll() {
		// Once handed over (readStream): the scheduler writes through
		// the poller's descriptor.
		c.toSched = true
		return
	}
	c.sched.add(c)
}

func (c *client) readEnded(err error, res chan<- LoginResult) Disconnect {
	if !c.joined.Load() {
		reason := LoginClosed
		switch {
		case c.stopping.Load():
			report(res, loginFail(LoginStopped))
			return Disconnect{}
		case isTimeout(err):
			reason = LoginTimeout
		case errors.Is(err, syscall.ECONNREFUSED):
			reason = LoginConnectRefused
		case errors.Is(err, syscall.ECONNRESET):
			reason = LoginReset
		}
		if r, ok := c.tlsAnswer(reason); ok {
			c.loginFailed(r, res)
			return Disconnect{}
		}
		c.loginFailed(loginFail(reason), res)
		return Disconnect{}
	}
	if c.stopping.Load() {
		return Disconnect{}
	}
	if e := c.lastErr.Load(); e != nil {
		return Disconnect{code: DisconnectServerError, said: *e}
	}
	switch {
	case errors.Is(err, io.EOF):
		return c.closedBy()
	case errors.Is(err, syscall.ECONNRESET):
		return disconnectBy(DisconnectReset)
	case errors.Is(err, net.ErrClosed):
		return disconnectBy(DisconnectWriteError) // the scheduler closed it after a failed write
	}
	return disconnectBy(DisconnectReadError)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

// dialReason names a failed dial.
func dialReason(err error) LoginResult {
	switch {
	case errors.Is(err, syscall.EADDRNOTAVAIL), errors.Is(err, syscall.EADDRINUSE):
		return loginFail(LoginPortExhausted)
	case errors.Is(err, syscall.ECONNREFUSED):
		return loginFail(LoginConnectRefused)
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return loginFail(LoginTooManyFiles)
	case errors.Is(err, context.Canceled):
		return loginFail(LoginStopped)
	case isTimeout(err):
		return loginFail(LoginConnectTimeout)
	}
	var bad *net.AddrError
	if errors.As(err, &bad) {
		return loginFail(LoginBadAddress)
	}
	return loginFail(LoginConnectError)
}

// send writes the due steps of a scheduled client, coalesced into one
// write on TCP, and retries its backlog first (send.go). It runs on the
// scheduler's goroutine; buf is the scheduler's scratch buffer, returned for
// reuse.
func (c *client) send(now int64, buf []byte, lags []int64) ([]byte, []int64) {
	wall := c.f.wall(now)
	hbKind := c.f.player.HeartbeatKind()
	buf = buf[:0]
	ends := c.sched.ends[:0]
	cnt := c.sched.c
	var frames int
	var casts castCount
	for frames < maxBatch {
		st := c.plan.Step(c.next)
		if st.End {
			c.due = never
			if st.Frame == session.Handover {
				// This connection's turn ends at the cut: the scheduler
				// then drops it, and it goes on to the next (nextTurn).
				if due := c.start + int64(st.Due); due > now {
					c.due = due
				}
			}
			break
		}
		due := c.start + int64(st.Due)
		if due > now {
			c.due = due
			break
		}
		lags = append(lags, (now-due)/1000)
		start := len(buf)
		var kind int
		if st.Frame == session.Heartbeat {
			buf, kind = c.pc.AppendHeartbeat(buf, wall), hbKind
		} else {
			buf, kind = c.pc.AppendStep(buf, st.Frame, wall)
			casts.add(c.player.Fanout(st.Frame))
		}
		if len(buf) > start {
			buf = c.frame(buf, start)
			cnt.sentFrames[kind].Add(1)
			c.flowSent(kind)
		}
		c.next++
		frames++
		if st.Loops > 0 && c.loops.Load() != st.Loops {
			c.loops.Store(st.Loops) // a store (an exchange) only as a loop ends
		}
		if c.udp {
			casts.flush(c)
			casts = castCount{}
			if len(buf) > start && !c.writeUDP(buf[start:]) {
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
	c.sched.ends = ends
	if !c.udp {
		casts.flush(c)
		if c.replies {
			c.wmu.Lock()
			defer c.wmu.Unlock()
		}
		if c.tlsOn {
			c.sched.sealed = c.seal(c.sched.sealed[:0], buf)
			sealedEnds(ends, len(buf), len(c.sched.sealed))
			c.sendTCP(c.sched.w, c.sched.sealed, ends, now)
		} else if !c.sched.pend(c, buf, ends, now) {
			c.sendTCP(c.sched.w, buf, ends, now)
		}
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
	c.sched.c.sentBytes.Add(int64(n))
	if err != nil {
		reason := DisconnectWriteError
		if isTimeout(err) {
			reason = DisconnectWriteTimeout
		}
		c.disconnect(disconnectBy(reason))
		return false
	}
	return true
}
