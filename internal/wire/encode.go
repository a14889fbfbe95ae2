package wire

import (
	"encoding/binary"
	"fmt"
)

// The Append* encoders append one whole frame, length prefix included, to
// dst and return the extended slice. They allocate only when dst must grow.
// They trust their input: ids must pass CheckID, a manycast has 1 to
// MaxTargets targets, and the frame must fit the peer's max frame.

// CheckID reports whether id is a valid user id or room name (1 to
// MaxIDLen bytes).
func CheckID(what, id string) error {
	if len(id) == 0 || len(id) > MaxIDLen {
		return fmt.Errorf("%s %q: must be 1 to %d bytes", what, id, MaxIDLen)
	}
	return nil
}

func begin(dst []byte, t Type) ([]byte, int) {
	return append(dst, 0, 0, 0, 0, byte(t)), len(dst)
}

func finish(dst []byte, start int) []byte {
	binary.BigEndian.PutUint32(dst[start:], uint32(len(dst)-start-LenSize))
	return dst
}

func appendID(dst []byte, id string) []byte {
	return append(append(dst, byte(len(id))), id...)
}

func appendFlags(dst []byte, mode Mode, hasTrace bool) []byte {
	flags := byte(mode) & modeMask
	if hasTrace {
		flags |= flagTrace
	}
	return append(dst, flags)
}

// AppendJoin appends a join. pad adds that many zero bytes after the known
// fields (UDP clients pad their join; see UDPJoinPad).
func AppendJoin(dst []byte, room, user string, auth []byte, pad int) []byte {
	dst, s := begin(dst, TypeJoin)
	dst = append(dst, Version)
	dst = appendID(dst, room)
	dst = appendID(dst, user)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(auth)))
	dst = append(dst, auth...)
	for ; pad > 0; pad-- {
		dst = append(dst, 0)
	}
	return finish(dst, s)
}

// AppendLeave appends a leave.
func AppendLeave(dst []byte) []byte {
	dst, s := begin(dst, TypeLeave)
	return finish(dst, s)
}

// Send is what a client casts: the mode, its targets where the mode needs
// them, an optional trace timestamp and the payload.
type Send struct {
	Mode     Mode
	Targets  []string // unicast: one; manycast: 1 to MaxTargets; else none
	HasTrace bool
	Trace    int64
	Payload  []byte
}

// AppendSend appends a send.
func AppendSend(dst []byte, m Send) []byte {
	dst, s := begin(dst, TypeSend)
	dst = appendFlags(dst, m.Mode, m.HasTrace)
	if m.HasTrace {
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.Trace))
	}
	switch m.Mode {
	case Unicast:
		dst = appendID(dst, m.Targets[0])
	case Manycast:
		dst = append(dst, byte(len(m.Targets)))
		for _, t := range m.Targets {
			dst = appendID(dst, t)
		}
	}
	dst = append(dst, m.Payload...)
	return finish(dst, s)
}

// AppendHeartbeat appends a heartbeat carrying the client's clock.
func AppendHeartbeat(dst []byte, ts int64) []byte {
	dst, s := begin(dst, TypeHeartbeat)
	dst = binary.BigEndian.AppendUint64(dst, uint64(ts))
	return finish(dst, s)
}

// AppendJoined appends a joined: the UDP session token (0 on TCP), the
// room's owner and its members in join order.
func AppendJoined(dst []byte, token uint64, owner string, members []string) []byte {
	dst, s := begin(dst, TypeJoined)
	dst = binary.BigEndian.AppendUint64(dst, token)
	dst = appendID(dst, owner)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(members)))
	for _, m := range members {
		dst = appendID(dst, m)
	}
	return finish(dst, s)
}

// JoinedSize is the size of a joined frame (length prefix included) with
// owner and members.
func JoinedSize(owner string, members []string) int {
	n := HeaderSize + 8 + 1 + len(owner) + 2
	for _, m := range members {
		n += 1 + len(m)
	}
	return n
}

// AppendJoinedFit appends a joined listing the first members that fit in a
// frame of at most limit bytes (length prefix included), and returns how
// many it listed. A member list that does not fit one frame goes out as
// several joined frames, each continuing the list (docs/protocol.md). If
// not even a joined with no members fits, it appends nothing and returns
// -1.
func AppendJoinedFit(dst []byte, token uint64, owner string, members []string, limit int) ([]byte, int) {
	n := JoinedSize(owner, nil)
	if n > limit {
		return dst, -1
	}
	k := 0
	for k < len(members) && n+1+len(members[k]) <= limit {
		n += 1 + len(members[k])
		k++
	}
	return AppendJoined(dst, token, owner, members[:k]), k
}

// DeliverSize is the size of the deliver (length prefix included) of a
// send with payload bytes from sender.
func DeliverSize(sender string, hasTrace bool, payload int) int {
	n := HeaderSize + 1 + 1 + len(sender) + payload
	if hasTrace {
		n += 8
	}
	return n
}

// AppendMemberJoined appends a member-joined notice.
func AppendMemberJoined(dst []byte, user string) []byte {
	dst, s := begin(dst, TypeMemberJoined)
	dst = appendID(dst, user)
	return finish(dst, s)
}

// AppendMemberLeft appends a member-left notice with the room's owner after
// the leave (a new one if the owner left).
func AppendMemberLeft(dst []byte, user, owner string) []byte {
	dst, s := begin(dst, TypeMemberLeft)
	dst = appendID(dst, user)
	dst = appendID(dst, owner)
	return finish(dst, s)
}

// AppendDeliver appends a deliver: the mode it was cast with, the sender as
// the relay knows it, the sender's trace timestamp and the payload.
func AppendDeliver(dst []byte, mode Mode, sender string, hasTrace bool, trace int64, payload []byte) []byte {
	dst, s := begin(dst, TypeDeliver)
	dst = appendFlags(dst, mode, hasTrace)
	dst = appendID(dst, sender)
	if hasTrace {
		dst = binary.BigEndian.AppendUint64(dst, uint64(trace))
	}
	dst = append(dst, payload...)
	return finish(dst, s)
}

// AppendHeartbeatReply appends the reply to a heartbeat: the client's
// timestamp echoed and the relay's clock.
func AppendHeartbeatReply(dst []byte, clientTS, serverTS int64) []byte {
	dst, s := begin(dst, TypeHeartbeatReply)
	dst = binary.BigEndian.AppendUint64(dst, uint64(clientTS))
	dst = binary.BigEndian.AppendUint64(dst, uint64(serverTS))
	return finish(dst, s)
}

// AppendError appends an error frame; text is cut to MaxErrorText bytes.
func AppendError(dst []byte, code ErrorCode, text string) []byte {
	if len(text) > MaxErrorText {
		text = text[:MaxErrorText]
	}
	dst, s := begin(dst, TypeError)
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	dst = append(dst, text...)
	return finish(dst, s)
}

// AppendDatagram appends a client→server UDP datagram's token; the frame
// follows. Server→client datagrams carry the frame alone.
func AppendDatagram(dst []byte, token uint64) []byte {
	return binary.BigEndian.AppendUint64(dst, token)
}

// SplitDatagram splits a client→server UDP datagram into its session token
// and its one frame, which must fill the rest of the datagram exactly.
func SplitDatagram(d []byte, maxFrame int) (token uint64, frame []byte, err error) {
	if len(d) < TokenSize+HeaderSize {
		return 0, nil, malformed(0, fmt.Sprintf("datagram of %d bytes: shorter than token and header", len(d)))
	}
	token = binary.BigEndian.Uint64(d)
	frame = d[TokenSize:]
	n := binary.BigEndian.Uint32(frame)
	if e := checkLen(n, maxFrame); e != nil {
		e.Type = Type(frame[LenSize])
		return 0, nil, e
	}
	if int(n) != len(frame)-LenSize {
		return 0, nil, malformed(Type(frame[LenSize]), fmt.Sprintf("length field %d but datagram holds %d", n, len(frame)-LenSize))
	}
	return token, frame, nil
}

// FrameLen returns the total size (prefix included) of the frame starting
// at b, or 0 if b is shorter than a length prefix.
func FrameLen(b []byte) int {
	if len(b) < LenSize {
		return 0
	}
	return LenSize + int(binary.BigEndian.Uint32(b))
}
