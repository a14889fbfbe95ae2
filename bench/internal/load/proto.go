package load

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Protocol is how a member speaks to one server: the bytes that join a
// room, the bytes of one othercast, and a parser for what comes back. Both
// implementations are plain codecs with no goroutines of their own, so the
// load client drives them identically: one reader goroutine per connection,
// one pacing goroutine per room writing for its members.
type Protocol interface {
	Name() string
	// AppendHello appends what a freshly dialled connection sends to join
	// member's room.
	AppendHello(dst []byte, room, member int) []byte
	// AppendPublish appends one othercast of payload to the room, with trace
	// (the send time) where the protocol carries one.
	AppendPublish(dst []byte, room int, trace int64, payload []byte) []byte
	// Scan parses the whole messages at the start of b and returns the bytes
	// used. It calls deliver with each delivered payload (valid only during
	// the call) and notes in ev what else arrived.
	Scan(b []byte, ev *Events, deliver func(payload []byte)) (int, error)
}

// Events is what Scan saw besides deliveries.
type Events struct {
	Ready bool   // the join is confirmed (joined frame / PONG to our PING)
	Reply []byte // bytes the client owes the server (PONG to a PING)
	Other uint64 // other frames (member notices, INFO, +OK)
	// Token is a UDP session's token (Datagrams protocols), set from the
	// joined frame; the runner puts it in front of every later send.
	Token uint64
}

// Datagrams marks a protocol spoken over UDP: each member dials a
// connected UDP socket, every read is one datagram, and every send after
// the join carries the member's session token (Events.Token) in front.
type Datagrams interface {
	Protocol
	Datagrams()
}

// RepriseUDP speaks docs/protocol.md over UDP: a join padded to 1200
// bytes, then the session confirmed by a heartbeat with the token (the
// relay's address validation; Ready on its reply), then othercasts.
// Server datagrams hold one or more whole frames. Joins are not retried:
// the bench runs on loopback against a fresh server, and a lost join
// fails the run rather than skewing it.
type RepriseUDP struct{}

// Name implements Protocol.
func (RepriseUDP) Name() string { return "reprise-udp" }

// Datagrams implements Datagrams.
func (RepriseUDP) Datagrams() {}

// AppendHello implements Protocol: token 0 and a padded join.
func (RepriseUDP) AppendHello(dst []byte, room, member int) []byte {
	dst = wire.AppendDatagram(dst, 0)
	bare := len(wire.AppendJoin(nil, RoomName(room), UserName(room, member), nil, 0))
	return wire.AppendJoin(dst, RoomName(room), UserName(room, member), nil, max(0, wire.UDPJoinPad-wire.TokenSize-bare))
}

// AppendPublish implements Protocol (the runner adds the token).
func (RepriseUDP) AppendPublish(dst []byte, room int, trace int64, payload []byte) []byte {
	return Reprise{}.AppendPublish(dst, room, trace, payload)
}

// confirmStamp marks the confirming heartbeat.
const confirmStamp = 0x72657072

// Scan implements Protocol: b is one datagram.
func (RepriseUDP) Scan(b []byte, ev *Events, deliver func([]byte)) (int, error) {
	var f wire.Frame
	used := 0
	for used < len(b) {
		n, err := wire.Decode(b[used:], wire.DefaultMaxFrame, &f)
		if errors.Is(err, wire.ErrShort) {
			break
		}
		if err != nil {
			return used, fmt.Errorf("reprise-udp: %w", err)
		}
		used += n
		switch f.Type {
		case wire.TypeDeliver:
			deliver(f.Payload)
		case wire.TypeJoined:
			if ev.Token == 0 && f.SessionToken != 0 {
				ev.Token = f.SessionToken
				ev.Reply = wire.AppendHeartbeat(wire.AppendDatagram(ev.Reply, f.SessionToken), confirmStamp)
			}
		case wire.TypeHeartbeatReply:
			ev.Ready = ev.Ready || f.Timestamp == confirmStamp
		case wire.TypeError:
			return used, fmt.Errorf("reprise-udp: relay sent error %s: %q", f.Code, f.Text)
		default:
			ev.Other++
		}
	}
	return used, nil
}

// Reprise speaks docs/protocol.md through internal/wire: a join, then
// othercast sends with a trace timestamp.
type Reprise struct{}

// Name implements Protocol.
func (Reprise) Name() string { return "reprise" }

// AppendHello implements Protocol.
func (Reprise) AppendHello(dst []byte, room, member int) []byte {
	return wire.AppendJoin(dst, RoomName(room), UserName(room, member), nil, 0)
}

// AppendPublish implements Protocol.
func (Reprise) AppendPublish(dst []byte, _ int, trace int64, payload []byte) []byte {
	return wire.AppendSend(dst, wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: trace, Payload: payload})
}

// Scan implements Protocol.
func (Reprise) Scan(b []byte, ev *Events, deliver func([]byte)) (int, error) {
	var f wire.Frame
	used := 0
	for used < len(b) {
		n, err := wire.Decode(b[used:], wire.DefaultMaxFrame, &f)
		if errors.Is(err, wire.ErrShort) {
			break
		}
		if err != nil {
			return used, fmt.Errorf("reprise: %w", err)
		}
		used += n
		switch f.Type {
		case wire.TypeDeliver:
			deliver(f.Payload)
		case wire.TypeJoined:
			ev.Ready = true
		case wire.TypeError:
			return used, fmt.Errorf("reprise: relay sent error %s: %q", f.Code, f.Text)
		default:
			ev.Other++
		}
	}
	return used, nil
}

// RoomName is the room (reprise) or subject (NATS) of room index i.
func RoomName(i int) string { return "room." + strconv.Itoa(i) }

// UserName is the user id of a member.
func UserName(room, member int) string { return "u" + strconv.Itoa(room) + "." + strconv.Itoa(member) }

// NATS speaks the NATS client protocol directly: CONNECT with echo off (so
// a publisher never gets its own messages: othercast), SUB to the room's
// subject, PING to learn the subscription is in place, then PUB. We write
// the protocol by hand instead of using nats.go because nats.go gives every
// connection a read goroutine, a flusher goroutine and, per async
// subscription, a dispatch goroutine fed through a queue: three goroutines
// and a hand-off per message where the reprise client has one reader. The
// server side is the real nats-server either way.
type NATS struct{}

// Name implements Protocol.
func (NATS) Name() string { return "nats" }

// natsMaxControl is nats-server's default max control line.
const natsMaxControl = 4096

// AppendHello implements Protocol.
func (NATS) AppendHello(dst []byte, room, member int) []byte {
	dst = append(dst, `CONNECT {"verbose":false,"pedantic":false,"echo":false,"protocol":1,"name":"`...)
	dst = append(dst, UserName(room, member)...)
	dst = append(dst, "\"}\r\nSUB "...)
	dst = append(dst, RoomName(room)...)
	return append(dst, " 1\r\nPING\r\n"...)
}

// AppendPublish implements Protocol; the trace travels in the payload.
func (NATS) AppendPublish(dst []byte, room int, _ int64, payload []byte) []byte {
	dst = append(dst, "PUB room."...)
	dst = strconv.AppendInt(dst, int64(room), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(payload)), 10)
	dst = append(dst, "\r\n"...)
	dst = append(dst, payload...)
	return append(dst, "\r\n"...)
}

var (
	natsPing = []byte("PING")
	natsPong = []byte("PONG")
	natsMsg  = []byte("MSG ")
	natsErr  = []byte("-ERR")
)

// Scan implements Protocol.
func (NATS) Scan(b []byte, ev *Events, deliver func([]byte)) (int, error) {
	used := 0
	for used < len(b) {
		rest := b[used:]
		eol := bytes.IndexByte(rest, '\n')
		if eol < 0 {
			if len(rest) > natsMaxControl {
				return used, fmt.Errorf("nats: control line over %d bytes: %q", natsMaxControl, rest[:32])
			}
			break
		}
		line := bytes.TrimSuffix(rest[:eol], []byte{'\r'})
		switch {
		case bytes.HasPrefix(line, natsMsg):
			size, err := natsMsgSize(line)
			if err != nil {
				return used, err
			}
			total := eol + 1 + size + 2
			if len(rest) < total {
				return used, nil
			}
			deliver(rest[eol+1 : eol+1+size])
			used += total
			continue
		case bytes.Equal(line, natsPing):
			ev.Reply = append(ev.Reply, "PONG\r\n"...)
		case bytes.Equal(line, natsPong):
			ev.Ready = true
		case bytes.HasPrefix(line, natsErr):
			return used, fmt.Errorf("nats: server error: %q", line)
		default:
			ev.Other++ // INFO, +OK
		}
		used += eol + 1
	}
	return used, nil
}

// natsMsgSize reads the byte count, the last field of a MSG line.
func natsMsgSize(line []byte) (int, error) {
	digits := line[bytes.LastIndexByte(line, ' ')+1:]
	if len(digits) == 0 || len(digits) > 9 {
		return 0, fmt.Errorf("nats: bad MSG line %q", line)
	}
	n := 0
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("nats: bad MSG line %q", line)
		}
		n = n*10 + int(c-'0')
	}
	return n, nil
}
