package wire

import (
	"bytes"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.golden")

// vector is one named frame of the protocol's test vectors.
type vector struct {
	name  string
	frame []byte
}

func vectors() []vector {
	return []vector{
		{"join", AppendJoin(nil, "lobby", "alice", nil, 0)},
		{"join_auth_padded", AppendJoin(nil, "lobby", "alice", []byte{0xde, 0xad, 0xbe, 0xef}, 3)},
		{"leave", AppendLeave(nil)},
		{"send_broadcast", AppendSend(nil, Send{Mode: Broadcast, Payload: []byte("hi")})},
		{"send_othercast_trace", AppendSend(nil, Send{Mode: Othercast, HasTrace: true, Trace: 0x0102030405060708, Payload: []byte("pose")})},
		{"send_unicast", AppendSend(nil, Send{Mode: Unicast, Targets: []string{"bob"}, Payload: []byte{1, 2}})},
		{"send_manycast", AppendSend(nil, Send{Mode: Manycast, Targets: []string{"bob", "carol"}, Payload: []byte("x")})},
		{"send_ownercast", AppendSend(nil, Send{Mode: Ownercast, Payload: []byte("sync")})},
		{"heartbeat", AppendHeartbeat(nil, 1_700_000_000_000_000_000)},
		{"joined", AppendJoined(nil, 0x1122334455667788, "alice", []string{"alice", "bob"})},
		{"member_joined", AppendMemberJoined(nil, "bob")},
		{"member_left", AppendMemberLeft(nil, "alice", "bob")},
		{"deliver", AppendDeliver(nil, Othercast, "alice", true, 0x0102030405060708, []byte("pose"))},
		{"deliver_no_trace", AppendDeliver(nil, Broadcast, "alice", false, 0, []byte("hi"))},
		{"heartbeat_reply", AppendHeartbeatReply(nil, 1_700_000_000_000_000_000, 1_700_000_000_000_500_000)},
		{"error", AppendError(nil, ErrRoomFull, "room lobby is full (32 members)")},
		{"udp_datagram_heartbeat", AppendHeartbeat(AppendDatagram(nil, 0x1122334455667788), 7)},
	}
}

// TestGoldenVectors pins the byte layout of every frame kind: the hex in
// testdata/vectors.golden is the protocol's test vectors (docs/protocol.md).
func TestGoldenVectors(t *testing.T) {
	var b strings.Builder
	for _, v := range vectors() {
		fmt.Fprintf(&b, "%s %s\n", v.name, hex.EncodeToString(v.frame))
	}
	path := "testdata/vectors.golden"
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update): %v", err)
	}
	if b.String() != string(want) {
		t.Errorf("vectors differ from %s:\ngot:\n%s\nwant:\n%s", path, b.String(), want)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, v := range vectors() {
		t.Run(v.name, func(t *testing.T) {
			b := v.frame
			if strings.HasPrefix(v.name, "udp_") {
				_, fr, err := SplitDatagram(b, DefaultMaxFrame)
				if err != nil {
					t.Fatal(err)
				}
				b = fr
			}
			var f Frame
			n, err := Decode(b, DefaultMaxFrame, &f)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(b) {
				t.Fatalf("used %d of %d bytes", n, len(b))
			}
			if got := reencode(t, &f); !bytes.Equal(got, b) {
				t.Fatalf("re-encoded\n%x\nwant\n%x", got, b)
			}
		})
	}
}

// reencode builds the frame again from its decoded fields.
func reencode(t *testing.T, f *Frame) []byte {
	t.Helper()
	var ids []string
	collect := func(id []byte) { ids = append(ids, string(id)) }
	switch f.Type {
	case TypeJoin:
		return AppendJoin(nil, string(f.Room), string(f.User), f.Auth, f.Padding)
	case TypeLeave:
		return AppendLeave(nil)
	case TypeSend:
		f.Targets(collect)
		return AppendSend(nil, Send{Mode: f.Mode, Targets: ids, HasTrace: f.HasTrace, Trace: f.Trace, Payload: f.Payload})
	case TypeHeartbeat:
		return AppendHeartbeat(nil, f.Timestamp)
	case TypeJoined:
		f.Members(collect)
		return AppendJoined(nil, f.SessionToken, string(f.Owner), ids)
	case TypeMemberJoined:
		return AppendMemberJoined(nil, string(f.User))
	case TypeMemberLeft:
		return AppendMemberLeft(nil, string(f.User), string(f.Owner))
	case TypeDeliver:
		return AppendDeliver(nil, f.Mode, string(f.User), f.HasTrace, f.Trace, f.Payload)
	case TypeHeartbeatReply:
		return AppendHeartbeatReply(nil, f.Timestamp, f.ServerTime)
	case TypeError:
		return AppendError(nil, f.Code, string(f.Text))
	}
	t.Fatalf("no encoder for %v", f.Type)
	return nil
}

func frameOf(t Type, body ...byte) []byte {
	b := []byte{0, 0, 0, byte(len(body) + 1), byte(t)}
	return append(b, body...)
}

// TestMalformed lists bad frames and the error code each must get; the
// relay answers each with an error frame of that code and closes the
// connection (docs/protocol.md, "Bad input").
func TestMalformed(t *testing.T) {
	long := bytes.Repeat([]byte{'u'}, 65)
	tests := []struct {
		name  string
		frame []byte
		want  ErrorCode
	}{
		{"zero length", []byte{0, 0, 0, 0, 1}, ErrMalformed},
		{"oversized", []byte{0, 1, 0, 1, 3}, ErrOversized},
		{"length 4 GiB", []byte{0xff, 0xff, 0xff, 0xff, 3}, ErrOversized},
		{"unknown type", frameOf(0x7f), ErrUnknownType},
		{"server type from nowhere", frameOf(0x99), ErrUnknownType},
		{"join empty body", frameOf(TypeJoin), ErrMalformed},
		{"join bad version", frameOf(TypeJoin, 9, 1, 'r', 1, 'u', 0, 0), ErrBadVersion},
		{"join empty room", frameOf(TypeJoin, 1, 0, 1, 'u', 0, 0), ErrBadName},
		{"join empty user", frameOf(TypeJoin, 1, 1, 'r', 0, 0, 0), ErrBadName},
		{"join user too long", append(frameOf(TypeJoin, 1, 1, 'r', 65), long...), ErrBadName},
		{"join user cut", frameOf(TypeJoin, 1, 1, 'r', 5, 'a'), ErrMalformed},
		{"join auth cut", frameOf(TypeJoin, 1, 1, 'r', 1, 'u', 0, 9, 1), ErrMalformed},
		{"leave with body", frameOf(TypeLeave, 1), ErrMalformed},
		{"send no flags", frameOf(TypeSend), ErrMalformed},
		{"send mode 0", frameOf(TypeSend, 0, 'x'), ErrMalformed},
		{"send mode 6", frameOf(TypeSend, 6, 'x'), ErrMalformed},
		{"send reserved flag", frameOf(TypeSend, 0x12, 'x'), ErrMalformed},
		{"send trace cut", frameOf(TypeSend, 0x82, 1, 2), ErrMalformed},
		{"unicast no target", frameOf(TypeSend, 3), ErrMalformed},
		{"unicast empty target", frameOf(TypeSend, 3, 0), ErrBadName},
		{"manycast zero targets", frameOf(TypeSend, 4, 0), ErrBadTarget},
		{"manycast count over list", frameOf(TypeSend, 4, 3, 1, 'a'), ErrMalformed},
		{"heartbeat short", frameOf(TypeHeartbeat, 1, 2, 3), ErrMalformed},
		{"heartbeat long", frameOf(TypeHeartbeat, 1, 2, 3, 4, 5, 6, 7, 8, 9), ErrMalformed},
		{"deliver bad flags", frameOf(TypeDeliver, 0x40, 1, 'a'), ErrMalformed},
		{"joined member count over list", frameOf(TypeJoined, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 2, 1, 'a'), ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(err error) {
				t.Helper()
				var werr *Error
				if !errors.As(err, &werr) {
					t.Fatalf("error %v, want *Error", err)
				}
				if werr.Code != tt.want {
					t.Fatalf("code %v (%v), want %v", werr.Code, werr, tt.want)
				}
			}
			var f Frame
			_, err := Decode(tt.frame, 1024, &f)
			check(err)
			var p Parser
			p.MaxFrame = 1024
			check(p.Feed(tt.frame, func(*Frame) error { return nil }))
		})
	}
}

// TestParserSplits feeds a stream of every vector whole, cut at every
// offset, and one byte at a time; the frames must come out the same.
func TestParserSplits(t *testing.T) {
	var stream []byte
	var want []string
	for _, v := range vectors() {
		if strings.HasPrefix(v.name, "udp_") {
			continue
		}
		stream = append(stream, v.frame...)
		want = append(want, v.name)
	}
	collect := func(chunks [][]byte) []Type {
		var p Parser
		var got []Type
		for _, c := range chunks {
			if err := p.Feed(c, func(f *Frame) error { got = append(got, f.Type); return nil }); err != nil {
				t.Fatal(err)
			}
		}
		if p.Buffered() != 0 || p.Offset() != int64(len(stream)) {
			t.Fatalf("buffered %d, offset %d of %d", p.Buffered(), p.Offset(), len(stream))
		}
		return got
	}
	whole := collect([][]byte{stream})
	if len(whole) != len(want) {
		t.Fatalf("got %d frames, want %d", len(whole), len(want))
	}
	for cut := 1; cut < len(stream); cut++ {
		if got := collect([][]byte{stream[:cut], stream[cut:]}); fmt.Sprint(got) != fmt.Sprint(whole) {
			t.Fatalf("cut at %d: %v", cut, got)
		}
	}
	var bytewise [][]byte
	for i := range stream {
		bytewise = append(bytewise, stream[i:i+1])
	}
	if got := collect(bytewise); fmt.Sprint(got) != fmt.Sprint(whole) {
		t.Fatalf("byte at a time: %v", got)
	}
}

// TestParserRejectsEarly: an oversized or unknown frame is refused from its
// header alone, before its body arrives, and nothing is buffered for it.
func TestParserRejectsEarly(t *testing.T) {
	for _, hdr := range [][]byte{{0, 0x10, 0, 0, byte(TypeSend)}, {0, 0, 0, 9, 0x55}, {0x7f, 0xff, 0xff, 0xff}} {
		var p Parser
		err := p.Feed(hdr, func(*Frame) error { return nil })
		if err == nil {
			t.Fatalf("%x: no error", hdr)
		}
	}
}

func TestParserOffsetInError(t *testing.T) {
	good := AppendHeartbeat(nil, 1)
	stream := append(append([]byte(nil), good...), frameOf(TypeSend, 9)...)
	var p Parser
	err := p.Feed(stream, func(*Frame) error { return nil })
	var werr *Error
	if !errors.As(err, &werr) || werr.Offset != int64(len(good)) {
		t.Fatalf("err %v, want offset %d", err, len(good))
	}
}

func TestSplitDatagram(t *testing.T) {
	hb := AppendHeartbeat(AppendDatagram(nil, 42), 7)
	tok, fr, err := SplitDatagram(hb, DefaultMaxFrame)
	if err != nil || tok != 42 || len(fr) != len(hb)-TokenSize {
		t.Fatalf("tok %d len %d err %v", tok, len(fr), err)
	}
	bad := [][]byte{nil, hb[:10], append(append([]byte(nil), hb...), 0), hb[:len(hb)-1]}
	for _, d := range bad {
		if _, _, err := SplitDatagram(d, DefaultMaxFrame); err == nil {
			t.Fatalf("%x: no error", d)
		}
	}
}

func TestDecodeShort(t *testing.T) {
	f := AppendHeartbeat(nil, 1)
	for i := 0; i < len(f); i++ {
		var fr Frame
		if _, err := Decode(f[:i], DefaultMaxFrame, &fr); !errors.Is(err, ErrShort) {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
}

// TestAppendJoinedFit: a member list cut to a frame size lists the members
// that fit, in order, in a frame no larger than the limit, and JoinedSize
// and DeliverSize match what the encoders append.
func TestAppendJoinedFit(t *testing.T) {
	members := []string{"alice", "bob", "carol", "dave"}
	full := len(AppendJoined(nil, 7, "alice", members))
	if JoinedSize("alice", members) != full {
		t.Fatalf("JoinedSize %d, encoded %d", JoinedSize("alice", members), full)
	}
	empty := JoinedSize("alice", nil)
	tests := []struct {
		limit, listed int
	}{
		{empty - 1, -1},
		{empty, 0},
		{empty + 5, 0},
		{empty + 6, 1},
		{full - 1, 3},
		{full, 4},
		{full + 100, 4},
	}
	for _, tt := range tests {
		b, k := AppendJoinedFit(nil, 7, "alice", members, tt.limit)
		if k != tt.listed || len(b) > tt.limit {
			t.Errorf("limit %d: listed %d in %d bytes, want %d", tt.limit, k, len(b), tt.listed)
			continue
		}
		if k < 0 {
			continue
		}
		var f Frame
		if _, err := Decode(b, DefaultMaxFrame, &f); err != nil || f.NumMembers != k {
			t.Errorf("limit %d: %v, %d members", tt.limit, err, f.NumMembers)
		}
	}
	for _, trace := range []bool{false, true} {
		d := AppendDeliver(nil, Broadcast, "sender", trace, 1, make([]byte, 33))
		if got := DeliverSize("sender", trace, 33); got != len(d) {
			t.Errorf("DeliverSize(trace %v) %d, encoded %d", trace, got, len(d))
		}
	}
}

// TestParserFromClient: on a client's stream, each server→client type is
// refused as unknown_type from its 5-byte header, body or not; on a
// server's stream the same header just waits for its body.
func TestParserFromClient(t *testing.T) {
	for ty := TypeJoined; ty <= TypeError; ty++ {
		hdr := []byte{0, 0, 0x03, 0xe8, byte(ty)} // length 1000, no body yet
		p := Parser{FromClient: true}
		err := p.Feed(hdr, func(*Frame) error { return nil })
		var werr *Error
		if !errors.As(err, &werr) || werr.Code != ErrUnknownType || werr.Type != ty {
			t.Errorf("%s from a client: %v, want unknown_type", ty, err)
		}
		var q Parser
		if err := q.Feed(hdr, func(*Frame) error { return nil }); err != nil || q.Buffered() != HeaderSize {
			t.Errorf("%s from the relay: %v, %d buffered; want the header kept", ty, err, q.Buffered())
		}
	}
	p := Parser{FromClient: true}
	if err := p.Feed(AppendHeartbeat(nil, 1), func(*Frame) error { return nil }); err != nil {
		t.Errorf("heartbeat from a client: %v", err)
	}
}

// TestFrameSize: a decoded frame knows its size on the wire.
func TestFrameSize(t *testing.T) {
	b := AppendSend(nil, Send{Mode: Broadcast, Payload: []byte("hello")})
	var f Frame
	if _, err := Decode(b, DefaultMaxFrame, &f); err != nil || f.Size != len(b) {
		t.Fatalf("size %d, %v; want %d", f.Size, err, len(b))
	}
}

// TestFeedDeliveries: whole, well-formed deliver frames take the shortcut
// (no Frame built), and the shortcut reads what Feed reads: the same
// frames, fields, offsets and errors, whole and at every split.
func TestFeedDeliveries(t *testing.T) {
	long := strings.Repeat("u", MaxIDLen)
	var stream []byte
	stream = AppendJoined(stream, 0, "alice", []string{"alice", "bob"})
	stream = AppendDeliver(stream, Othercast, "bob", true, 1_700_000_000_123_456_789, []byte("pose"))
	stream = AppendDeliver(stream, Broadcast, long, false, 0, nil)
	stream = AppendMemberJoined(stream, "carol")
	stream = AppendDeliver(stream, Unicast, "carol", true, -1, []byte("x"))
	malformed := AppendDeliver(nil, Broadcast, "dave", false, 0, []byte("y"))
	malformed[HeaderSize] |= 0x40 // a flag bit no mode has
	for _, tt := range []struct {
		name     string
		data     []byte
		shortcut int // deliver frames through the shortcut when fed whole
	}{
		{"mixed", stream, 3},
		{"malformed deliver", append(append([]byte(nil), stream...), malformed...), 3},
		{"oversized deliver", AppendDeliver(nil, Broadcast, "bob", false, 0, make([]byte, 5000)), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			want, _ := feedFields([][]byte{tt.data}, false)
			got, n := feedFields([][]byte{tt.data}, true)
			if got != want || n != tt.shortcut {
				t.Fatalf("FeedDeliveries: %q with %d by the shortcut\nFeed: %q, want %d by the shortcut", got, n, want, tt.shortcut)
			}
			if got, n := feedVia([][]byte{tt.data}, viaNextDeliver); got != want || n != tt.shortcut {
				t.Fatalf("NextDeliver: %q with %d by the shortcut\nFeed: %q, want %d by the shortcut", got, n, want, tt.shortcut)
			}
			for c := range len(tt.data) + 1 {
				chunks := [][]byte{tt.data[:c], tt.data[c:]}
				want, _ := feedFields(chunks, false)
				if got, _ := feedFields(chunks, true); got != want {
					t.Fatalf("split at %d: FeedDeliveries %q, Feed %q", c, got, want)
				}
				if got, _ := feedVia(chunks, viaNextDeliver); got != want {
					t.Fatalf("split at %d: NextDeliver %q, Feed %q", c, got, want)
				}
			}
		})
	}
}
