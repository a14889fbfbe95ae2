package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
)

// Error is a frame that does not follow the protocol. Code says which
// reaction the relay owes (see docs/protocol.md); Offset is the byte offset
// of the frame's start in the stream (Parser) or 0 (Decode).
type Error struct {
	Code    ErrorCode
	Type    Type
	Offset  int64
	Detail  string
	Snippet []byte // up to 16 bytes from the frame's start
}

func (e *Error) Error() string {
	s := fmt.Sprintf("wire: %s frame at offset %d: %s: %s", e.Type, e.Offset, e.Code, e.Detail)
	if len(e.Snippet) > 0 {
		s += " (bytes " + strconv.Quote(string(e.Snippet)) + ")"
	}
	return s
}

// ErrShort means a buffer holds less than one whole frame.
var ErrShort = errors.New("wire: short frame")

func malformed(t Type, detail string) *Error {
	return &Error{Code: ErrMalformed, Type: t, Detail: detail}
}

// Decode decodes the whole frame at the start of b (length prefix
// included), with maxFrame capping its length field, and returns how many
// bytes it used. It returns ErrShort if b holds less than a whole frame.
func Decode(b []byte, maxFrame int, f *Frame) (int, error) {
	if len(b) < LenSize {
		return 0, ErrShort
	}
	n := binary.BigEndian.Uint32(b)
	if err := checkLen(n, maxFrame); err != nil {
		if len(b) > LenSize {
			err.Type = Type(b[LenSize])
		}
		err.Snippet = snippet(b)
		return 0, err
	}
	total := LenSize + int(n)
	if len(b) < total {
		return 0, ErrShort
	}
	if err := DecodeBody(Type(b[LenSize]), b[HeaderSize:total], f); err != nil {
		var werr *Error
		if errors.As(err, &werr) {
			werr.Snippet = snippet(b[:total])
		}
		return 0, err
	}
	return total, nil
}

func checkLen(n uint32, maxFrame int) *Error {
	if n == 0 {
		return malformed(0, "length 0: a frame needs at least its type byte")
	}
	if uint64(n) > uint64(maxFrame) {
		return &Error{Code: ErrOversized, Detail: fmt.Sprintf("length %d over the limit of %d", n, maxFrame)}
	}
	return nil
}

func snippet(b []byte) []byte {
	if len(b) > 16 {
		b = b[:16]
	}
	return append([]byte(nil), b...)
}

// DecodeBody decodes a frame's body (the bytes after its type byte) into f.
func DecodeBody(t Type, body []byte, f *Frame) error {
	*f = Frame{Type: t, Size: HeaderSize + len(body)}
	r := reader{b: body, t: t}
	switch t {
	case TypeJoin:
		decodeJoin(&r, f)
	case TypeLeave:
	case TypeSend:
		decodeSend(&r, f)
	case TypeHeartbeat:
		f.Timestamp = r.i64("timestamp")
	case TypeJoined:
		f.SessionToken = r.u64("session token")
		f.Owner = r.id("owner", false)
		f.NumMembers = int(r.u16("member count"))
		f.members = r.ids("members", f.NumMembers)
	case TypeMemberJoined:
		f.User = r.id("user id", true)
	case TypeMemberLeft:
		f.User = r.id("user id", true)
		f.Owner = r.id("owner", false)
	case TypeDeliver:
		decodeDeliver(&r, f)
	case TypeHeartbeatReply:
		f.Timestamp = r.i64("timestamp")
		f.ServerTime = r.i64("server time")
	case TypeError:
		f.Code = ErrorCode(r.u16("code"))
		f.Text = r.rest()
		if len(f.Text) > MaxErrorText && r.err == nil {
			r.err = malformed(t, "error text over 1024 bytes")
		}
	default:
		return &Error{Code: ErrUnknownType, Type: t, Detail: "type byte 0x" + hex2(byte(t)) + " is not defined"}
	}
	if r.err == nil && t != TypeJoin && len(r.b) > 0 {
		r.err = malformed(t, fmt.Sprintf("%d trailing bytes", len(r.b)))
	}
	if r.err != nil {
		return r.err
	}
	return nil
}

func decodeJoin(r *reader, f *Frame) {
	f.Version = r.u8("version")
	f.Room = r.id("room", true)
	f.User = r.id("user id", true)
	f.Auth = r.bytes16("auth token", MaxAuthLen)
	f.Padding = len(r.rest())
	if r.err == nil && f.Version != Version {
		r.err = &Error{Code: ErrBadVersion, Type: TypeJoin, Detail: fmt.Sprintf("version %d, this relay speaks %d", f.Version, Version)}
	}
}

func decodeSend(r *reader, f *Frame) {
	flags := r.u8("flags")
	f.Mode = Mode(flags & modeMask)
	f.HasTrace = flags&flagTrace != 0
	if r.err == nil && flags&^(modeMask|flagTrace) != 0 {
		r.fail("reserved flag bits set")
	}
	if r.err == nil && !f.Mode.Valid() {
		r.fail(fmt.Sprintf("cast mode %d is not defined", f.Mode))
	}
	if f.HasTrace {
		f.Trace = r.i64("trace")
	}
	switch f.Mode {
	case Unicast:
		f.NumTargets = 1
		f.targets = r.ids("target", 1)
	case Manycast:
		f.NumTargets = int(r.u8("target count"))
		if r.err == nil && f.NumTargets == 0 {
			r.err = &Error{Code: ErrBadTarget, Type: TypeSend, Detail: "manycast with no targets"}
		}
		f.targets = r.ids("targets", f.NumTargets)
	}
	f.Payload = r.rest()
}

func decodeDeliver(r *reader, f *Frame) {
	if deliverFast(r, f) {
		return
	}
	flags := r.u8("flags")
	f.Mode = Mode(flags & modeMask)
	f.HasTrace = flags&flagTrace != 0
	if r.err == nil && (!f.Mode.Valid() || flags&^(modeMask|flagTrace) != 0) {
		r.fail("bad flags byte")
	}
	f.User = r.id("sender", true)
	if f.HasTrace {
		f.Trace = r.i64("trace")
	}
	f.Payload = r.rest()
}

// deliverFast decodes a well-formed deliver body in one pass, without the
// reader's per-field checks: a fleet client parses one per message
// received, the most frequent frame there is. Anything else (a short or
// malformed body) is left to the checked path, which says what is wrong.
func deliverFast(r *reader, f *Frame) bool {
	var d Deliver
	if r.err != nil || !d.read(r.b) {
		return false
	}
	f.Mode, f.HasTrace, f.User, f.Trace, f.Payload = d.Mode, d.HasTrace, d.User, d.Trace, d.Payload
	r.b = nil
	return true
}

// Deliver is a deliver frame as a fleet client reads it (Parser.
// FeedDeliveries); its slices point into the bytes fed.
type Deliver struct {
	Mode     Mode
	HasTrace bool
	Trace    int64 // sender's clock, Unix nanoseconds
	User     []byte
	Payload  []byte
}

// read decodes a well-formed deliver body b in one pass; false leaves
// anything else (short, malformed) to the checked path.
func (d *Deliver) read(b []byte) bool {
	if len(b) < 2 {
		return false
	}
	flags, n := b[0], int(b[1])
	mode, hasTrace := Mode(flags&modeMask), flags&flagTrace != 0
	end := 2 + n
	if hasTrace {
		end += 8
	}
	if !mode.Valid() || flags&^(modeMask|flagTrace) != 0 || n == 0 || n > MaxIDLen || len(b) < end {
		return false
	}
	d.Mode, d.HasTrace = mode, hasTrace
	d.User = b[2 : 2+n : 2+n]
	d.Trace = 0
	if hasTrace {
		d.Trace = int64(binary.BigEndian.Uint64(b[2+n:]))
	}
	d.Payload = b[end:]
	return true
}

// reader walks a body; the first failure sticks and later reads return zero
// values, so decoders read straight through and check once.
type reader struct {
	b   []byte
	t   Type
	err *Error
}

func (r *reader) fail(detail string) {
	if r.err == nil {
		r.err = malformed(r.t, detail)
	}
}

func (r *reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail(fmt.Sprintf("%s: need %d bytes, have %d", what, n, len(r.b)))
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8(what string) uint8 {
	if v := r.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) u16(what string) uint16 {
	if v := r.take(2, what); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *reader) u64(what string) uint64 {
	if v := r.take(8, what); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *reader) i64(what string) int64 { return int64(r.u64(what)) }

func (r *reader) rest() []byte {
	if r.err != nil {
		return nil
	}
	v := r.b
	r.b = nil
	return v
}

// id reads a one-byte length and that many bytes, 1..MaxIDLen (0.. when
// empty is allowed).
func (r *reader) id(what string, required bool) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) == 0 {
		// Built here, not passed down: a concatenation in the call escapes
		// and cost one allocation per id decoded (every deliver's sender).
		r.fail(what + " length: need 1 bytes, have 0")
		return nil
	}
	n := int(r.b[0])
	r.b = r.b[1:]
	if n > MaxIDLen || (required && n == 0) {
		r.err = &Error{Code: ErrBadName, Type: r.t, Detail: fmt.Sprintf("%s of %d bytes: must be 1 to %d", what, n, MaxIDLen)}
		return nil
	}
	return r.take(n, what)
}

// ids validates count length-prefixed ids and returns them still encoded.
func (r *reader) ids(what string, count int) []byte {
	start := r.b
	used := 0
	for i := 0; i < count && r.err == nil; i++ {
		before := len(r.b)
		r.id(what, true)
		used += before - len(r.b)
	}
	if r.err != nil {
		return nil
	}
	return start[:used:used]
}

func (r *reader) bytes16(what string, limit int) []byte {
	n := int(r.u16(what + " length"))
	if r.err == nil && n > limit {
		r.fail(fmt.Sprintf("%s of %d bytes over the limit of %d", what, n, limit))
	}
	return r.take(n, what)
}
