package profile

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// framers are every framing, by the number a fuzz input picks it with.
var framers = []Framer{
	LengthField{Size: 2, Max: 4096},
	LengthField{Offset: 1, Size: 4, LittleEnd: true, CountsWhole: true, Adjust: -1, Max: 4096},
	LengthField{Size: 8, Max: 4096},
	Varint{Offset: 1, Max: 4096},
	Delimiter{Delim: []byte("\n"), Max: 4096},
	Delimiter{Delim: []byte("\r\n"), BulkPrefix: []byte("$"), Max: 4096},
	RESP{Max: 4096},
	Whole{},
	Counted{Delim: []byte("\r\n"), Count: regexp.MustCompile(`^(PUB|H?MSG) `), Max: 4096},
	Counted{Delim: []byte("\n"), Count: regexp.MustCompile(`^\$(?P<count>\d+)`), Max: 4096},
}

// feedFramer cuts chunks as a stream reader does and summarises the
// messages and the error.
func feedFramer(f Framer, chunks [][]byte) string {
	var buf []byte
	out := ""
	for _, c := range chunks {
		buf = append(buf, c...)
		msgs, rest, err := Split(f, buf)
		for _, m := range msgs {
			out += fmt.Sprintf("%q ", m)
		}
		if err != nil {
			return out + "error"
		}
		buf = append([]byte(nil), rest...)
	}
	return out + fmt.Sprintf("rest %d", len(buf))
}

// FuzzFramers feeds each input to a framing whole and split in two: both
// must give the same messages and error, and nothing may panic. Whole
// frames each read as it comes, so it is fed whole only. Seeds are in
// testdata/fuzz/FuzzFramers.
func FuzzFramers(f *testing.F) {
	f.Add(uint8(0), []byte("\x00\x02ab\x00\x01c"), uint16(3))
	f.Add(uint8(3), []byte("\x30\x03abc\xc0\x00"), uint16(2))
	f.Add(uint8(5), []byte("$3\r\nabc\r\n+OK\r\n"), uint16(5))
	f.Add(uint8(6), []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n>1\r\n%1\r\n+a\r\n:1\r\n"), uint16(9))
	f.Add(uint8(8), []byte("PUB a 5\r\nhe\r\no\r\nPING\r\nHMSG a 1 2 7\r\nxxhello\r\n"), uint16(12))
	f.Fuzz(func(t *testing.T, which uint8, data []byte, cut uint16) {
		fr := framers[int(which)%len(framers)]
		whole := feedFramer(fr, [][]byte{data})
		if _, ok := fr.(Whole); ok {
			return
		}
		c := int(cut) % (len(data) + 1)
		if got := feedFramer(fr, [][]byte{data[:c], data[c:]}); got != whole {
			t.Fatalf("framer %T split at %d: %s, whole: %s", fr, c, got, whole)
		}
	})
}

// FuzzWebSocket feeds a stream of WebSocket frames whole and split in
// two: the same messages must come out.
func FuzzWebSocket(f *testing.F) {
	s := AppendWSFrame(nil, WSBinary, []byte("hello"), []byte{1, 2, 3, 4})
	s = AppendWSFrame(s, WSPing, nil, nil)
	f.Add(s, uint16(3))
	f.Add(AppendWSFrame(nil, WSText, make([]byte, 300), nil), uint16(2))
	f.Fuzz(func(t *testing.T, data []byte, cut uint16) {
		run := func(chunks ...[]byte) string {
			r := WSReader{Max: 4096}
			out := ""
			for _, c := range chunks {
				if err := r.Feed(c, func(m WSMessage) error {
					out += fmt.Sprintf("%d:%q ", m.Opcode, m.Payload)
					return nil
				}); err != nil {
					return out + "error"
				}
			}
			return out
		}
		c := int(cut) % (len(data) + 1)
		if whole, split := run(data), run(data[:c], data[c:]); whole != split {
			t.Fatalf("split at %d: %s, whole %s", c, split, whole)
		}
	})
}

// FuzzParseSpec decodes arbitrary profile files: an error or a profile
// that compiles, never a panic. Seeds: the example profile and the files
// in testdata/fuzz/FuzzParseSpec.
func FuzzParseSpec(f *testing.F) {
	if b, err := os.ReadFile(filepath.Join("..", "..", "examples", "profiles", "acme-binary.yaml")); err == nil {
		f.Add(b)
	}
	f.Add([]byte("name: x\nframing: {type: resp}\n"))
	if b, err := os.ReadFile(filepath.Join("testdata", "chat-steps.yaml")); err == nil {
		f.Add(b) // reactions, a login in steps
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSpec("fuzz.yaml", data)
		if err != nil {
			return
		}
		if _, err := Compile(s); err != nil {
			t.Fatalf("ParseSpec accepted a spec Compile refuses: %v", err)
		}
	})
}

// FuzzClientFeed feeds server bytes to a client of each shipped profile,
// whole and split: the events must agree and nothing may panic.
func FuzzClientFeed(f *testing.F) {
	f.Add(uint8(0), []byte{0x20, 2, 0, 0, 0x32, 5, 0, 1, 't', 0, 9}, uint16(4))
	f.Add(uint8(1), []byte("+OK\r\n>3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$2\r\nhi\r\n"), uint16(7))
	f.Add(uint8(2), acme(0x81, []byte("TOKEN-07")), uint16(3))
	f.Add(uint8(3), []byte("INFO {}\r\nPING\r\nPONG\r\n+OK joined\r\nMSG a 1 ask.b\r\n"), uint16(9))
	clients := fuzzClients(f)
	f.Fuzz(func(t *testing.T, which uint8, data []byte, cut uint16) {
		mk := clients[int(which)%len(clients)]
		run := func(chunks ...[]byte) string {
			c := mk()
			var ev Events
			for _, ch := range chunks {
				if err := c.Feed(ch, 0, &ev); err != nil {
					return fmt.Sprintf("%+v error", ev)
				}
			}
			return fmt.Sprintf("%+v", ev)
		}
		c := int(cut) % (len(data) + 1)
		if whole, split := run(data), run(data[:c], data[c:]); whole != split {
			t.Fatalf("split at %d: %s, whole %s", c, split, whole)
		}
	})
}

func fuzzClients(f *testing.F) []func() Client {
	var out []func() Client
	for _, name := range []string{"mqtt", "redis", "../../examples/profiles/acme-binary.yaml", "testdata/chat-steps.yaml"} {
		p, err := Lookup(name)
		if err != nil {
			f.Fatal(err)
		}
		var rec Recording
		switch name {
		case "mqtt":
			rec.Client = []Segment{{0, mqttConnect(4, "a")}, {at(1), mqttPkt(0x30, mqttStr("t"), []byte("12345678"))}}
		case "redis":
			rec.Client = []Segment{{0, AppendRESPCommand(nil, []byte("SUBSCRIBE"), []byte("c"))}}
		case "testdata/chat-steps.yaml":
			rec.Client = []Segment{{0, []byte("CONNECT {\"name\":\"alice\"}\r\nSUB lobby 1\r\nPUB lobby 1\r\nx\r\n")}}
		default:
			rec.Client = []Segment{{0, acme(1, []byte("alice001"))}, {at(1), acme(2, []byte("RECORDED"))}}
			rec.Server = []Segment{{0, acme(0x81, []byte("RECORDED"))}}
		}
		s, err := p.Compile(p.Messages(rec), ScriptOptions{})
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, func() Client {
			c, err := s.NewClient(Identity{Index: 1, Clients: 2, User: "user0001"})
			if err != nil {
				f.Fatal(err)
			}
			return c
		})
	}
	return out
}

// FuzzTemplate compiles arbitrary templates and renders them with an
// arbitrary message: an error or bytes, never a panic; a template with
// no ${ renders as written.
func FuzzTemplate(f *testing.F) {
	f.Add("PONG\r\n", false, []byte("PING 12"))
	f.Add("3${1}[${user},${room},${index}]", false, []byte("2 99"))
	f.Add("40 02 ${1}", true, []byte("x 7"))
	f.Add("$${ $$ $ ${", false, []byte(""))
	_, s := chatSteps(f)
	c := newChatClient(f, s, "bob")
	re := regexp.MustCompile(`(\d+)`)
	resolve := func(name string) (valueSrc, int, error) {
		if name == "1" {
			return srcGroup, 1, nil
		}
		return s.p.clientResolver(name)
	}
	f.Fuzz(func(t *testing.T, text string, isHex bool, msg []byte) {
		ts := TemplateSpec{Text: text}
		if isHex {
			ts = TemplateSpec{Hex: text}
		}
		tp, err := parseTemplate(ts, resolve)
		if err != nil {
			return
		}
		out := tp.render(nil, &tvalues{msg: msg, groups: re.FindSubmatchIndex(msg), c: c})
		if !isHex && !strings.Contains(text, "${") && string(out) != text {
			t.Fatalf("%q rendered as %q", text, out)
		}
	})
}

// FuzzUnit cuts one WebSocket message or datagram with each framing: the
// messages and what is left cover the input exactly, in order, and a
// line framing's last line needs no delimiter. Seeds are in
// testdata/fuzz/FuzzUnit.
func FuzzUnit(f *testing.F) {
	f.Add(uint8(4), []byte("a\nb\nlast"))
	f.Add(uint8(8), []byte("MSG s 1 3\r\nabc\r\nPING"))
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		fr := framers[int(which)%len(framers)]
		msgs, rest, err := splitUnit(fr, data)
		var all []byte
		for _, m := range msgs {
			if len(m) == 0 {
				t.Fatalf("empty message from %q", data)
			}
			all = append(all, m...)
		}
		all = append(all, rest...)
		if string(all) != string(data) {
			t.Fatalf("%T: messages and rest %q, input %q", fr, all, data)
		}
		if err == nil && len(rest) != 0 {
			t.Fatalf("%T: rest %q without an error", fr, rest)
		}
	})
}

// FuzzStamp decodes arbitrary bytes as every stamp encoding and finds
// stamp places in arbitrary messages: a written stamp reads back, a
// decimal one reads as strconv reads it, a place lies inside the message,
// a JSON string's place is the one a byte-by-byte scan finds, nothing
// panics. Seeds are in
// testdata/fuzz/FuzzStamp.
func FuzzStamp(f *testing.F) {
	f.Add(uint8(1), []byte(`{"ts":"0000000000000000000"}`), int16(-19), int64(1764000000000000000))
	f.Add(uint8(3), []byte(`{"a":"\"ts\":", "ts" : "x\"y"}`), int16(3), int64(-1))
	f.Add(uint8(2), []byte("PUB a 16\r\n0123456789abcdef\r\n"), int16(-16), int64(42))
	f.Fuzz(func(t *testing.T, which uint8, data []byte, off int16, now int64) {
		enc := stampEncoding(which % 4)
		enc.read(data)
		if now >= 0 || enc == encBinary {
			b := make([]byte, enc.width())
			enc.put(b, now)
			if got, ok := enc.read(b); !ok || got != now {
				t.Fatalf("%s: wrote %d as %q, read %d %v", enc, now, b, got, ok)
			}
		}
		if enc == encDecimal {
			got, ok := enc.read(data)
			want, err := strconv.ParseInt(string(data), 10, 64)
			wantOK := err == nil && len(data) <= 19 && data[0] != '-' && data[0] != '+'
			if ok != wantOK || (ok && got != want) {
				t.Fatalf("decimal %q: %d %v, strconv says %d %v", data, got, ok, want, err)
			}
		}
		key := []byte(`"ts"`)
		for _, r := range []*stampRule{{enc: enc}, {enc: enc, key: newFinder(key)}, {enc: enc, re: regexp.MustCompile(`ts=(\w*)`)}} {
			if from, to, ok := r.place(data, int(off)); ok && (from < 0 || to > len(data) || from > to) {
				t.Fatalf("place [%d, %d) outside %d bytes", from, to, len(data))
			}
		}
		if len(data) > 0 {
			// any key: the data's first bytes, quoted or not
			k := data[:1+int(uint16(off))%len(data)]
			f := newFinder(k)
			from, to, ok := jsonString(data, &f)
			wf, wt, wok := jsonStringBytewise(data, k)
			if from != wf || to != wt || ok != wok {
				t.Fatalf("key %q in %q: [%d, %d) %v, want [%d, %d) %v", k, data, from, to, ok, wf, wt, wok)
			}
		}
	})
}

// jsonStringBytewise is jsonString as it was before its finder and its
// scan for quotes (issue 34): bytes.Index, then byte by byte.
func jsonStringBytewise(b, key []byte) (from, to int, ok bool) {
	for off := 0; off < len(b); {
		i := bytes.Index(b[off:], key)
		if i < 0 {
			return 0, 0, false
		}
		k := skipSpace(b, off+i+len(key))
		off += i + 1
		if k >= len(b) || b[k] != ':' {
			continue
		}
		k = skipSpace(b, k+1)
		if k >= len(b) || b[k] != '"' {
			continue
		}
		for j := k + 1; j < len(b); j++ {
			switch b[j] {
			case '\\':
				j++
			case '"':
				return k + 1, j, true
			}
		}
		return 0, 0, false
	}
	return 0, 0, false
}

// FuzzFresh rewrites an arbitrary recorded message's fresh field (a
// regexp group, or offset and length) three times: never a panic, the
// message keeps what is outside the field, and an offset field keeps
// its length.
func FuzzFresh(f *testing.F) {
	f.Add(`{"id":7,"x":1}`, false, int8(0), uint8(0))
	f.Add("CMD 0042 x", true, int8(4), uint8(4))
	f.Add("CMD \xff\xfe x", true, int8(-4), uint8(2))
	f.Add("id=", false, int8(0), uint8(0))
	f.Fuzz(func(t *testing.T, msg string, atOffset bool, off int8, length uint8) {
		fresh := `{regexp: "id\":?=?(\\d*)"}`
		if atOffset {
			fresh = fmt.Sprintf("{offset: %d, length: %d}", off, length%21)
		}
		doc := "name: x\nframing: {type: message}\ntransport: udp\nkinds:\n  client: [{name: cmd, match: {regexp: \"(?s).\"}}]\nfresh: [" + fresh + "]\n"
		sp, err := ParseSpec("f.yaml", []byte(doc))
		if err != nil {
			return
		}
		p, err := Compile(sp)
		if err != nil || len(msg) == 0 {
			return
		}
		s, err := p.Compile(p.Messages(Recording{Client: []Segment{{0, []byte(msg)}}}), ScriptOptions{})
		if err != nil {
			return
		}
		c, err := s.NewClient(Identity{Index: 3, Clients: 5, User: "u"})
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			b, _ := c.AppendStep([]byte("prefix"), 0, 0)
			if !strings.HasPrefix(string(b), "prefix") {
				t.Fatalf("what was in dst before the message changed: %q", b)
			}
			if atOffset && len(b)-6 != len(msg) {
				t.Fatalf("an offset field changed the length: %q -> %q", msg, b[6:])
			}
		}
	})
}

// FuzzServerPeers sends an arbitrary recorded message addressed to a
// recorded peer's server id after the room-mate standing in for it got an
// arbitrary id of its own: never a panic, and the message is the recorded
// one with every occurrence of the recorded id replaced by the mate's.
func FuzzServerPeers(f *testing.F) {
	f.Add(`42["dm",{"to":"S0bob","text":"hi S0bob"}]`, "today-b")
	f.Add(`{"to":"x"}`, "a much longer id than the recorded one")
	f.Add(`{"to":"abc"}`, "")
	f.Add(`{"to":""}`, "z")
	f.Fuzz(func(t *testing.T, msg, id string) {
		doc := "name: x\nframing: {type: message}\ntransport: udp\nkinds:\n" +
			"  client: [{name: dm, match: {regexp: \"(?s).\"}}]\n  server: [{name: connected, match: {prefix: \"40\"}}]\n" +
			"correlation: [{name: sid, from: {kind: connected, regexp: \"(?s)^40(.*)$\"}}]\n" +
			"identity: {server_id: sid, server_peers: {regexp: \"\\\"to\\\":\\\"([^\\\"]+)\\\"\"}}\n"
		sp, err := ParseSpec("f.yaml", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Compile(sp)
		if err != nil {
			t.Fatal(err)
		}
		if len(msg) == 0 {
			return
		}
		s, err := p.Compile(p.Messages(Recording{Client: []Segment{{0, []byte(msg)}}}), ScriptOptions{})
		if err != nil {
			return
		}
		ids := NewServerIDs(2)
		a, err := s.NewClient(Identity{Index: 0, Clients: 2, User: "a", PeerIndexes: []int{1}, ServerIDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.NewClient(Identity{Index: 1, Clients: 2, User: "b", PeerIndexes: []int{0}, ServerIDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		var ev Events
		if err := b.Feed([]byte("40"+id), 0, &ev); err != nil {
			t.Fatal(err)
		}
		got, _ := a.AppendStep([]byte("prefix"), 0, 0)
		if !strings.HasPrefix(string(got), "prefix") {
			t.Fatalf("what was in dst before the message changed: %q", got)
		}
		want := msg
		if len(s.serverOthers) > 0 && id != "" {
			want = strings.ReplaceAll(msg, string(s.serverOthers[0]), id)
		}
		if string(got[len("prefix"):]) != want {
			t.Fatalf("sent %q, want %q (recorded peers %q, mate's id %q)", got[len("prefix"):], want, s.serverOthers, id)
		}
	})
}

// FuzzInflate: any bytes as a compressed message, with or without a
// window kept from the one before: an error or at most max bytes, never
// a panic.
func FuzzInflate(f *testing.F) {
	d := Deflate{On: true, ServerBits: 15, ClientBits: 15}
	f.Add(d.AppendDeflated(nil, []byte(`42["chat",{"text":"hi","ts":""}]`)), false)
	f.Add(d.AppendDeflated(nil, make([]byte, 5000)), true)
	f.Fuzz(func(t *testing.T, data []byte, noContext bool) {
		in := Deflate{On: true, ServerNoContext: noContext, ServerBits: 15, ClientBits: 15}.NewInflater(true)
		for range 2 {
			out, err := in.Inflate(nil, data, 4096)
			if err == nil && len(out) > 4096 {
				t.Fatalf("%d bytes out of a 4096 bound", len(out))
			}
		}
	})
}
