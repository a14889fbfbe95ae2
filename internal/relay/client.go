package relay

import (
	"errors"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/room"
	"github.com/reprise-harness/reprise/internal/wire"
)

// client is one room member's handle: a TCP connection, or a UDP session
// (tcp nil, frames sent as datagrams to addr).
type client struct {
	s  *Server
	id uint64

	tc  *tcpConn // nil: a UDP session
	out outbound
	// refused: a connection refused at accept (server_full), served only
	// to send that error frame; it counts in no gauge.
	refused bool

	addr  netip.AddrPort // UDP only
	token uint64         // UDP only
	src   netip.Addr     // the peer's address, for the per-source caps
	// confirmed: the UDP session's client sent back its token (udp.go).
	// Until then frames for it are not sent (notices wait in pend). Written
	// by the UDP loop with the room's shard locked; read by deliverers,
	// which hold that lock.
	confirmed bool
	pend      *pending
	// dg is the UDP client's datagram being filled, by whichever worker
	// delivers to it (udppack.go).
	dg openDgram

	// Membership, written only by the goroutine that reads this client
	// (its TCP connection's loop, or the UDP loop), with the shard locked.
	user  string
	room  *room.Room[*client]
	shard *room.Shard[*client]
	// gone says a newer join with the same user id took this client's
	// place in room: it is no member any more. Written and read with the
	// shard locked; replaced mirrors it for the UDP loop and the sweeper.
	gone     bool
	replaced atomic.Bool
	// roomWindow is the room's sender window this member was last counted
	// in (admitRoom); under the shard's lock.
	roomWindow int64

	// Read by the sweeper.
	joined        atomic.Bool
	unjoinedSince atomic.Int64
	lastActive    atomic.Int64
	liveness      atomic.Int64 // idle bound learned from heartbeats, ns; 0: none yet
	partialSince  atomic.Int64 // when the partial frame's first byte came; 0: none
	partialHeld   atomic.Int64 // bytes the parser holds for it

	// The reading goroutine's own: rate limits, heartbeat intervals, the
	// partial frame's stream offset, and scratch.
	lim          limiter
	hbLast       int64
	hbGaps       [livenessSamples]int64
	hbN          int
	partialStart int64
	b            batch
}

// batch is what one reading goroutine accumulates while it handles one
// read's worth of frames: the deliver encoded once per send, the recipients,
// the connections whose writers need waking, and counters added to the
// metrics once per batch instead of once per frame.
type batch struct {
	now       int64 // relay clock at the read, for limits and timers
	enc       []byte
	rcpts     []*client
	names     []string
	pcd       []*client // clients to flush, each at most once per batch
	frames    int       // whole frames read, dropped ones too
	recvMsgs  int
	recvBytes int
	// out is the UDP worker whose goroutine runs this batch (UDP sessions
	// only): deliveries to confirmed UDP members go into each member's
	// open datagram (udppack.go) and leave in the worker's sendmmsg. nil,
	// or a member not confirmed yet: client.deliver, one by one.
	out *udpServer
	// udp queues the deliveries of a TCP reader's batch to confirmed UDP
	// members, packed per member and sent at flush like out's (made on
	// first use: most TCP members share no room with a UDP one).
	udp *udpWriter
	// lp is the loop whose goroutine runs this batch (a TCP client's):
	// recipients on it are marked, not posted (loop.go).
	lp      *loop
	queued  int
	written int // deliveries sent as UDP datagrams
	// frames dropped by the rate limits: the sender's, its room's
	limitedMsgs, limitedBytes         int
	limitedRoomMsgs, limitedRoomBytes int
}

// deliver queues frame to c and remembers to wake c's writer. Frames for
// UDP clients go into a UDP writer, packed per client and sent at the end
// of the batch.
func (b *batch) deliver(c *client, frame []byte) {
	if !c.isUDP() {
		if c.deliver(frame) {
			b.pcd = append(b.pcd, c)
		}
		return
	}
	switch {
	case !c.confirmed:
		c.pend.hold(frame, c.s.m)
	case len(frame) > wire.MaxDatagram:
		c.s.sendUDP(frame, c.addr) // not sent: counted and logged there
	case b.out != nil:
		// The hold counts from the worker's read, not from the sender's
		// kernel arrival (b.now, which the limits charge): a datagram
		// opened at an arrival read late came due at once, and a
		// recipient's datagrams taken by two workers in turn overtook
		// each other (TestUDPRoomAcrossWorkers).
		b.out.pack(c, frame, b.out.r.now)
	default:
		b.queueUDP(c, frame)
	}
}

// queueUDP queues a frame for UDP client c from a batch that is not a UDP
// worker's (a TCP reader's), so a TCP member's burst reaches a UDP member
// packed too (docs/protocol.md).
func (b *batch) queueUDP(c *client, frame []byte) {
	w := b.udpWriter(c.s)
	if w == nil {
		if c.s.sendUDP(frame, c.addr) && wire.Type(frame[wire.LenSize]) == wire.TypeDeliver {
			b.written++
		}
		return
	}
	// Frames a UDP worker holds for c in its open datagram (udppack.go)
	// were received before this one: they leave first, in the same
	// flush, so the relay sends in the order it received.
	d := &c.dg
	d.mu.Lock()
	full := false
	if len(d.b) > 0 {
		full = w.addDatagram(d.b, c.addr, d.dlv)
		d.b, d.dlv = d.b[:0], 0
	}
	full = w.add(frame, c.addr) || full
	d.mu.Unlock()
	if full {
		b.flushUDP(c.s.m)
	}
}

// udpWriter is the batch's own UDP writer (see batch.udp), nil if the
// socket is gone.
func (b *batch) udpWriter(s *Server) *udpWriter {
	if b.udp == nil && s.udp != nil {
		b.udp, _ = newUDPWriter(s.udp, s.cfg.UDPCoalesce)
	}
	return b.udp
}

// flushUDP sends what the batch queued for UDP members.
func (b *batch) flushUDP(m *metrics.Relay) {
	if b.udp != nil && b.udp.pending() > 0 {
		sendQueued(b.udp, m)
	}
}

// flush wakes the writers of every client that got frames in this batch
// and adds the batch's counters.
func (b *batch) flush(m *metrics.Relay) {
	b.flushUDP(m)
	for i, c := range b.pcd {
		c.signalFrom(b.lp)
		b.pcd[i] = nil
	}
	b.pcd = b.pcd[:0]
	if b.recvMsgs > 0 {
		m.ReceivedMessages.Add(float64(b.recvMsgs))
		b.recvMsgs = 0
	}
	if b.recvBytes > 0 {
		m.ReceivedBytes.Add(float64(b.recvBytes))
		b.recvBytes = 0
	}
	if b.queued > 0 {
		m.QueuedMessages.Add(float64(b.queued))
		b.queued = 0
	}
	if b.written > 0 {
		m.DeliveredMessages.Add(float64(b.written))
		b.written = 0
	}
	if b.limitedMsgs+b.limitedBytes > 0 {
		m.RateLimited(b.limitedMsgs, b.limitedBytes)
		b.limitedMsgs, b.limitedBytes = 0, 0
	}
	if b.limitedRoomMsgs+b.limitedRoomBytes > 0 {
		m.RoomLimited(b.limitedRoomMsgs, b.limitedRoomBytes)
		b.limitedRoomMsgs, b.limitedRoomBytes = 0, 0
	}
	b.frames = 0
}

func (c *client) isUDP() bool { return c.tc == nil }

// deliver queues one frame to TCP client c; it reports whether c's writer
// must be woken after the batch.
func (c *client) deliver(frame []byte) bool {
	signal, ok := c.out.appendFrame(frame)
	if !ok {
		if _, reason := c.out.state(); reason == CloseMemoryBudget {
			c.abort()
			return signal
		}
		c.s.m.SlowConsumers.Inc()
		c.s.log.Info("slow consumer: outbound queue over --max-pending", zap.Uint64("conn", c.id),
			zap.String("user", c.user), zap.Int("max_pending", c.s.cfg.MaxPending))
		// The queue now holds only the slow_consumer error frame: the
		// writer sends it (within the write timeout) and half-closes;
		// the reader stops after the linger, as after any refusal.
		c.setReadDeadline(lingerTime)
	}
	return signal
}

// close sends c an error frame and closes it: the writer flushes and
// half-closes, and the reader drains input for at most lingerTime. Safe
// from any goroutine; only the first close of a client counts, and close
// reports whether it was this one.
func (c *client) close(code wire.ErrorCode, text string) bool {
	if c.isUDP() {
		return false // UDP sessions are closed by the UDP loop
	}
	r := closeFor(code)
	if c.out.closeWith(wire.AppendError(nil, r.Code(), text), r) {
		c.setReadDeadline(lingerTime) // and wakes the loop
		return true
	}
	return false
}

// refusal is an error a client is answered with: the code and its text.
func refusal(code wire.ErrorCode, text string) *wire.Error {
	return &wire.Error{Code: code, Detail: text}
}

// join adds c to a room as user. replyLimit, when positive, is the most
// bytes the joined reply may have (UDP: the join datagram's size, no
// amplification): a reply that cannot fit even with no members listed gets
// pad_required with the size needed. On success c gets joined (TCP: the
// whole member list, in as many frames as it takes; UDP: the first frame,
// the rest after confirmation) and the other members member_joined, all
// with the shard locked.
func (c *client) join(f *wire.Frame, replyLimit int) *wire.Error {
	s := c.s
	if !c.isUDP() && c.out.isClosing() {
		// Replaced or refused while its reader was still handling a read:
		// a connection being closed joins nothing, or it would take the
		// user id back from the member that replaced it.
		return nil
	}
	if c.room != nil {
		s.reject(rejectFor(wire.ErrAlreadyJoined))
		return refusal(wire.ErrAlreadyJoined, "this connection is in room "+strconv.Quote(c.room.Name())+" already")
	}
	user := string(f.User)
	if werr := s.checkAuth(user, f.Auth); werr != nil {
		s.m.Join(werr.Code)
		return werr
	}
	name := string(f.Room)
	if !s.srcs.enter(c.src, name, s.cfg.MaxRoomsPerSource) {
		s.m.Join(wire.ErrServerFull)
		s.m.Refused(metrics.CapRoomsPerSource)
		return refusal(wire.ErrServerFull, "this address is in --max-rooms-per-source ("+strconv.Itoa(s.cfg.MaxRoomsPerSource)+") rooms")
	}
	werr := c.joinRoom(f, name, replyLimit)
	if werr != nil {
		s.srcs.exit(c.src, name)
	}
	return werr
}

// joinRoom is join once the per-source room cap let it through.
func (c *client) joinRoom(f *wire.Frame, name string, replyLimit int) *wire.Error {
	s, user := c.s, string(f.User)
	sh := s.rooms.Shard(name)
	sh.Lock()
	defer sh.Unlock()
	if max := s.cfg.MaxRooms; max > 0 && sh.Room(name) == nil && s.rooms.Rooms() >= max {
		s.m.Join(wire.ErrServerFull)
		s.m.Refused(metrics.CapRooms)
		return refusal(wire.ErrServerFull, "relay at --max-rooms ("+strconv.Itoa(max)+")")
	}
	if replyLimit > 0 {
		owner := user
		if rm := sh.Room(name); rm != nil {
			owner = rm.Owner()
		}
		if need := wire.JoinedSize(owner, nil); need > replyLimit {
			s.m.Join(wire.ErrPadRequired)
			return refusal(wire.ErrPadRequired, strconv.Itoa(need))
		}
	}
	rm, err := sh.Join(name, user, c)
	if errors.Is(err, room.ErrDuplicate) {
		c.replace(sh, sh.Room(name), user)
		rm, err = sh.Join(name, user, c)
	}
	switch {
	case errors.Is(err, room.ErrFull):
		s.m.Join(wire.ErrRoomFull)
		return refusal(wire.ErrRoomFull, "room "+strconv.Quote(name)+" is full ("+strconv.Itoa(s.cfg.MaxRoomMembers)+" members)")
	case err != nil:
		return refusal(wire.ErrMalformed, err.Error())
	}
	c.user, c.room, c.shard = user, rm, sh
	c.roomWindow = -1
	c.joined.Store(true)
	c.lastActive.Store(s.now())
	s.m.Join(0)
	// The user ids that joined, for tests that check who logged in (the
	// sharded fleet's); Check keeps it free when debug is off.
	if ce := s.log.Check(zap.DebugLevel, "joined"); ce != nil {
		ce.Write(zap.Uint64("conn", c.id), zap.String("user", user), zap.String("room", name))
	}

	b := &c.b
	// The list is built in the scratch of the goroutine that runs the
	// join: a TCP member's loop (it runs one join at a time), so joins
	// make no garbage as long as the room; a UDP session's own batch,
	// sized once and dropped after (dropJoinScratch).
	names, enc := &b.names, &b.enc
	if b.lp != nil {
		names, enc = &b.lp.joinNames, &b.lp.joinEnc
	}
	if cap(*names) < rm.Len() {
		*names = make([]string, 0, rm.Len()) // one array, no doubling's garbage
	}
	*names = (*names)[:0]
	for _, m := range rm.Members() {
		*names = append(*names, m.ID)
	}
	if c.isUDP() {
		c.pend.first(c, rm.Owner(), *names, replyLimit)
	} else {
		c.memberList(enc, rm.Owner(), *names, s.cfg.MaxFrame+wire.LenSize)
	}
	clear(*names)
	b.enc = wire.AppendMemberJoined(b.enc[:0], user)
	for _, m := range rm.Members() {
		if m.Value != c {
			b.deliver(m.Value, b.enc)
		}
	}
	b.dropJoinScratch()
	return nil
}

// Scratch a batch keeps for its next use: its deliveries' encoding, and
// the member names of a join (a handful).
const (
	keepEnc   = chunkSize
	keepNames = 64
)

// dropJoinScratch lets go of the scratch a UDP session's join list grew
// in its own batch (a TCP member's is its loop's): as long as the room (16
// bytes a name), and kept, it is per member. Kept per TCP member too, 16,000
// members in rooms of 1,000 held ~150 MB of names and joined frames, most
// of the Go heap's peak at a stall of them, whose span and GC metadata the
// runtime keeps after. A join is once per membership: the next use grows
// what it needs again.
func (b *batch) dropJoinScratch() {
	if cap(b.names) > keepNames {
		b.names = nil
	} else {
		clear(b.names)
	}
	if cap(b.enc) > keepEnc {
		b.enc = nil
	}
}

// memberList queues names to c as joined frames of at most limit bytes
// each, every one continuing the list; the last ends with c's own id. enc
// is the scratch they are encoded in.
func (c *client) memberList(enc *[]byte, owner string, names []string, limit int) {
	if need := min(wire.JoinedSize(owner, names), limit); cap(*enc) < need {
		*enc = make([]byte, 0, need) // as names: one array, no doubling
	}
	for first := true; first || len(names) > 0; first = false {
		var k int
		*enc, k = wire.AppendJoinedFit((*enc)[:0], c.token, owner, names, limit)
		c.b.deliver(c, *enc)
		names = names[k:]
	}
}

// replace takes user's place in rm from the connection that holds it (see
// docs/protocol.md, Reconnects): that member leaves as if it had left, the
// others get member_left, and the old connection gets replaced and is
// closed. The caller joins next, with the shard still locked, so every
// member sees member_left and member_joined next to each other.
func (c *client) replace(sh *room.Shard[*client], rm *room.Room[*client], user string) {
	s := c.s
	old, ok := rm.Member(user)
	if !ok {
		return
	}
	old.gone = true
	old.replaced.Store(true)
	c.notifyLeft(sh, rm, user)
	s.m.Replaced.Inc()
	old.close(wire.ErrReplaced, "user "+strconv.Quote(user)+" joined room "+strconv.Quote(rm.Name())+" again from another connection")
	if s.abuseLog.allow(c.b.now) {
		s.log.Info("member replaced by a new join", zap.String("user", user), zap.Uint64("old_conn", old.id),
			zap.Uint64("new_conn", c.id), zap.Int64("log_lines_suppressed", s.abuseLog.suppressed()))
	}
}

// notifyLeft removes user from rm and tells the others, naming the owner
// after the leave. The shard must be locked.
func (c *client) notifyLeft(sh *room.Shard[*client], rm *room.Room[*client], user string) {
	if left, _ := sh.Leave(rm, user); left && rm.Len() > 0 {
		b := &c.b
		b.enc = wire.AppendMemberLeft(b.enc[:0], user, rm.Owner())
		for _, m := range rm.Members() {
			b.deliver(m.Value, b.enc)
		}
	}
}

func (s *Server) checkAuth(user string, tok []byte) *wire.Error {
	if len(s.cfg.AuthSecret) == 0 {
		return nil
	}
	switch err := auth.Verify(s.cfg.AuthSecret, user, tok, time.Now()); {
	case err == nil:
		return nil
	case errors.Is(err, auth.ErrMissing):
		return refusal(wire.ErrAuthRequired, "this relay needs an auth token in the join")
	case errors.Is(err, auth.ErrExpired):
		return refusal(wire.ErrAuthExpired, "auth token expired")
	default:
		return refusal(wire.ErrAuthInvalid, "auth token invalid for user "+strconv.Quote(user))
	}
}

// leave takes c out of its room and tells the others, naming the owner
// after the leave.
func (c *client) leave() {
	if c.room == nil {
		return
	}
	sh, rm := c.shard, c.room
	sh.Lock()
	if !c.gone { // a replaced client's user id is someone else's now
		c.notifyLeft(sh, rm, c.user)
	}
	c.gone = false // it is in no room now: a later join makes it a member again
	sh.Unlock()
	c.s.srcs.exit(c.src, rm.Name())
	c.room, c.shard = nil, nil
	c.joined.Store(false)
	c.unjoinedSince.Store(c.s.now())
}

// cast delivers a send to its recipients: the deliver is encoded once,
// carrying the sender id from the join, and copied into each recipient's
// queue.
func (c *client) cast(f *wire.Frame) *wire.Error {
	if c.room == nil {
		c.s.reject(rejectFor(wire.ErrNotJoined))
		return refusal(wire.ErrNotJoined, "send before join")
	}
	if n := wire.DeliverSize(c.user, f.HasTrace, len(f.Payload)) - wire.LenSize; n > c.s.cfg.MaxFrame {
		// Every frame the relay sends fits --max-frame, which is all a
		// client is told about.
		c.s.reject(rejectFor(wire.ErrOversized))
		return refusal(wire.ErrOversized, "its deliver would have length "+strconv.Itoa(n)+", over the limit of "+strconv.Itoa(c.s.cfg.MaxFrame))
	}
	b := &c.b
	c.shard.Lock()
	if c.gone {
		c.shard.Unlock()
		return nil // replaced: no member any more, and being closed
	}
	if over := admitRoom(c.room.Meter(), &c.roomWindow, b.now, f.Size, c.s.roomMsgs, c.s.roomBytes); over != 0 {
		c.shard.Unlock()
		if over == overMessages {
			b.limitedRoomMsgs++
		} else {
			b.limitedRoomBytes++
		}
		return nil
	}
	b.rcpts = c.room.Recipients(b.rcpts[:0], f.Mode, c.user, f.TargetsRaw())
	if len(b.rcpts) > 0 {
		b.enc = wire.AppendDeliver(b.enc[:0], f.Mode, c.user, f.HasTrace, f.Trace, f.Payload)
		for _, r := range b.rcpts {
			b.deliver(r, b.enc)
		}
	}
	c.shard.Unlock()
	b.queued += len(b.rcpts)
	clear(b.rcpts)
	return nil
}

// handle acts on one frame from c; a returned error is what c is answered
// with before it is closed (TCP) or the datagram dropped (UDP).
func (c *client) handle(f *wire.Frame, replyLimit int) *wire.Error {
	c.b.frames++
	// A leave is acted on over the limits too: dropped, it would leave the
	// member in its room, and the client's next join would be refused
	// already_joined.
	if over := c.lim.allow(c.b.now, f.Size, c.s.rateMsgs, c.s.rateBytes); over != "" && f.Type != wire.TypeLeave {
		werr := c.overLimit(over)
		if werr == nil && f.Type == wire.TypeJoin {
			// A join is always answered: dropped silently it would look
			// like a lost frame to its client.
			c.s.m.Join(wire.ErrRateLimited)
			werr = refusal(wire.ErrRateLimited, "join over the relay's rate limit ("+over+")")
		}
		return werr
	}
	c.b.recvMsgs++
	switch f.Type {
	case wire.TypeSend:
		return c.cast(f)
	case wire.TypeHeartbeat:
		if c.room == nil {
			c.s.reject(rejectFor(wire.ErrNotJoined))
			return refusal(wire.ErrNotJoined, "heartbeat before join")
		}
		c.beat(c.b.now)
		c.b.enc = wire.AppendHeartbeatReply(c.b.enc[:0], f.Timestamp, time.Now().UnixNano())
		c.b.deliver(c, c.b.enc)
	case wire.TypeJoin:
		return c.join(f, replyLimit)
	case wire.TypeLeave:
		if c.room == nil {
			c.s.reject(rejectFor(wire.ErrNotJoined))
			return refusal(wire.ErrNotJoined, "leave before join")
		}
		c.leave()
	default:
		c.s.reject(rejectFor(wire.ErrUnknownType))
		return refusal(wire.ErrUnknownType, f.Type.String()+" frames travel server to client only")
	}
	return nil
}
