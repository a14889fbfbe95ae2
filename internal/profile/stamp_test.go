package profile

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestStampEncodings(t *testing.T) {
	v := time.Date(2026, 11, 24, 16, 0, 0, 123456789, time.UTC).UnixNano()
	tests := []struct {
		enc   stampEncoding
		width int
		want  string // the encoding of v, "" for binary
	}{
		{encBinary, 8, ""},
		{encDecimal, 19, strconv.FormatInt(v, 10)},
		{encHex, 16, strconv.FormatInt(v, 16)},
		{encBase64, 12, ""},
	}
	for _, tt := range tests {
		t.Run(tt.enc.String(), func(t *testing.T) {
			if tt.enc.width() != tt.width {
				t.Fatalf("width %d, want %d", tt.enc.width(), tt.width)
			}
			b := make([]byte, tt.width)
			tt.enc.put(b, v)
			if tt.want != "" && string(b) != tt.want {
				t.Fatalf("put %q, want %q", b, tt.want)
			}
			if tt.enc.text() && !utf8.Valid(b) {
				t.Fatalf("text encoding wrote %q", b)
			}
			got, ok := tt.enc.read(b)
			if !ok || got != v {
				t.Fatalf("read %q = %d %v, want %d", b, got, ok, v)
			}
			if _, ok := tt.enc.read(b[1:]); ok && tt.enc != encDecimal {
				t.Fatalf("a stamp one byte short was read")
			}
		})
	}
	// A decimal stamp that lost its leading zeros still reads.
	if got, ok := encDecimal.read([]byte("42")); !ok || got != 42 {
		t.Fatalf("short decimal: %d %v", got, ok)
	}
	for _, bad := range []string{"-1", "+1", "12a", ""} {
		if _, ok := encDecimal.read([]byte(bad)); ok {
			t.Errorf("decimal %q read as a stamp", bad)
		}
	}
}

// compileDoc is the profile the YAML doc compiles to, failing t when it
// does not parse or compile.
func compileDoc(t *testing.T, doc string) *Profile {
	t.Helper()
	s, err := ParseSpec("t.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const lineDoc = `name: lines
port: 9000
framing: {type: delimiter, delimiter: "\r\n"}
kinds:
  client:
    - {name: login, match: {prefix: "LOGIN "}}
    - {name: say, match: {prefix: "SAY "}}
  server:
    - {name: ok, match: {prefix: "OK"}}
    - {name: msg, match: {prefix: "MSG "}}
login: {send: [login], success: ok}
delivery: [msg]
identity: {user: {regexp: "^LOGIN (\\w+)"}}
`

// TestStampOffsetWithoutDelimiter: a negative offset counts from the end
// of the line, not of its CRLF, and the stamp is text.
func TestStampOffsetWithoutDelimiter(t *testing.T) {
	p := compileDoc(t, lineDoc+"latency: {send: say, send_offset: -19, delivery: msg, delivery_offset: -19, encoding: decimal}\n")
	rec := Recording{
		Client: []Segment{{0, []byte("LOGIN bob\r\n")}, {at(10), []byte("SAY hello 0000000000000000000\r\n")}},
		Server: []Segment{{at(1), []byte("OK\r\n")}, {at(11), []byte("MSG hello 0000000000000000000\r\n")}},
	}
	m := p.Messages(rec)
	if r := p.Inspect("f", m, ScriptOptions{}); len(r.Problems) != 0 {
		t.Fatalf("problems %q", r.Problems)
	}
	s, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.NewClient(Identity{Index: 3, Clients: 10, User: "replay-3"})
	now := time.Now().UnixNano()
	got, _ := c.AppendStep(nil, 1, now)
	if want := "SAY hello " + strconv.FormatInt(now, 10) + "\r\n"; string(got) != want {
		t.Fatalf("sent %q, want %q", got, want)
	}
	var ev Events
	c.Feed([]byte("OK\r\nMSG hello "+strconv.FormatInt(now, 10)+"\r\n"), now+2e6, &ev)
	if ev.Messages != 1 || len(ev.Latencies) != 1 || ev.Latencies[0] != 2000 {
		t.Fatalf("events %+v", ev)
	}
}

const natsishDoc = `name: natsish
port: 4222
framing: {type: counted, count: "^(PUB|MSG) "}
kinds:
  client:
    - {name: connect, match: {prefix: "CONNECT "}}
    - {name: pub, match: {prefix: "PUB "}}
  server:
    - {name: info, match: {prefix: "INFO "}}
    - {name: msg, match: {prefix: "MSG "}}
login: {send: [connect], success: info}
delivery: [msg]
`

// TestStampRegexpInCountedPayload: a stamp in a regexp group of a NATS
// PUB payload changes the payload's length: the byte count follows.
func TestStampRegexpInCountedPayload(t *testing.T) {
	p := compileDoc(t, natsishDoc+`latency: {send: pub, delivery: msg, regexp: "ts=(\\w*)", encoding: hex}`+"\n")
	rec := Recording{
		Client: []Segment{{0, []byte("CONNECT {}\r\n")}, {at(10), []byte("PUB room 11\r\nhi\r\nts=1234\r\n")}},
		Server: []Segment{{at(1), []byte("INFO {}\r\n")}, {at(11), []byte("MSG room 1 11\r\nhi\r\nts=1234\r\n")}},
	}
	m := p.Messages(rec)
	if len(m.Client) != 2 || len(m.Server) != 2 {
		t.Fatalf("cut %d/%d: %q", len(m.Client), len(m.Server), m.Dropped)
	}
	if r := p.Inspect("f", m, ScriptOptions{}); len(r.Problems) != 0 {
		t.Fatalf("problems %q", r.Problems)
	}
	s, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.NewClient(Identity{Index: 0, Clients: 1, User: "u"})
	now := int64(0x1234_5678_9abc_def0)
	got, _ := c.AppendStep(nil, 1, now)
	if want := "PUB room 23\r\nhi\r\nts=123456789abcdef0\r\n"; string(got) != want {
		t.Fatalf("sent %q, want %q", got, want)
	}
	var ev Events
	c.Feed([]byte("INFO {}\r\nMSG room 1 23\r\nhi\r\nts="+strconv.FormatInt(time.Now().UnixNano(), 16)+"\r\n"), time.Now().UnixNano(), &ev)
	if ev.Messages != 1 || len(ev.Latencies) != 1 {
		t.Fatalf("events %+v", ev)
	}
}

// wsRecording is a recorded WebSocket flow: the upgrade, then one
// WebSocket message (text or binary) per segment each way.
func wsRecording(text bool, client, server []string) Recording {
	op := byte(WSBinary)
	if text {
		op = WSText
	}
	r := Recording{
		Client: []Segment{{0, []byte("GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n")}},
		Server: []Segment{{at(1), []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")}},
	}
	for i, c := range client {
		r.Client = append(r.Client, Segment{at(10 * (i + 1)), AppendWSFrame(nil, op, []byte(c), []byte{1, 2, 3, 4})})
	}
	for i, s := range server {
		r.Server = append(r.Server, Segment{at(10*(i+1) + 1), AppendWSFrame(nil, op, []byte(s), nil)})
	}
	return r
}

const jsonWSDoc = `name: jsonws
transport: websocket
port: 8080
framing: {type: delimiter, delimiter: "\n"}
kinds:
  client:
    - {name: hello, match: {regexp: '"op":"hello"'}}
    - {name: say, match: {regexp: '"op":"say"'}}
  server:
    - {name: welcome, match: {regexp: '"op":"welcome"'}}
    - {name: msg, match: {regexp: '"op":"msg"'}}
login: {send: [hello], success: welcome}
delivery: [msg]
`

// TestStampJSONFieldInTextFrames: a stamp in a JSON string keeps the
// message valid JSON and valid UTF-8; it is read back from deliveries
// batched in one WebSocket message without a final newline.
func TestStampJSONFieldInTextFrames(t *testing.T) {
	p := compileDoc(t, jsonWSDoc+"latency: {send: say, delivery: msg, json: ts, encoding: base64}\n")
	rec := wsRecording(true,
		[]string{`{"op":"hello","user":"bob"}`, `{"op":"say","text":"héllo","ts":""}`},
		[]string{`{"op":"welcome"}`, `{"op":"msg","text":"héllo","ts":""}`})
	m := p.Messages(rec)
	if r := p.Inspect("f", m, ScriptOptions{}); len(r.Problems) != 0 || !m.WSText {
		t.Fatalf("problems %q (text %v)", r.Problems, m.WSText)
	}
	s, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.NewClient(Identity{Index: 0, Clients: 1, User: "u"})
	now := time.Now().UnixNano()
	got, _ := c.AppendStep(nil, 1, now)
	var v struct{ Op, Text, TS string }
	if err := json.Unmarshal(got, &v); err != nil || !utf8.Valid(got) || v.Text != "héllo" {
		t.Fatalf("sent %q: %v", got, err)
	}
	if at, ok := encBase64.read([]byte(v.TS)); !ok || at != now {
		t.Fatalf("stamp %q reads %d, want %d", v.TS, at, now)
	}
	var ev Events
	batch := `{"op":"welcome"}` + "\n" + strings.Repeat(`{"op":"msg","ts":"`+v.TS+`"}`+"\n", 15) + `{"op":"msg","ts":"` + v.TS + `"}`
	if err := c.Feed([]byte(batch), now+1e6, &ev); err != nil || !ev.LoggedIn || ev.Messages != 16 || len(ev.Latencies) != 16 {
		t.Fatalf("batch: %v %+v", err, ev)
	}
}

// TestStampProblems: profile check (Inspect) says why a stamp does not
// fit the protocol, and replay leaves such sends unstamped.
func TestStampProblems(t *testing.T) {
	tests := []struct {
		name, doc string
		rec       Recording
		want      string
	}{
		{"binary in a text frame", jsonWSDoc + "latency: {send: say, send_offset: -10, delivery: msg, delivery_offset: -10}\n",
			wsRecording(true, []string{`{"op":"hello"}`, `{"op":"say","text":"hello world"}`}, []string{`{"op":"welcome"}`}),
			"break UTF-8"},
		{"overwrites the CRLF", natsishDoc + "latency: {send: pub, send_offset: 0, delivery: msg, delivery_offset: 0, encoding: hex}\n",
			Recording{Client: []Segment{{0, []byte("CONNECT {}\r\n")}, {at(10), []byte("PUB room 5\r\nhello\r\n")}}},
			`would overwrite the delimiter "\r\n" at byte 10`},
		{"binary in a counted payload is fine, in its line not", natsishDoc + "latency: {send: pub, send_offset: 2, delivery: msg, delivery_offset: 2}\n",
			Recording{Client: []Segment{{0, []byte("CONNECT {}\r\n")}, {at(10), []byte("PUB room 12\r\nhello world!\r\n")}}},
			"may hold the delimiter"},
		{"binary may hold the delimiter", lineDoc + "latency: {send: say, send_offset: -8, delivery: msg, delivery_offset: -8}\n",
			Recording{Client: []Segment{{0, []byte("LOGIN bob\r\n")}, {at(10), []byte("SAY 0123456789\r\n")}}},
			"may hold the delimiter"},
		{"outside the message", lineDoc + "latency: {send: say, send_offset: -19, delivery: msg, delivery_offset: -19, encoding: decimal}\n",
			Recording{Client: []Segment{{0, []byte("LOGIN bob\r\n")}, {at(10), []byte("SAY short\r\n")}}},
			"is not in the message (9 bytes before its delimiter)"},
		{"splits a UTF-8 character", jsonWSDoc + "latency: {send: say, send_offset: 10, delivery: msg, delivery_offset: 10, encoding: hex}\n",
			wsRecording(true, []string{`{"op":"hello"}`, `{"op":"say","t":"ééééééééééé"}`}, []string{`{"op":"welcome"}`}),
			"splits a UTF-8 character"},
		{"no JSON field", jsonWSDoc + "latency: {send: say, delivery: msg, json: ts, encoding: decimal}\n",
			wsRecording(true, []string{`{"op":"hello"}`, `{"op":"say","t":"x"}`}, []string{`{"op":"welcome"}`}),
			`JSON field "ts"`},
		{"delivery without the place", lineDoc + "latency: {send: say, send_offset: -19, delivery: msg, delivery_offset: -19, encoding: decimal}\n",
			Recording{Client: []Segment{{0, []byte("LOGIN bob\r\n")}, {at(10), []byte("SAY 0000000000000000000\r\n")}},
				Server: []Segment{{at(1), []byte("OK\r\n")}, {at(11), []byte("MSG x\r\n")}}},
			"no stamp can be read back"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := compileDoc(t, tt.doc)
			m := p.Messages(tt.rec)
			r := p.Inspect("f", m, ScriptOptions{})
			if len(r.Problems) == 0 || !strings.Contains(strings.Join(r.Problems, "; "), tt.want) {
				t.Fatalf("problems %q, want one with %q", r.Problems, tt.want)
			}
			if strings.Contains(tt.name, "delivery") {
				return
			}
			s, err := p.Compile(m, ScriptOptions{})
			if err != nil {
				t.Fatal(err)
			}
			c, _ := s.NewClient(Identity{Index: 0, Clients: 1, User: "u"})
			for i := range s.msgs {
				got, _ := c.AppendStep(nil, i, 0x0d0a0d0a0d0a0d0a)
				if rec, _ := s.Step(i); string(got) != string(rec) && s.msgs[i].kind == p.stamp.send {
					t.Fatalf("step %d was stamped: %q, recorded %q", i, got, rec)
				}
			}
			if !strings.Contains(strings.Join(s.Notes(), "; "), "not stamped") {
				t.Fatalf("notes %q say nothing of the stamp", s.Notes())
			}
			// A run (Measure) refuses what check refuses, with its words.
			_, err = p.Compile(m, ScriptOptions{Measure: true})
			if err == nil || !strings.Contains(err.Error(), "latency: a say send: ") && !strings.Contains(err.Error(), "latency: a pub send: ") ||
				!strings.Contains(err.Error(), tt.want) {
				t.Fatalf("a run's compile: %v, want the refusal with %q", err, tt.want)
			}
		})
	}
}

func TestLatencySpecErrors(t *testing.T) {
	tests := []struct{ latency, want string }{
		{"{send: say, delivery: ok}", `"ok" is not a delivery kind`},
		{"{send: say, delivery: msg, encoding: rot13}", "binary, decimal, hex or base64"},
		{"{send: say, delivery: msg, json: ts}", "a stamp in a regexp group or a JSON string is text"},
		{"{send: say, delivery: msg, json: ts, regexp: 'x(y)', encoding: hex}", "give one place"},
		{"{send: say, delivery: msg, regexp: 'xy', encoding: hex}", "one group"},
	}
	for _, tt := range tests {
		_, err := ParseSpec("t.yaml", []byte(lineDoc+"latency: "+tt.latency+"\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want %q", tt.latency, err, tt.want)
		}
	}
}

// TestStampAddedJSONField: latency.add puts the JSON field into a send
// that has none (first in its first object), stamps it there, and a
// delivery carrying it back reads it; a send that has the field keeps
// its place, and one with no object has no room.
func TestStampAddedJSONField(t *testing.T) {
	spec := `name: add
transport: websocket
framing: {type: message}
kinds:
  client: [{name: chat, match: {regexp: 'chat'}}]
  server: [{name: chat, match: {regexp: 'chat'}}]
sends: [chat]
delivery: [chat]
latency: {send: chat, delivery: chat, json: ts, encoding: decimal, add: true}
`
	s, err := ParseSpec("add.yaml", []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.compile()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{`42["chat",{"text":"hi"}]`, `42["chat",{"ts":"0000000000000000000","text":"hi"}]`},
		{`{"chat":{}}`, `{"ts":"0000000000000000000","chat":{}}`},
		{`{ }chat`, `{"ts":"0000000000000000000" }chat`},
		{`{"chat":1,"ts":"x"}`, `{"chat":1,"ts":"0000000000000000000"}`},
	} {
		got, err := p.makeRoom([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s %v, want %s", tc.in, got, err, tc.want)
			continue
		}
		p.writeStamp(got, 1234567890123456789)
		if v, ok := p.readStamp(got); !ok || v != 1234567890123456789 {
			t.Errorf("%s: stamp read back %d %v", got, v, ok)
		}
	}
	if _, err := p.makeRoom([]byte(`["chat"]`)); err == nil {
		t.Error("a send with no object got room")
	}
	if _, err := ParseSpec("bad.yaml", []byte(strings.Replace(spec, "json: ts, ", "", 1))); err == nil || !strings.Contains(err.Error(), "latency") {
		t.Errorf("add without json: %v", err)
	}
}

// BenchmarkStampRead is what a delivery of wsroom's (the k6 comparison's
// server, bench/wsroom.yaml) costs to find and decode its stamp: the JSON
// string "ts" in a 200-byte message and its 19 digits (issue 34: 54 and
// 36 ns with bytes.Index and strconv.ParseInt).
func BenchmarkStampRead(b *testing.B) {
	msg := []byte(`{"type":"msg","ts":"1732870000123456789","pad":"` + strings.Repeat("x", 150) + `"}`)
	key := []byte(`"ts"`)
	r := &stampRule{enc: encDecimal, key: newFinder(key)}
	b.Run("place", func(b *testing.B) {
		for b.Loop() {
			r.place(msg, 0)
		}
	})
	b.Run("decimal", func(b *testing.B) {
		d := msg[20:39]
		for b.Loop() {
			r.enc.read(d)
		}
	})
}
