package profile

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// msgpackStr is a msgpack str in the shortest header.
func msgpackStr(s string) []byte { return append(appendMsgpackStrHeader(nil, len(s)), s...) }

// pbField is protobuf field num, wire type 2, holding b.
func pbField(num int, b []byte) []byte {
	out := binary.AppendUvarint(nil, uint64(num)<<3|2)
	return append(binary.AppendUvarint(out, uint64(len(b))), b...)
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestPayloadEncodings: an id rewritten to another length inside a
// msgpack string, a protobuf length-delimited field (nested too) or a
// JSON string leaves a message its decoder reads: the string's header
// (across fixstr, str8 and str16), every enclosing protobuf length and
// a JSON escape are written anew; the rest is copied as it was.
func TestPayloadEncodings(t *testing.T) {
	long := strings.Repeat("x", 40)
	subs := []sub{{[]byte("rec-user-01"), []byte("replay-7")}, {[]byte("lobby"), []byte(long)}}
	// socket.io-msgpack-parser's packet: {type: 2, data: ["chat", {text, user}], nsp: "/"}
	sioChat := func(user, room string) []byte {
		return cat([]byte{0x83}, msgpackStr("type"), []byte{0x02}, msgpackStr("data"),
			[]byte{0x92}, msgpackStr("chat"), []byte{0x82}, msgpackStr("user"), msgpackStr(user), msgpackStr("room"), msgpackStr(room),
			msgpackStr("nsp"), msgpackStr("/"), msgpackStr("n"), []byte{0xcd, 0x01, 0x00}, []byte{0xc4, 0x02, 'i', 'd'}, []byte{0xcb, 1, 2, 3, 4, 5, 6, 7, 8})
	}
	// A protobuf Envelope{1: Join{1: user, 2: room}, 2: 7 (varint), 3: "rec-user-01 says hi"}.
	pbJoin := func(user, room, text string) []byte {
		return cat(pbField(1, cat(pbField(1, []byte(user)), pbField(2, []byte(room)))), []byte{0x10, 0x07}, pbField(3, []byte(text)))
	}
	for _, tc := range []struct {
		name     string
		enc      payloadEncoding
		in, want []byte
	}{
		{"msgpack", encodingMsgpack, sioChat("rec-user-01", "lobby"), sioChat("replay-7", long)},
		{"msgpack str8 to str16", encodingMsgpack, msgpackStr(strings.Repeat("lobby", 60)), msgpackStr(strings.Repeat(long, 60))},
		{"msgpack untouched", encodingMsgpack, sioChat("someone", "hall"), sioChat("someone", "hall")},
		{"msgpack two objects", encodingMsgpack, cat(msgpackStr("lobby"), []byte{0x93, 0x01, 0xc0, 0xa0}), cat(msgpackStr(long), []byte{0x93, 0x01, 0xc0, 0xa0})},
		{"protobuf nested", encodingProtobuf, pbJoin("rec-user-01", "lobby", "rec-user-01 says hi"), pbJoin("replay-7", long, "replay-7 says hi")},
		{"protobuf untouched", encodingProtobuf, pbJoin("a", "b", "c"), pbJoin("a", "b", "c")},
		{"json", encodingJSON, []byte(`42["join","lobby",{"user":"rec-user-01"}]`), []byte(`42["join","` + long + `",{"user":"replay-7"}]`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.enc.replace(tc.in, subs)
			if !ok || !bytes.Equal(got, tc.want) {
				t.Fatalf("%v %x\nwant %x", ok, got, tc.want)
			}
		})
	}
	// A JSON value is escaped for its string.
	if got, _ := encodingJSON.replace([]byte(`{"u":"rec"}`), []sub{{[]byte("rec"), []byte(`a"b\`)}}); string(got) != `{"u":"a\"b\\"}` {
		t.Errorf("json escape: %s", got)
	}
	// A payload that is not its encoding says so (the caller rewrites
	// it as bytes).
	for _, bad := range []struct {
		enc payloadEncoding
		in  []byte
	}{
		{encodingMsgpack, []byte{0xc1}},
		{encodingMsgpack, []byte{0xa5, 'l', 'o'}},
		{encodingMsgpack, []byte{0xdd, 0xff, 0xff, 0xff, 0xff}},
		{encodingProtobuf, []byte{0x0a, 0x09, 'l'}},
		{encodingProtobuf, []byte{0x0b}},
		{encodingProtobuf, bytes.Repeat([]byte{0x0a, 0x7f}, 1)},
	} {
		if _, ok := bad.enc.replace(bad.in, subs); ok {
			t.Errorf("%v %x parsed", bad.enc, bad.in)
		}
	}
}

// TestEncodingIdentity: a profile with identity.encoding msgpack gives
// each client its own id of another length inside the recorded msgpack
// messages, their string headers fixed up.
func TestEncodingIdentity(t *testing.T) {
	spec := `name: mp
transport: websocket
framing: {type: message}
kinds:
  client:
    - {name: join, match: {regexp: 'join'}}
    - {name: chat, match: {regexp: 'chat'}}
login: {send: [join]}
identity:
  user: {kind: join, regexp: 'u(rec-user-\d+)'}
  encoding: msgpack
`
	s, err := ParseSpec("mp.yaml", []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.compile()
	if err != nil {
		t.Fatal(err)
	}
	join := cat([]byte{0x92}, msgpackStr("join"), msgpackStr("urec-user-01"))
	chat := cat([]byte{0x92}, msgpackStr("chat"), msgpackStr("from urec-user-01: hi"))
	b := []byte("GET /x HTTP/1.1\r\nSec-WebSocket-Key: k\r\n\r\n")
	for _, m := range [][]byte{join, chat} {
		b = AppendWSFrame(b, WSBinary, m, []byte{1, 2, 3, 4})
	}
	sc, err := p.Compile(p.Messages(Recording{Client: []Segment{{Bytes: b}}}), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sc.NewClient(Identity{Index: 12345, Clients: 20000, User: "player-0012345"})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := c.AppendStep(nil, 1, 0)
	if want := cat([]byte{0x92}, msgpackStr("chat"), msgpackStr("from uplayer-0012345: hi")); !bytes.Equal(got, want) {
		t.Fatalf("chat %q, want %q", got, want)
	}
	if _, err := ParseSpec("bad.yaml", []byte(strings.Replace(spec, "encoding: msgpack", "encoding: cbor", 1))); err == nil || !strings.Contains(err.Error(), "identity.encoding") {
		t.Fatalf("encoding cbor: %v", err)
	}
}

// FuzzPayloadEncoding: whatever the payload, the msgpack and protobuf
// walkers neither panic nor run away; a payload they read comes out
// unchanged when the value is not in it, and what they write reads
// again as the same encoding.
func FuzzPayloadEncoding(f *testing.F) {
	f.Add(cat([]byte{0x92}, msgpackStr("join"), msgpackStr("rec-user-01")), uint8(encodingMsgpack), "rec-user-01", "replay-7")
	f.Add(cat(pbField(1, cat(pbField(1, []byte("rec-user-01")), pbField(2, []byte("lobby")))), []byte{0x10, 0x07}), uint8(encodingProtobuf), "lobby", strings.Repeat("x", 200))
	f.Fuzz(func(t *testing.T, data []byte, enc uint8, old, new string) {
		e := payloadEncoding(enc%2) + encodingMsgpack
		subs := []sub{{[]byte(old), []byte(new)}}
		out, ok := e.replace(data, subs)
		if !ok {
			return
		}
		if old == "" || !bytes.Contains(data, []byte(old)) {
			if !bytes.Equal(out, data) {
				t.Fatalf("%v: nothing to replace, yet %x became %x", e, data, out)
			}
			return
		}
		if _, ok := e.replace(out, []sub{{[]byte{0}, []byte{0}}}); !ok {
			t.Fatalf("%v: %x written from %x does not read back", e, out, data)
		}
	})
}
