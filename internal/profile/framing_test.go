package profile

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
)

var natsCounted = Counted{Delim: []byte("\r\n"), Count: regexp.MustCompile(`^(PUB|HPUB|MSG|HMSG) `)}

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
		{"counted nats", natsCounted, "PUB a 5\r\nhe\r\no\r\nSUB a 1\r\nPING\r\n", []string{"PUB a 5\r\nhe\r\no\r\n", "SUB a 1\r\n", "PING\r\n"}, "", false},
		{"counted hmsg, reply subject", natsCounted, "HMSG a 1 _INBOX.x 2 7\r\nxxhello\r\nMSG b 2 0\r\n\r\n", []string{"HMSG a 1 _INBOX.x 2 7\r\nxxhello\r\n", "MSG b 2 0\r\n\r\n"}, "", false},
		{"counted partial payload", natsCounted, "MSG a 1 5\r\nhel", nil, "MSG a 1 5\r\nhel", false},
		{"counted bad trailer", natsCounted, "MSG a 1 2\r\nhello\r\n", nil, "MSG a 1 2\r\nhello\r\n", true},
		{"counted not a number", natsCounted, "MSG a 1 x\r\n", nil, "MSG a 1 x\r\n", true},
		{"counted named group", Counted{Delim: []byte("\n"), Count: regexp.MustCompile(`^DATA (?P<count>\d+) `)}, "DATA 3 bytes\nabc\nDATA\n", []string{"DATA 3 bytes\nabc\n", "DATA\n"}, "", false},
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

func TestCountedFix(t *testing.T) {
	got := natsCounted.fix([]byte("PUB room 5\r\nhello, longer\r\n"))
	if want := "PUB room 13\r\nhello, longer\r\n"; string(got) != want {
		t.Fatalf("fixed %q, want %q", got, want)
	}
	if got := natsCounted.fix([]byte("SUB room 5\r\n")); string(got) != "SUB room 5\r\n" {
		t.Fatalf("a line without payload changed: %q", got)
	}
}

// TestWebSocketMessageEndsLines: servers batch newline-joined messages in
// one WebSocket message without a final newline; each WebSocket message
// ends its lines, in the recording and in a client's reads. With span
// (messages crossing WebSocket messages) the same recording loses all but
// the last line, and Inspect says the profile does not fit.
func TestWebSocketMessageEndsLines(t *testing.T) {
	var batches []string
	for i := 0; i < 10; i++ {
		batches = append(batches, strings.TrimSuffix(strings.Repeat(`{"op":"msg"}`+"\n", i%4+1), "\n"))
	}
	rec := wsRecording(true, []string{`{"op":"hello"}`, `{"op":"say"}`}, append([]string{`{"op":"welcome"}`}, batches...))
	p := compileDoc(t, jsonWSDoc)
	m := p.Messages(rec)
	if n := p.Inspect("f", m, ScriptOptions{}).ServerKinds["msg"]; n != 23 || len(m.Dropped) != 0 {
		t.Fatalf("%d deliveries recorded, want 23; dropped %q", n, m.Dropped)
	}
	s, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.NewClient(Identity{Index: 0, Clients: 1, User: "u"})
	var ev Events
	c.Feed([]byte(`{"op":"welcome"}`), 0, &ev)
	for _, b := range batches {
		if err := c.Feed([]byte(b), 0, &ev); err != nil {
			t.Fatal(err)
		}
	}
	if ev.Messages != 23 || !ev.LoggedIn {
		t.Fatalf("client counted %d deliveries, want 23 (%+v)", ev.Messages, ev)
	}

	spans := compileDoc(t, strings.Replace(jsonWSDoc, `delimiter: "\n"}`, `delimiter: "\n", span: true}`, 1))
	r := spans.Inspect("f", spans.Messages(rec), ScriptOptions{})
	if len(r.Problems) == 0 || !strings.Contains(r.Problems[0], "ends inside a message") {
		t.Fatalf("a profile that drops deliveries passed: problems %q", r.Problems)
	}
}

// TestFrameWS: a message framed in place is the frame AppendWSFrame makes
// of it, byte for byte (header, key, masked payload), at every length
// class of the header and around the eight-byte steps of the masking,
// after any bytes already in the buffer; a reader gets the message back.
func TestFrameWS(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix int
		size   int
		key    []byte
	}{
		{"empty, unmasked", 0, 0, nil},
		{"empty, masked", 3, 0, []byte{1, 2, 3, 4}},
		{"seven", 0, 7, []byte{0xff, 0, 0x80, 1}},
		{"eight", 5, 8, []byte{9, 8, 7, 6}},
		{"nine", 0, 9, []byte{9, 8, 7, 6}},
		{"125: one-byte length", 2, 125, []byte{1, 2, 3, 4}},
		{"126: two-byte length", 0, 126, []byte{1, 2, 3, 4}},
		{"65535", 1, 65535, []byte{0xde, 0xad, 0xbe, 0xef}},
		{"65536: eight-byte length", 0, 65536, []byte{0xde, 0xad, 0xbe, 0xef}},
		{"300, unmasked", 4, 300, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := make([]byte, tc.size)
			for i := range msg {
				msg[i] = byte(i*7 + 3)
			}
			prefix := bytes.Repeat([]byte{'p'}, tc.prefix)
			want := AppendWSFrame(append([]byte(nil), prefix...), WSText, msg, tc.key)
			got := FrameWS(append(append([]byte(nil), prefix...), msg...), tc.prefix, WSText, tc.key)
			if !bytes.Equal(got, want) {
				t.Fatalf("in place: % x...\nappended: % x...", got[:min(len(got), 24)], want[:min(len(want), 24)])
			}
			var r WSReader
			var back []byte
			if err := r.Feed(got[tc.prefix:], func(m WSMessage) error { back = append(back[:0], m.Payload...); return nil }); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, msg) {
				t.Fatalf("read back %d bytes, want %d", len(back), len(msg))
			}
		})
	}
}

// BenchmarkFrameWS frames and masks a 200-byte message as a client sends
// it: in place (FrameWS), or copied out first and appended (the sender's
// way before, issue 34).
func BenchmarkFrameWS(b *testing.B) {
	msg := bytes.Repeat([]byte{'x'}, 200)
	key := []byte{1, 2, 3, 4}
	buf := make([]byte, 0, 512)
	b.Run("in place", func(b *testing.B) {
		for b.Loop() {
			buf = FrameWS(append(buf[:0], msg...), 0, WSText, key)
		}
	})
	b.Run("copy and append", func(b *testing.B) {
		for b.Loop() {
			b := append(buf[:0], msg...)
			m := append([]byte(nil), b...)
			buf = AppendWSFrame(b[:0], WSText, m, key)
		}
	})
}
