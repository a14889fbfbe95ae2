package profile

import (
	"bytes"
	"errors"
	"testing"
)

func TestFramers(t *testing.T) {
	tests := []struct {
		name  string
		f     Framer
		in    string
		want  []string
		rest  string
		isErr bool
	}{
		{"length u16 after", LengthField{Size: 2}, "\x00\x02ab\x00\x01c\x00", []string{"\x00\x02ab", "\x00\x01c"}, "\x00", false},
		{"length u32 little whole", LengthField{Size: 4, LittleEnd: true, CountsWhole: true}, "\x06\x00\x00\x00ab", []string{"\x06\x00\x00\x00ab"}, "", false},
		{"length at offset with adjust", LengthField{Offset: 1, Size: 1, Adjust: 1}, "T\x01ab", []string{"T\x01ab"}, "", false},
		{"length u8 over max", LengthField{Size: 1, Max: 3}, "\x09abc", nil, "\x09abc", true},
		{"length whole shorter than field", LengthField{Size: 2, CountsWhole: true}, "\x00\x01", nil, "\x00\x01", true},
		{"length u64", LengthField{Size: 8}, "\x00\x00\x00\x00\x00\x00\x00\x01z", []string{"\x00\x00\x00\x00\x00\x00\x00\x01z"}, "", false},
		{"varint mqtt", Varint{Offset: 1}, "\x30\x03abc\xc0\x00", []string{"\x30\x03abc", "\xc0\x00"}, "", false},
		{"varint two bytes", Varint{Offset: 1}, "\x30\x80\x01" + string(make([]byte, 128)), []string{"\x30\x80\x01" + string(make([]byte, 128))}, "", false},
		{"varint too long", Varint{Offset: 1}, "\x30\xff\xff\xff\xff\x01", nil, "\x30\xff\xff\xff\xff\x01", true},
		{"varint partial", Varint{Offset: 1}, "\x30\x80", nil, "\x30\x80", false},
		{"lines", Delimiter{Delim: []byte("\n")}, "a\nbc\nd", []string{"a\n", "bc\n"}, "d", false},
		{"bulk in line", Delimiter{Delim: []byte("\r\n"), BulkPrefix: []byte("$")}, "$3\r\na\r\n\r\n+OK\r\n", []string{"$3\r\na\r\n\r\n", "+OK\r\n"}, "", false},
		{"bulk bad trailer", Delimiter{Delim: []byte("\r\n"), BulkPrefix: []byte("$")}, "$1\r\nabc", nil, "$1\r\nabc", true},
		{"resp array", RESP{}, "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n:1\r\n", []string{"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", ":1\r\n"}, "", false},
		{"resp3 push and map", RESP{}, ">2\r\n+a\r\n$1\r\nb\r\n%1\r\n+k\r\n:2\r\n", []string{">2\r\n+a\r\n$1\r\nb\r\n", "%1\r\n+k\r\n:2\r\n"}, "", false},
		{"resp null bulk, inline", RESP{}, "$-1\r\nPING\r\n", []string{"$-1\r\n", "PING\r\n"}, "", false},
		{"resp partial array", RESP{}, "*2\r\n$3\r\nGET\r\n", nil, "*2\r\n$3\r\nGET\r\n", false},
		{"resp bad type", RESP{}, "\x01x\r\n", nil, "\x01x\r\n", true},
		{"whole", Whole{}, "anything", []string{"anything"}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs, rest, err := Split(tt.f, []byte(tt.in))
			if (err != nil) != tt.isErr {
				t.Fatalf("err %v, want error %v", err, tt.isErr)
			}
			if err != nil && !errors.Is(err, ErrFraming) {
				t.Fatalf("err %v is not ErrFraming", err)
			}
			if len(msgs) != len(tt.want) {
				t.Fatalf("%d messages %q, want %q", len(msgs), msgs, tt.want)
			}
			for i := range msgs {
				if string(msgs[i]) != tt.want[i] {
					t.Fatalf("message %d %q, want %q", i, msgs[i], tt.want[i])
				}
			}
			if string(rest) != tt.rest {
				t.Fatalf("rest %q, want %q", rest, tt.rest)
			}
		})
	}
}

func TestVarintRoundTrip(t *testing.T) {
	for _, v := range []int{0, 1, 127, 128, 16383, 16384, 2097151, 2097152, 268435455} {
		b := AppendVarint(nil, v)
		got, n, err := ReadVarint(b)
		if err != nil || n != len(b) || got != v {
			t.Fatalf("%d: got %d size %d/%d err %v", v, got, n, len(b), err)
		}
	}
}

func TestWebSocketFrames(t *testing.T) {
	key := []byte{1, 2, 3, 4}
	var stream []byte
	stream = AppendWSFrame(stream, WSBinary, bytes.Repeat([]byte("x"), 200), key)
	stream = AppendWSFrame(stream, WSPing, []byte("p"), nil)
	// A text message in two fragments: opcode then continuation.
	frag := AppendWSFrame(nil, WSText, []byte("hel"), key)
	frag[0] &^= 0x80 // not final
	stream = append(stream, frag...)
	stream = AppendWSFrame(stream, WSContinuation, []byte("lo"), key)
	stream = AppendWSFrame(stream, WSBinary, bytes.Repeat([]byte("y"), 70000), nil)
	for _, cut := range []int{0, 1, 3, 150, len(stream) - 1} {
		var r WSReader
		var got []string
		fn := func(m WSMessage) error {
			got = append(got, string(rune('0'+m.Opcode))+":"+string(m.Payload[:min(len(m.Payload), 5)]))
			return nil
		}
		if err := r.Feed(stream[:cut], fn); err != nil {
			t.Fatal(err)
		}
		if err := r.Feed(stream[cut:], fn); err != nil {
			t.Fatal(err)
		}
		want := []string{"2:xxxxx", "9:p", "1:hello", "2:yyyyy"}
		if len(got) != len(want) {
			t.Fatalf("cut %d: %q, want %q", cut, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("cut %d: %q, want %q", cut, got, want)
			}
		}
	}
	var r WSReader
	if err := r.Feed(AppendWSFrame(nil, WSContinuation, []byte("x"), nil), func(WSMessage) error { return nil }); err == nil {
		t.Fatal("a continuation without a first fragment was accepted")
	}
}

func TestUpgrade(t *testing.T) {
	req := "GET /mqtt?u=alice HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: abc\r\nSec-WebSocket-Version: 13\r\n\r\n"
	n, err := HTTPHead([]byte(req+"rest"), 0)
	if err != nil || n != len(req) {
		t.Fatalf("head %d %v", n, err)
	}
	u, err := ParseUpgrade([]byte(req))
	if err != nil {
		t.Fatal(err)
	}
	// RFC 6455 section 1.3's example key and answer.
	out, accept := WithKey(u.Request, "dGhlIHNhbXBsZSBub25jZQ==")
	if accept != "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" {
		t.Fatalf("accept %s", accept)
	}
	if !bytes.Contains(out, []byte("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")) {
		t.Fatalf("key not replaced: %q", out)
	}
	if err := CheckUpgradeResponse([]byte("HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Accept: "+accept+"\r\n\r\n"), accept); err != nil {
		t.Fatal(err)
	}
	var refused *UpgradeRefused
	if err := CheckUpgradeResponse([]byte("HTTP/1.1 403 Forbidden\r\n\r\n"), accept); !errors.As(err, &refused) || refused.Status != "403" {
		t.Fatalf("403: %v", err)
	}
	if _, err := ParseUpgrade([]byte("POST / HTTP/1.1\r\n\r\n")); err == nil {
		t.Fatal("a POST was taken for an upgrade")
	}
}
