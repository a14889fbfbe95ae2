package profile

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

// Reprise is the reprise profile's Player: its script of internal/wire
// frames (reprise_script.go), over TCP or UDP. Its kinds are the wire's client
// frame types, so counts read join, send, heartbeat and leave as before.
type Reprise struct {
	s     *repriseScript
	udp   bool
	kinds KindNames
	// MaxFrame caps frames read from the relay (its --max-frame); 0 means
	// wire.DefaultMaxFrame. Set before the first client.
	MaxFrame int
	// senders numbers each room's senders for its receivers' loss
	// tracking (senders.go).
	senders senderTables
}

// newReprise plays s over UDP (a session token before every datagram, the
// join padded) or TCP.
func newReprise(s *repriseScript, udp bool) *Reprise {
	r := &Reprise{s: s, udp: udp}
	for t := wire.Type(0); t <= wire.TypeHeartbeat; t++ {
		r.kinds = append(r.kinds, t.String())
	}
	r.kinds[0] = "other"
	return r
}

func (r *Reprise) maxFrame() int {
	if r.MaxFrame > 0 {
		return r.MaxFrame
	}
	return wire.DefaultMaxFrame
}

// Timeline implements Player.
func (r *Reprise) Timeline() *session.Timeline { return &r.s.Timeline }

// LoginSteps implements Player: the join.
func (r *Reprise) LoginSteps() int { return 1 }

// Kinds implements Player.
func (r *Reprise) Kinds() KindNames { return r.kinds }

// Counted implements Player: sends are the messages.
func (r *Reprise) Counted(k int) bool { return wire.Type(k) == wire.TypeSend }

// Fanout implements Player: the relay's cast modes. A broadcast reaches
// every member, an othercast the others; unicast, manycast and ownercast
// name their receivers, and their deliveries are not counted as casts.
func (r *Reprise) Fanout(i int) Fanout {
	if r.s.Type(i) != wire.TypeSend {
		return FanoutNone
	}
	switch r.s.Mode(i) {
	case wire.Broadcast:
		return FanoutAll
	case wire.Othercast:
		return FanoutOthers
	}
	return FanoutNone
}

// HeartbeatKind implements Player.
func (r *Reprise) HeartbeatKind() int { return int(wire.TypeHeartbeat) }

// LeaveKind implements Player.
func (r *Reprise) LeaveKind() int { return int(wire.TypeLeave) }

// Transport implements Player.
func (r *Reprise) Transport() Transport {
	if r.udp {
		return UDP
	}
	return TCP
}

// WSText implements Player.
func (r *Reprise) WSText() bool { return false }

// Notes implements Player.
func (r *Reprise) Notes() []string { return r.s.Notes }

// Recorded implements Player.
func (r *Reprise) Recorded() (string, string, int) {
	return r.s.RecordedUser, r.s.RecordedRoom, len(r.s.Others)
}

// CheckID implements Player.
func (r *Reprise) CheckID(what, id string) error { return wire.CheckID(what, id) }

// Replies implements Player: a reprise client answers nothing once
// logged in.
func (r *Reprise) Replies() bool { return false }

// ClosedByRelay implements Player.
func (r *Reprise) ClosedByRelay() bool { return true }

// NewClient implements Player.
func (r *Reprise) NewClient(id Identity) (Client, error) {
	sid := repriseIdentity{User: id.User, Room: id.Room, Peers: id.Peers, Auth: id.Auth}
	if r.udp {
		sid.JoinSize = wire.UDPJoinPad - wire.TokenSize
	}
	steps := id.Steps
	if steps <= 0 {
		steps = r.s.Len()
	}
	enc, err := r.s.Encode(sid, steps)
	if err != nil {
		return nil, err
	}
	return &repriseClient{r: r, enc: enc, p: wire.Parser{MaxFrame: r.MaxFrame}, seqs: roomSeqs{t: r.senders.room(id.Room)}}, nil
}

// maxPadRounds bounds the UDP joins re-sent for pad_required.
const maxPadRounds = 4

// repriseClient is one reprise client.
type repriseClient struct {
	// Owned by the reader, and in the order a read touches them: a
	// poller reads hundreds of clients in turn, each cold by its next
	// read, so the fields a read of deliveries needs are in the
	// struct's first lines, the loss tracking's sequences among them
	// (roomSeqs.small), and the parser's frame scratch (touched only by
	// frames other than deliveries) after (issue 34).
	r      *Reprise
	joined bool
	// confirming: joined over UDP, waiting for the relay's next frame,
	// which says the session is confirmed.
	confirming bool
	pads       int
	seqs       roomSeqs
	p          wire.Parser

	// Owned by the sender, after the reader's fields: seq is written
	// at every room-wide send, from another goroutine than the reads.
	enc *repriseEncoded
	// token is the UDP session token from joined: written by the reader
	// before the login ends, read by the sender after.
	token uint64
	// seq numbers the room-wide sends.
	seq uint64
}

// UpgradeRequest implements Client.
func (c *repriseClient) UpgradeRequest() []byte { return nil }

// HotLines implements HotLines: the reader's fields, the first three
// lines of the struct (its room's sequences inline among them).
func (c *repriseClient) HotLines(dst []uintptr) []uintptr {
	a := uintptr(unsafe.Pointer(c))
	return append(dst, a, a+64, a+128)
}

func (c *repriseClient) datagram(dst []byte) []byte {
	if c.r.udp {
		return wire.AppendDatagram(dst, c.token)
	}
	return dst
}

// AppendLogin implements Client: the join.
func (c *repriseClient) AppendLogin(dst []byte, i int, now int64) ([]byte, int, bool) {
	if i > 0 {
		return dst, 0, false
	}
	dst, k := c.AppendStep(dst, 0, now)
	return dst, k, true
}

// LoginStage implements Client: the join is one step.
func (c *repriseClient) LoginStage() string { return "" }

// AppendStep implements Client. Room-wide casts carry the sender's
// sequence in their stamp's sub-µs digits (loss.go).
func (c *repriseClient) AppendStep(dst []byte, i int, now int64) ([]byte, int) {
	s := c.r.s
	dst = c.datagram(dst)
	stamp := now
	if s.RoomWide(i) {
		c.seq++
		stamp = stampSeq(now, c.seq)
	}
	return s.AppendFrame(dst, c.enc, i, stamp), int(s.Type(i))
}

// AppendHeartbeat implements Client.
func (c *repriseClient) AppendHeartbeat(dst []byte, now int64) []byte {
	return wire.AppendHeartbeat(c.datagram(dst), now)
}

// Unanswered implements Client: the relay says why it closes.
func (c *repriseClient) Unanswered() string { return "" }

// AppendLeave implements Client.
func (c *repriseClient) AppendLeave(dst []byte) []byte {
	return wire.AppendLeave(c.datagram(dst))
}

// Feed implements Client: a TCP read goes through the resumable parser;
// a UDP datagram is one frame (anything else is skipped).
func (c *repriseClient) Feed(b []byte, now int64, ev *Events) error {
	if c.r.udp {
		d := b
		if c.joined && !c.confirming {
			// A datagram's deliveries as a stream read's (deliveries):
			// through wire.Decode and handle, a Frame and a Deliver
			// were written for each, and the decode's checks ran twice
			// (issue 34: the decode was a third of a UDP client's
			// receive path). What is not a whole delivery goes on below.
			d = c.deliveries(d, now, ev)
		}
		return c.datagramFrames(d, now, ev)
	}
	handle := func(fr *wire.Frame) error { return c.handle(fr, now, ev) }
	var err error
	if c.joined {
		// Logged in, deliveries skip the Frame (the most frequent frame
		// by far): a read's whole deliver frames in one loop here
		// (issue 34: a callback and a call per delivery were a fifth of
		// the receive path's instructions), what is left through
		// wire.Parser.FeedDeliveries.
		if b, err = c.p.Resume(b, handle); err == nil {
			if b = c.deliveries(b, now, ev); len(b) > 0 {
				err = c.p.FeedDeliveries(b, func(d *wire.Deliver) {
					ev.Frames++
					c.delivered(d, now, ev)
				}, handle)
			}
		}
	} else {
		err = c.p.Feed(b, handle)
	}
	if err == errRefused {
		return nil
	}
	return err
}

// datagramFrames decodes and handles the frames of a datagram (or of
// what is left of one), one or more whole frames (docs/protocol.md). One
// that does not decode is dropped once logged in; before, it means the
// target speaks something else. (Other frames before joined may be
// reordered datagrams.)
func (c *repriseClient) datagramFrames(d []byte, now int64, ev *Events) error {
	var fr wire.Frame
	for len(d) > 0 {
		m, err := wire.Decode(d, c.r.maxFrame(), &fr)
		if err != nil {
			if !c.joined {
				return ErrNotProtocol
			}
			ev.Skipped++
			ev.SkipReason = "udp_datagram_not_a_frame"
			return nil
		}
		if err := c.handle(&fr, now, ev); err != nil {
			if err == errRefused {
				return nil
			}
			return err
		}
		d = d[m:]
	}
	return nil
}

// errRefused stops the parse at a refused login: the fleet closes.
var errRefused = fmt.Errorf("login refused")

func (c *repriseClient) handle(fr *wire.Frame, now int64, ev *Events) error {
	ev.Frames++
	if fr.Type != wire.TypeJoined && fr.Type != wire.TypeError && !c.r.udp && !c.joined {
		return ErrNotProtocol
	}
	if c.confirming && fr.Type != wire.TypeJoined {
		c.confirming, ev.Confirmed = false, true
	}
	switch fr.Type {
	case wire.TypeDeliver:
		c.delivered(&wire.Deliver{Mode: fr.Mode, HasTrace: fr.HasTrace, Trace: fr.Trace, User: fr.User}, now, ev)
	case wire.TypeJoined:
		if !c.joined {
			c.joined = true
			c.token = fr.SessionToken
			ev.LoggedIn = true
			if c.r.udp {
				// Prove the address: the relay sends an unconfirmed UDP
				// session nothing more (docs/protocol.md, UDP).
				ev.Confirm = wire.AppendHeartbeat(wire.AppendDatagram(ev.Confirm, c.token), now)
				c.confirming = true
			}
		}
	case wire.TypeError:
		// The room may grow between two tries; a few rounds settle it.
		if fr.Code == wire.ErrPadRequired && c.r.udp && !c.joined && c.pads < maxPadRounds {
			c.pads++
			if b, ok := c.padded(fr.Text); ok {
				ev.Reply = append(ev.Reply, b...)
				ev.Relogin = true
				return nil
			}
		}
		ev.Error = fr.Code.String()
		if !c.joined {
			ev.Failed = fr.Code.String()
			return errRefused
		}
	}
	return nil
}

// deliveries accounts the whole deliver frames b starts with and returns
// the rest: the receive path's hot loop. Each frame's head comes back in
// registers (no Deliver written, no payload sliced), a stamped one's
// latency is counted as it is decoded, and the read's counts are added
// to ev once at the end.
func (c *repriseClient) deliveries(b []byte, now int64, ev *Events) []byte {
	var msgs, casts, numbered, lost int64
	for {
		n, h := c.p.NextDeliverHead(b)
		if n == 0 {
			break
		}
		msgs++
		// Room-wide casts (Broadcast 1, Othercast 2) are the ones whose
		// fan-out is known and whose senders number them.
		if cast := h.Mode-wire.Broadcast <= wire.Othercast-wire.Broadcast; !h.HasTrace {
			if cast {
				casts++
			}
		} else {
			ev.latency((now - h.Trace) / 1000)
			if cast {
				casts++
				numbered++
				lost += c.seqs.see(b[wire.DeliverUserAt:wire.DeliverUserAt+int(h.UserLen)], h.Trace)
			}
		}
		b = b[n:]
	}
	ev.Frames += msgs
	ev.Messages += msgs
	ev.Casts += casts
	ev.Numbered += numbered
	ev.Lost += lost
	return b
}

// delivered accounts one delivery: a message, its latency when stamped,
// and its sequence when a room-wide cast.
func (c *repriseClient) delivered(d *wire.Deliver, now int64, ev *Events) {
	ev.Messages++
	cast := d.Mode == wire.Broadcast || d.Mode == wire.Othercast
	if cast {
		ev.Casts++
	}
	if d.HasTrace {
		ev.latency((now - d.Trace) / 1000)
		if cast {
			ev.Numbered++
			ev.Lost += c.seqs.see(d.User, d.Trace)
		}
	}
}

// padded is the join datagram again, padded to the size the relay asked
// for in its pad_required (the joined reply would be larger than our join
// datagram).
func (c *repriseClient) padded(text []byte) ([]byte, bool) {
	size, err := strconv.Atoi(string(text))
	if err != nil || size > 64<<10 {
		return nil, false
	}
	join := c.r.s.AppendFrame(nil, c.enc, 0, 0)
	var j wire.Frame
	if _, err := wire.Decode(join, wire.DefaultMaxFrame, &j); err != nil {
		return nil, false
	}
	unpadded := len(wire.AppendJoin(nil, string(j.Room), string(j.User), j.Auth, 0))
	b := wire.AppendDatagram(nil, 0)
	return wire.AppendJoin(b, string(j.Room), string(j.User), j.Auth, max(0, size-wire.TokenSize-unpadded)), true
}
