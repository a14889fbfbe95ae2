package relay

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/wire"
)

// udpServer is one UDP worker: one of the sockets sharing the UDP port
// (SO_REUSEPORT, so the kernel sends a client's datagrams always to the
// same one), read by one goroutine, which owns the sessions that joined
// through it and checks their idle timeouts between reads. It reads up to
// udpReadBatch datagrams per recvmmsg, queues the deliveries they cause to
// its sessions' room members in its writer, and sends them with sendmmsg
// after the batch (udpio.go).
//
// Address validation (RFC 9000 §8.1's idea; docs/protocol.md "UDP"): a join
// datagram's source may be forged, so a new session gets one joined reply,
// never larger than the join datagram, and nothing else until a datagram
// carrying its token arrives from that source, which proves the client
// receives there. Until then the session is in its room (it holds its user
// id) but gets no deliveries; membership notices for it wait in its
// pending state and go out at confirmation, after the rest of its member
// list. An unconfirmed session ends after Config.UDPConfirmTimeout,
// silently; a source address may hold Config.UDPPendingPerSource of them.
type udpServer struct {
	s        *Server
	conn     *udpSock
	r        *udpReader
	w        *udpWriter
	sessions map[uint64]*client
	// byAddr is the latest session joined from each source, so a join
	// sent again (its joined was lost) gets the same session back.
	byAddr map[netip.AddrPort]*client
	// Their size histories (shrink.go): rebuilt once a flood of sessions
	// has gone.
	sessionsSize, byAddrSize shrinking
	// at is when the datagram being handled arrived (udpReader.arrival),
	// on the relay's clock: its sender's rate limits charge it then. Its
	// session's liveness counts from the read (u.r.now): a relay run late
	// does not time out the sessions whose datagrams it had not read.
	at int64
	// The member names the unsent list tails of this worker's unconfirmed
	// sessions hold (their counts are the Server's pendingCounts).
	restNames int
	reply     []byte
	// gather's holds: misses in a row, holds left to skip, the next skip
	misses, skip, next int
	// the clients' open datagrams this worker opened (udppack.go), and
	// when the first of them is due (relay clock; 0: none)
	opened  []opened
	nextDue int64
}

// Bounds on what unconfirmed sessions hold: notices per session, and the
// member names of unsent list tails over all of them.
const (
	maxPendingNotices = 8 << 10
	maxRestNames      = 1 << 20
)

// pending is an unconfirmed session's state. Its fields are written with
// the room's shard locked (join, hold) or by the UDP loop after the
// session left its room.
type pending struct {
	since    int64    // relay clock of the join
	reply    []byte   // the joined sent, for a join sent again
	owner    string   // the owner the list was taken with
	rest     []string // members the reply had no room for
	notices  []byte   // member notices since the join, whole frames
	overflow bool     // notices went over maxPendingNotices
}

// first sends the joined reply of a new UDP session: the token and the
// members that fit in limit bytes (the join datagram's size, and at most
// wire.UDPJoinPad); the rest of the list waits for confirmation.
func (p *pending) first(c *client, owner string, names []string, limit int) {
	limit = min(limit, wire.UDPJoinPad)
	var k int
	p.reply, k = wire.AppendJoinedFit(p.reply[:0], c.token, owner, names, limit)
	p.owner = owner
	p.rest = append(p.rest[:0], names[k:]...)
	c.s.sendUDP(p.reply, c.addr)
}

// hold keeps a member notice for an unconfirmed session; other frames
// (deliveries) are not for it yet and are counted as undelivered.
func (p *pending) hold(frame []byte, m *metrics.Relay) {
	switch wire.Type(frame[wire.LenSize]) {
	case wire.TypeMemberJoined, wire.TypeMemberLeft:
		if len(p.notices)+len(frame) > maxPendingNotices {
			p.overflow = true
			return
		}
		p.notices = append(p.notices, frame...)
	default:
		m.Undelivered(UndeliveredUnconfirmed.String())
	}
}

// udpReadBatch is how many datagrams one read takes at most.
const udpReadBatch = 64

func newUDPServer(s *Server, conn *udpSock) (*udpServer, error) {
	// A buffer holds any datagram the relay accepts: token, frame, and one
	// byte more to tell an oversized one.
	r, err := newUDPReader(conn, udpReadBatch, wire.TokenSize+wire.LenSize+s.cfg.MaxFrame+1)
	if err != nil {
		return nil, err
	}
	w, err := newUDPWriter(conn, s.cfg.UDPCoalesce)
	if err != nil {
		return nil, err
	}
	return &udpServer{s: s, conn: conn, r: r, w: w, sessions: make(map[uint64]*client), byAddr: make(map[netip.AddrPort]*client)}, nil
}

// sendUDP sends one server→client datagram: the frame alone. A frame over
// the largest datagram is not sent, and counted. It reports whether the
// datagram went out.
func (s *Server) sendUDP(frame []byte, to netip.AddrPort) bool {
	if len(frame) > wire.MaxDatagram {
		s.m.Undelivered(UndeliveredDatagramTooLarge.String())
		s.logLimited(&s.bigDatagramLog, "frame larger than a UDP datagram not sent", zap.Int("bytes", len(frame)), zap.Stringer("to", to))
		return false
	}
	n, err := s.udp.WriteToUDPAddrPort(frame, to)
	if n > 0 {
		s.m.SentBytes.Add(float64(n))
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		s.log.Debug("udp send", zap.Stringer("to", to), zap.Error(err))
	}
	return err == nil
}

func (u *udpServer) loop(ctx context.Context) {
	s := u.s
	tick := int64(s.sweepTick())
	next := s.now() + tick
	set := int64(-1) // the read timeout set on the socket
	// What a read's datagrams cause goes out after it and the rest of its
	// burst (gather), packed per client: each client's open datagram
	// leaves once full, or once due, read or not (udppack.go).
	for ctx.Err() == nil {
		wait := tick // sweeps come after reads: a read need only wait for datagrams
		if u.nextDue != 0 {
			wait = max(u.nextDue-s.now(), 0)
		}
		// Set again when it changed by more than a quarter (a system
		// call: not at every read of a busy worker).
		if d := wait - set; set < 0 || d > set/4 || -d > wait/4 {
			if err := u.conn.setReadTimeout(time.Duration(wait)); err != nil {
				s.log.Warn("udp read timeout", zap.Error(err)) // reads wait for datagrams only: sweeps come after them
			}
			set = wait
		}
		n, err := u.r.read()
		if ctx.Err() != nil {
			break
		}
		var ne net.Error
		switch {
		case err == nil:
			u.handle(n)
			u.gather(n)
			u.flush()
		case errors.Is(err, net.ErrClosed):
			u.closeAll()
			return
		case errors.As(err, &ne) && ne.Timeout():
			u.flush() // the open datagrams that are due; then the sweep tick
		default:
			s.log.Warn("udp read", zap.Error(err))
		}
		if now := s.now(); now >= next {
			u.sweep(now)
			next = now + tick
		}
	}
	u.closeAll()
}

// handle handles the n datagrams of the last read, each at its arrival
// (udpReader.arrival).
func (u *udpServer) handle(n int) {
	t := time.Now()
	u.r.clock(int64(t.Sub(u.s.epoch)), t)
	for i := range n {
		d, from, ok := u.r.datagram(i)
		if !ok {
			u.s.reject(RejectGarbage) // truncated: over any frame we accept
			continue
		}
		u.at = u.r.arrival(i)
		u.datagram(d, from)
	}
}

// udpGatherMax is the most datagrams a worker reads before it sends what
// they caused: enough to pack a recipient's datagrams full under a
// backlog (≈ 8 frames of 130–150 bytes per 1200) at 8 rooms × 32 over two
// workers, few enough to bound the delay of the first.
const udpGatherMax = 4 * udpReadBatch

// gather reads more of a burst before the flush, so that a client's
// frames from several senders leave packed in fewer datagrams: the cost of
// UDP is per datagram (udpio.go). After a read that emptied the socket
// (fewer than udpReadBatch), it waits Config.UDPHold once; then it takes
// what the socket holds without waiting, up to udpGatherMax datagrams in
// all. Without it, a worker on a quiet host woke, and sent, per datagram
// or two; on a busy one it sent after every 64 while more were queued.
// Holds that find nothing new are skipped after a few, as a TCP writer's
// are (writer.hold), so a lone datagram is not delayed each time.
func (u *udpServer) gather(n int) {
	held := n < udpReadBatch
	if held && !u.hold() {
		return
	}
	total := n
	for total < udpGatherMax {
		k, err := u.r.poll()
		if k > 0 {
			u.handle(k)
			total += k
		}
		if err != nil || k < udpReadBatch {
			break // the socket is empty (or closed: the next read says so)
		}
	}
	switch {
	case !held:
	case total == n:
		u.missed()
	default:
		u.misses, u.next = 0, minSkip
	}
}

// hold waits Config.UDPHold for the rest of a burst, unless holds are
// off or being skipped; it reports whether it waited.
func (u *udpServer) hold() bool {
	d := u.s.cfg.UDPHold
	if d <= 0 {
		return false
	}
	if u.skip > 0 {
		u.skip--
		return false
	}
	time.Sleep(d)
	return true
}

// missed counts a hold after which nothing new had arrived; after
// holdMisses in a row the next skip holds are skipped (doubling, as
// writer.hold does).
func (u *udpServer) missed() {
	if u.misses++; u.misses >= holdMisses {
		u.skip = max(u.next, minSkip)
		u.misses, u.next = 0, min(2*u.skip, maxSkip)
	}
}

// flush sends the deliveries queued while handling a read, and the open
// datagrams this worker opened that are due (udppack.go).
func (u *udpServer) flush() {
	if len(u.opened) > 0 {
		u.due(u.s.now(), false)
	}
	u.sendAll()
}

// flushAll sends every queued delivery and every open datagram this
// worker opened (shutdown).
func (u *udpServer) flushAll() {
	u.due(u.s.now(), true)
	u.sendAll()
}

// sendAll sends what the worker's writer holds.
func (u *udpServer) sendAll() {
	if u.w.pending() == 0 {
		return
	}
	if failed, err := sendQueued(u.w, u.s.m); failed > 0 || err != nil {
		u.s.log.Debug("udp send", zap.Int("failed", failed), zap.Error(err))
	}
}

// sendQueued flushes w and counts what it sent.
func sendQueued(w *udpWriter, m *metrics.Relay) (failed int, err error) {
	sent, bytes, calls, failed, err := w.flush()
	m.SentBytes.Add(float64(bytes))
	m.UDPSendCalls.Add(float64(calls))
	m.UDPDatagrams.Add(float64(sent))
	if w.delivered > 0 {
		m.DeliveredMessages.Add(float64(w.delivered))
	}
	return failed, err
}

// datagram handles one client→server datagram. Nothing goes back to a
// source without a confirmed session but the answer to its join (joined or
// an error), never more bytes than the datagram had.
func (u *udpServer) datagram(d []byte, from netip.AddrPort) {
	s := u.s
	s.m.ReceivedBytes.Add(float64(len(d)))
	token, fr, err := wire.SplitDatagram(d, s.cfg.MaxFrame)
	if err != nil {
		s.reject(RejectGarbage)
		return
	}
	if t := wire.Type(fr[wire.LenSize]); !t.FromClient() {
		s.reject(rejectFor(wire.ErrUnknownType)) // refused from the header, as on TCP
		return
	}
	var c *client
	if token != 0 {
		c = u.sessions[token]
		switch {
		case c == nil && s.tokens.has(token):
			// Another worker's session: the kernel hashes a session's own
			// address to the worker that owns it, so this came from
			// another source, whichever worker it reached.
			s.reject(RejectWrongSource)
			return
		case c == nil:
			s.reject(RejectUnknownSession)
			return
		case c.addr != from:
			s.reject(RejectWrongSource)
			return
		case c.replaced.Load():
			u.endReplaced(c)
			return
		}
		c.b.now = u.at
		c.lastActive.Store(u.r.now)
		if !c.confirmed && !u.confirm(c) {
			return
		}
	}
	var f wire.Frame
	if err := wire.DecodeBody(wire.Type(fr[wire.LenSize]), fr[wire.HeaderSize:], &f); err != nil {
		var werr *wire.Error
		if !errors.As(err, &werr) {
			s.reject(RejectGarbage)
			return
		}
		s.reject(rejectFor(werr.Code))
		if c == nil {
			u.answer(from, len(d), werr.Code, werr.Detail)
		} else {
			u.refused(c, werr)
		}
		return
	}
	if c == nil {
		u.join(&f, from, len(d))
		return
	}
	c.b.recvBytes = 0 // counted above
	if f.Type == wire.TypeLeave {
		c.b.recvMsgs++
		u.end(c, CloseLeave, "")
		return
	}
	if werr := c.handle(&f, 0); werr != nil {
		if werr.Code == wire.ErrRateLimited {
			c.b.flush(s.m)
			u.end(c, closeFor(werr.Code), werr.Detail)
			return
		}
		u.refused(c, werr)
	}
	c.b.flush(s.m)
}

// refused answers a refused frame of a confirmed session with its error;
// the session stays (a datagram stands alone: there is no stream to cut).
func (u *udpServer) refused(c *client, werr *wire.Error) {
	u.s.log.Debug("udp frame refused", zap.Uint64("session", c.id), zap.String("code", werr.Code.String()))
	u.reply = wire.AppendError(u.reply[:0], werr.Code, werr.Detail)
	u.s.sendUDP(u.reply, c.addr)
}

// join handles a datagram with token 0: only a join is allowed there. A
// joined session gets a fresh random token and is unconfirmed.
func (u *udpServer) join(f *wire.Frame, from netip.AddrPort, size int) {
	s := u.s
	if f.Type != wire.TypeJoin {
		s.reject(rejectFor(wire.ErrNotJoined))
		u.answer(from, size, wire.ErrNotJoined, f.Type.String()+" before join (token 0)")
		return
	}
	if c := u.byAddr[from]; c != nil && c.room != nil && !c.replaced.Load() && c.user == string(f.User) && c.room.Name() == string(f.Room) {
		// A client that did not get its joined in time joins again: a lost
		// datagram, not a second member. It gets its session's joined again.
		c.b.now = u.at
		c.lastActive.Store(u.r.now)
		u.rejoined(c, size)
		return
	}
	if u.restNames >= maxRestNames {
		s.m.Join(wire.ErrServerFull)
		u.answer(from, size, wire.ErrServerFull, "too many unconfirmed sessions")
		return
	}
	if text := s.pend.reserve(from.Addr(), s.cfg.UDPPendingPerSource, s.cfg.UDPMaxPending); text != "" {
		s.m.Join(wire.ErrServerFull)
		u.answer(from, size, wire.ErrServerFull, text)
		return
	}
	if text, cap := s.admit(from.Addr()); text != "" {
		s.pend.release(from.Addr())
		s.m.Join(wire.ErrServerFull)
		s.m.Refused(cap)
		u.answer(from, size, wire.ErrServerFull, text)
		return
	}
	now := u.r.now
	c := &client{s: s, id: s.nextID.Add(1), addr: from, src: from.Addr(), token: u.newToken(), pend: &pending{since: now}}
	c.b.out = u // what c casts goes out in this worker's sendmmsg
	c.b.now = u.at
	c.b.recvMsgs++ // the join
	if werr := c.join(f, size); werr != nil {
		s.pend.release(from.Addr())
		s.tokens.remove(c.token)
		s.srcs.disconnect(c.src)
		u.answer(from, size, werr.Code, werr.Detail)
		c.b.flush(s.m)
		return
	}
	c.lastActive.Store(now)
	u.sessions[c.token] = c
	u.byAddr[from] = c
	u.sessionsSize.grew(len(u.sessions))
	u.byAddrSize.grew(len(u.byAddr))
	u.restNames += len(c.pend.rest)
	s.nconns.Add(1)
	s.m.ConnectionsUDP.Inc()
	c.b.flush(s.m)
}

// confirm marks c's client as proven to receive at its address: the rest
// of its member list and the notices held for it go out, and it is a
// member for deliveries from now on. It reports false if c had to end
// instead (its held notices overflowed: the client must join again).
func (u *udpServer) confirm(c *client) bool {
	sh := c.shard
	sh.Lock()
	p := c.pend
	if p.overflow {
		sh.Unlock()
		u.unpend(c)
		u.end(c, closeFor(wire.ErrSlowConsumer), "membership changed too much before the session was confirmed; join again")
		return false
	}
	c.confirmed = true // deliverers, holding sh, no longer touch p
	for names := p.rest; len(names) > 0; {
		var k int
		u.reply, k = wire.AppendJoinedFit(u.reply[:0], c.token, p.owner, names, wire.UDPJoinPad)
		u.s.sendUDP(u.reply, c.addr)
		names = names[k:]
	}
	for n := p.notices; len(n) > 0; {
		l := wire.FrameLen(n)
		u.s.sendUDP(n[:l], c.addr)
		n = n[l:]
	}
	sh.Unlock()
	u.unpend(c)
	return true
}

// rejoined answers a join sent again by c's client (its joined was lost
// or late): unconfirmed, the same joined again; confirmed (the address is
// proven), a joined with the list as it is now, as much as fits. Either
// within replyLimit bytes, like any join reply.
//
// A confirmed session's list is the room as it is now in join order with
// the joiner moved last, as every member list ends (docs/protocol.md,
// "Member lists"): the first frame within replyLimit, the rest in further
// frames (the address is proven). Repeats count against the session's rate
// limits; one over them is answered rate_limited and ends the session, as
// a join over them does on TCP.
func (u *udpServer) rejoined(c *client, replyLimit int) {
	s := u.s
	s.m.UDPJoinRepeats.Inc()
	if over := c.lim.allow(c.b.now, replyLimit, s.rateMsgs, s.rateBytes); over != "" {
		c.overLimit(over)
		text := "join repeated over the relay's rate limit (" + over + ")"
		if c.pend != nil {
			u.answer(c.addr, replyLimit, wire.ErrRateLimited, text)
		}
		u.end(c, closeFor(wire.ErrRateLimited), text)
		return
	}
	c.b.recvMsgs++
	if c.pend != nil {
		if reply := c.pend.reply; len(reply) > 0 && len(reply) <= replyLimit {
			s.sendUDP(reply, c.addr)
		}
		c.b.flush(s.m)
		return
	}
	sh, rm, b := c.shard, c.room, &c.b
	sh.Lock()
	b.names = b.names[:0]
	for _, m := range rm.Members() {
		if m.Value != c {
			b.names = append(b.names, m.ID)
		}
	}
	b.names = append(b.names, c.user)
	owner := rm.Owner()
	sh.Unlock()
	limit := min(replyLimit, wire.UDPJoinPad)
	for names := b.names; len(names) > 0; limit = wire.UDPJoinPad {
		var k int
		u.reply, k = wire.AppendJoinedFit(u.reply[:0], c.token, owner, names, limit)
		if k <= 0 { // not even one member fits the join's size
			u.answer(c.addr, replyLimit, wire.ErrPadRequired, strconv.Itoa(wire.JoinedSize(owner, names[:1])))
			break
		}
		s.sendUDP(u.reply, c.addr)
		names = names[k:]
	}
	b.dropJoinScratch()
	c.b.flush(s.m)
}

// unpend forgets c's pending state (confirmed or ended).
func (u *udpServer) unpend(c *client) {
	p := c.pend
	if p == nil {
		return
	}
	u.s.pend.release(c.addr.Addr())
	u.restNames -= len(p.rest)
	c.pend = nil
}

// answer sends an error to a source without a confirmed session, cut to
// fit in limit bytes; if even the bare frame does not fit, nothing is sent.
func (u *udpServer) answer(to netip.AddrPort, limit int, code wire.ErrorCode, text string) {
	const bare = wire.HeaderSize + 2
	if limit < bare {
		return
	}
	if len(text) > limit-bare {
		text = text[:limit-bare]
	}
	u.reply = wire.AppendError(u.reply[:0], code, text)
	u.s.sendUDP(u.reply, to)
}

// newToken draws a fresh session token and reserves it in the relay's
// set of live tokens (all workers).
func (u *udpServer) newToken() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:]) // never fails on Linux (Go 1.24+ crypto/rand)
		if t := binary.BigEndian.Uint64(b[:]); t != 0 && u.s.tokens.add(t) {
			return t
		}
	}
}

// pendingCounts is the unconfirmed UDP sessions of all workers, per
// source address and in all, for --udp-max-unconfirmed(-per-source). They
// were per worker, each holding 1/UDPWorkers of the limits, but the kernel
// hashes each source port onto a worker and does not spread one address's
// ports evenly: 256 clients from one address (the limit) logging in while
// the relay was starved got server_full on the worker that had more than
// half of them. Joins only: not the hot path.
type pendingCounts struct {
	mu        sync.Mutex
	perSource map[netip.Addr]int
	n         int
}

// reserve counts one more unconfirmed session from a, or says why not.
func (p *pendingCounts) reserve(a netip.Addr, maxPerSource, maxAll int) (refused string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.perSource[a] >= maxPerSource:
		return "too many unconfirmed sessions from this address"
	case p.n >= maxAll:
		return "too many unconfirmed sessions"
	}
	if p.perSource == nil {
		p.perSource = make(map[netip.Addr]int)
	}
	p.perSource[a]++
	p.n++
	return ""
}

// release forgets one unconfirmed session from a (confirmed or ended).
func (p *pendingCounts) release(a netip.Addr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.perSource[a]--; p.perSource[a] <= 0 {
		delete(p.perSource, a)
	}
	p.n--
}

// tokenSet is the tokens of every live UDP session over all workers. A
// worker consults it only for a token it does not own (not on the hot
// path), to answer wrong_source rather than unknown_session whichever
// worker the datagram reached.
type tokenSet struct {
	mu   sync.Mutex
	m    map[uint64]struct{}
	size shrinking
}

// add reserves t; false if it is taken.
func (ts *tokenSet) add(t uint64) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.m[t]; ok {
		return false
	}
	if ts.m == nil {
		ts.m = make(map[uint64]struct{})
	}
	ts.m[t] = struct{}{}
	ts.size.grew(len(ts.m))
	return true
}

func (ts *tokenSet) remove(t uint64) {
	ts.mu.Lock()
	delete(ts.m, t)
	ts.m = shrunk(&ts.size, ts.m)
	ts.mu.Unlock()
}

func (ts *tokenSet) has(t uint64) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	_, ok := ts.m[t]
	return ok
}

// end closes a session for r: r's error frame with text, if r has a code
// (only to a confirmed address), then it leaves its room.
func (u *udpServer) end(c *client, r CloseReason, text string) {
	s := u.s
	if code := r.Code(); code != 0 && c.pend == nil {
		u.reply = wire.AppendError(u.reply[:0], code, text)
		s.sendUDP(u.reply, c.addr)
	}
	c.leave()
	c.b.flush(s.m)
	u.unpend(c)
	delete(u.sessions, c.token)
	u.sessions = shrunk(&u.sessionsSize, u.sessions)
	s.tokens.remove(c.token)
	s.srcs.disconnect(c.src)
	if u.byAddr[c.addr] == c {
		delete(u.byAddr, c.addr)
		u.byAddr = shrunk(&u.byAddrSize, u.byAddr)
	}
	s.nconns.Add(-1)
	s.m.ConnectionsUDP.Dec()
	s.disconnected(r)
}

// endReplaced ends a session whose user joined again elsewhere; it is no
// room member any more (see client.replace).
func (u *udpServer) endReplaced(c *client) {
	u.end(c, closeFor(wire.ErrReplaced), "user "+strconv.Quote(c.user)+" joined again from another connection")
}

// sweep ends sessions that stayed unconfirmed or idle too long (their
// liveness bound, see client.beat), and replaced ones.
func (u *udpServer) sweep(now int64) {
	unconfirmed := int64(u.s.cfg.UDPConfirmTimeout)
	for _, c := range u.sessions {
		bound := c.idleBound()
		switch {
		case c.pend != nil && now-c.pend.since > unconfirmed:
			u.end(c, CloseUnconfirmed, "")
		case c.replaced.Load():
			u.endReplaced(c)
		case now-c.lastActive.Load() > int64(bound):
			u.end(c, closeFor(wire.ErrIdleTimeout), idleText(bound))
		}
	}
	u.flush() // the member_left notices
}

// closeAll ends every session at shutdown.
func (u *udpServer) closeAll() {
	for _, c := range u.sessions {
		u.end(c, closeFor(wire.ErrShuttingDown), "relay is stopping")
	}
	u.flushAll()
}
