// Package wire is reprise's frame codec: the byte layout of every message
// between a client and the relay, as documented in docs/protocol.md.
//
// It holds the Append* encoders, a zero-copy Decode of one whole frame, and a
// resumable Parser that cuts a TCP byte stream into frames however the reads
// split it. It knows nothing of sockets, rooms or timers: the relay, the
// recorder and the fleet all build on it.
package wire

import "slices"

// Version is the protocol version a client puts in its join.
const Version = 1

// Sizes and limits fixed by the protocol.
const (
	// LenSize is the size of the length prefix in front of every frame.
	LenSize = 4
	// HeaderSize is the length prefix plus the type byte.
	HeaderSize = LenSize + 1
	// TokenSize is the size of the session token in front of every
	// client→server UDP datagram.
	TokenSize = 8
	// DefaultMaxFrame is the default cap on a frame's length field.
	DefaultMaxFrame = 64 << 10
	// MaxIDLen caps user ids and room names, in bytes.
	MaxIDLen = 64
	// MaxAuthLen caps the join's auth token.
	MaxAuthLen = 1024
	// MaxTargets caps the user ids of one manycast.
	MaxTargets = 255
	// MaxErrorText caps the text of an error frame.
	MaxErrorText = 1024
	// UDPJoinPad is the size a UDP client pads its join datagram to, so the
	// relay's reply never exceeds what the unproven source sent. It is also
	// the most a member list datagram holds (the rest follows in further
	// joined frames), so lists never fragment.
	UDPJoinPad = 1200
	// MinMaxFrame is the smallest max frame a relay runs with: the frame of
	// a UDP join padded to UDPJoinPad. Every frame the relay sends fits it
	// (an error frame's text is at most MaxErrorText).
	MinMaxFrame = UDPJoinPad - TokenSize - LenSize
	// MaxRoomMembers caps a room: a count the u16 of joined can carry.
	MaxRoomMembers = 1<<16 - 1
	// MaxDatagram is the largest UDP payload (IPv4): a server→client frame
	// larger than this cannot be sent to a UDP session.
	MaxDatagram = 65507
)

// Type is a frame's type byte. Client→server types have the high bit clear,
// server→client types have it set.
type Type uint8

// Frame types.
const (
	TypeJoin           Type = 0x01
	TypeLeave          Type = 0x02
	TypeSend           Type = 0x03
	TypeHeartbeat      Type = 0x04
	TypeJoined         Type = 0x81
	TypeMemberJoined   Type = 0x82
	TypeMemberLeft     Type = 0x83
	TypeDeliver        Type = 0x84
	TypeHeartbeatReply Type = 0x85
	TypeError          Type = 0x86
)

var typeNames = map[Type]string{
	TypeJoin: "join", TypeLeave: "leave", TypeSend: "send", TypeHeartbeat: "heartbeat",
	TypeJoined: "joined", TypeMemberJoined: "member_joined", TypeMemberLeft: "member_left",
	TypeDeliver: "deliver", TypeHeartbeatReply: "heartbeat_reply", TypeError: "error",
}

// String names the type, or "unknown(0xNN)".
func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return "unknown(0x" + hex2(byte(t)) + ")"
}

// Known reports whether t is a type this version defines. A switch, not a
// lookup in typeNames: it runs once per decoded frame.
func (t Type) Known() bool {
	switch t {
	case TypeJoin, TypeLeave, TypeSend, TypeHeartbeat, TypeJoined, TypeMemberJoined,
		TypeMemberLeft, TypeDeliver, TypeHeartbeatReply, TypeError:
		return true
	}
	return false
}

// FromClient reports whether t travels client→server.
func (t Type) FromClient() bool { return t&0x80 == 0 }

// Mode says which members of a room a send goes to.
type Mode uint8

// Cast modes.
const (
	Broadcast Mode = 1 // every member, the sender too
	Othercast Mode = 2 // every member but the sender
	Unicast   Mode = 3 // one user id
	Manycast  Mode = 4 // a list of user ids
	Ownercast Mode = 5 // the room's owner
)

// modeMask keeps the mode bits of a send's or deliver's flags byte;
// flagTrace marks a trace timestamp after the fixed fields.
const (
	modeMask  = 0x07
	flagTrace = 0x80
)

var modeNames = [...]string{"", "broadcast", "othercast", "unicast", "manycast", "ownercast"}

// String names the mode.
func (m Mode) String() string {
	if m.Valid() {
		return modeNames[m]
	}
	return "mode(" + hex2(byte(m)) + ")"
}

// Valid reports whether m is one of the five cast modes.
func (m Mode) Valid() bool { return m >= Broadcast && m <= Ownercast }

// ParseMode maps a mode's name to the mode.
func ParseMode(s string) (Mode, bool) {
	for i, n := range modeNames {
		if n != "" && n == s {
			return Mode(i), true
		}
	}
	return 0, false
}

// ErrorCode is the code of an error frame. Codes are stable across versions.
type ErrorCode uint16

// Error codes.
const (
	ErrMalformed     ErrorCode = 1  // a frame's body does not follow its layout
	ErrOversized     ErrorCode = 2  // length field over the relay's max frame
	ErrUnknownType   ErrorCode = 3  // type byte not defined
	ErrNotJoined     ErrorCode = 4  // send, leave or heartbeat before join
	ErrAlreadyJoined ErrorCode = 5  // a second join on one connection
	ErrDuplicateUser ErrorCode = 6  // user id already in that room
	ErrRoomFull      ErrorCode = 7  // --max-room-members reached
	ErrServerFull    ErrorCode = 8  // --max-connections reached
	ErrAuthRequired  ErrorCode = 9  // relay has a secret, join had no token
	ErrAuthInvalid   ErrorCode = 10 // token forged or for another user
	ErrAuthExpired   ErrorCode = 11 // token past its expiry
	ErrBadVersion    ErrorCode = 12 // join's version not supported
	ErrBadName       ErrorCode = 13 // empty or too long user id or room name
	ErrJoinTimeout   ErrorCode = 14 // no join within --join-timeout
	ErrIdleTimeout   ErrorCode = 15 // nothing received within --idle-timeout
	ErrSlowConsumer  ErrorCode = 16 // outbound queue or write deadline exceeded
	ErrShuttingDown  ErrorCode = 17 // the relay is stopping
	ErrPadRequired   ErrorCode = 18 // UDP join too short for the reply; text holds the size needed
	ErrBadTarget     ErrorCode = 19 // cast mode needs targets it lacks, or has targets it must not
	ErrRateLimited   ErrorCode = 20 // sender over its rate limit for --rate-limit-grace in a row
	ErrFrameTimeout  ErrorCode = 21 // a frame not complete within --frame-timeout of its first byte, or over the partial-frame budget
	ErrReplaced      ErrorCode = 22 // a newer join with the same user id in the same room took this member's place
)

var codeNames = map[ErrorCode]string{
	ErrMalformed: "malformed", ErrOversized: "oversized", ErrUnknownType: "unknown_type",
	ErrNotJoined: "not_joined", ErrAlreadyJoined: "already_joined", ErrDuplicateUser: "duplicate_user",
	ErrRoomFull: "room_full", ErrServerFull: "server_full", ErrAuthRequired: "auth_required",
	ErrAuthInvalid: "auth_invalid", ErrAuthExpired: "auth_expired", ErrBadVersion: "bad_version",
	ErrBadName: "bad_name", ErrJoinTimeout: "join_timeout", ErrIdleTimeout: "idle_timeout",
	ErrSlowConsumer: "slow_consumer", ErrShuttingDown: "shutting_down", ErrPadRequired: "pad_required",
	ErrBadTarget: "bad_target", ErrRateLimited: "rate_limited", ErrFrameTimeout: "frame_timeout",
	ErrReplaced: "replaced",
}

// ErrorCodes returns every error code this version defines, in code order
// (for initialising metric labels).
func ErrorCodes() []ErrorCode {
	codes := make([]ErrorCode, 0, len(codeNames))
	for c := range codeNames {
		codes = append(codes, c)
	}
	slices.Sort(codes)
	return codes
}

// String is the code's snake_case name, bounded and fit for a metric label.
func (c ErrorCode) String() string {
	if n, ok := codeNames[c]; ok {
		return n
	}
	return "code_" + hex2(byte(c>>8)) + hex2(byte(c))
}

// Frame is one decoded frame. Which fields are set depends on Type; byte
// slices alias the buffer the frame was decoded from and are valid only as
// long as that buffer is.
type Frame struct {
	Type Type
	// Size is the whole frame's length on the wire, length prefix included.
	Size int

	// Join: Version, Room, User, Auth; Padding counts ignored trailing bytes.
	Version uint8
	Room    []byte
	Auth    []byte
	Padding int

	// User is the joining user (join), the member (member_joined,
	// member_left) or the sender (deliver).
	User []byte

	// Send and deliver.
	Mode     Mode
	HasTrace bool
	Trace    int64 // sender's clock, Unix nanoseconds
	Payload  []byte

	// Send: the unicast or manycast targets, kept encoded; iterate with Targets.
	targets    []byte
	NumTargets int

	// Joined: the session token (UDP; 0 on TCP), the owner and the members.
	// MemberLeft: Owner is the owner after the leave.
	SessionToken uint64
	Owner        []byte
	members      []byte
	NumMembers   int

	// Heartbeat: Timestamp is the client's clock. HeartbeatReply: the echoed
	// client timestamp and the relay's clock.
	Timestamp  int64
	ServerTime int64

	// Error.
	Code ErrorCode
	Text []byte
}

// Targets calls fn with each target user id of a send, in order.
func (f *Frame) Targets(fn func(id []byte)) { eachID(f.targets, f.NumTargets, fn) }

// Members calls fn with each member of a joined frame, in join order.
func (f *Frame) Members(fn func(id []byte)) { eachID(f.members, f.NumMembers, fn) }

// TargetsRaw returns the encoded target list of a send (each id prefixed
// with its one-byte length), for callers that rewrite it.
func (f *Frame) TargetsRaw() []byte { return f.targets }

func eachID(b []byte, n int, fn func([]byte)) {
	for i := 0; i < n; i++ {
		l := int(b[0])
		fn(b[1 : 1+l])
		b = b[1+l:]
	}
}

const hexDigits = "0123456789abcdef"

func hex2(b byte) string { return string([]byte{hexDigits[b>>4], hexDigits[b&15]}) }
