package profile

import (
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/session"
)

// TestSuggestedLoopKeepsTheRhythm: a 20 Hz recording's suggested loop
// starts at the first send exactly (not rounded to before it) and ends one
// period after the last, so a replay wraps 50 ms after the last send, at
// 20 Hz, not 1 ms later.
func TestSuggestedLoopKeepsTheRhythm(t *testing.T) {
	var msgs []Message
	for i := 0; i < 20; i++ {
		msgs = append(msgs, Message{Offset: 172456789*time.Nanosecond + time.Duration(i)*50*time.Millisecond})
	}
	got := suggestLoop(0, 1, msgs)
	if want := "172.456ms,1.172456s"; got != want {
		t.Fatalf("loop %s, want %s", got, want)
	}
	l, _, err := session.ParseLoop(got)
	if err != nil {
		t.Fatal(err)
	}
	if l.A.Offset > msgs[0].Offset || l.B.Offset-l.A.Offset != 20*50*time.Millisecond {
		t.Fatalf("loop %v..%v: starts after the first send or lasts %v, not 20 periods", l.A.Offset, l.B.Offset, l.B.Offset-l.A.Offset)
	}
}

// TestSuggestedLoopStartsAfterTheLogin: a suggested loop replay takes,
// however close the login's last message is to the first send: a start
// rounded down to the µs that reaches the join would loop the login,
// which replay refuses (a recording proxy stamped join and first send in
// the same µs).
func TestSuggestedLoopStartsAfterTheLogin(t *testing.T) {
	const ms = time.Millisecond
	send := 217*ms + 639636*time.Nanosecond // 217.639636ms
	for _, tc := range []struct {
		name  string
		login time.Duration
		start string
	}{
		{"a µs before", send - 2*time.Microsecond, "217.639ms"},
		{"same µs, earlier ns", send - 100, "217.639636ms"},
		{"same instant", send, "#1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flow := []time.Duration{tc.login}
			var msgs []Message
			for i := 0; i < 10; i++ {
				o := send + time.Duration(i)*50*ms
				msgs = append(msgs, Message{Offset: o})
				flow = append(flow, o)
			}
			got := suggestLoop(tc.login, 1, msgs)
			if a, _, _ := strings.Cut(got, ","); a != tc.start {
				t.Errorf("loop %s: start %s, want %s", got, a, tc.start)
			}
			l, _, err := session.ParseLoop(got)
			if err != nil {
				t.Fatal(err)
			}
			tl, err := session.NewTimeline(session.TimelineInput{Flow: flow, First: 0, Last: len(flow), FirstSend: 1, Loop: &l})
			if err != nil {
				t.Fatalf("loop %s: %v", got, err)
			}
			if tl.LoginEnd() != 1 {
				t.Errorf("loop %s: the login ends at message %d, want 1 (the first send)", got, tl.LoginEnd())
			}
		})
	}
}

// TestUserInUpgradeOnly: a user id that only the WebSocket upgrade's
// query carries is found there and rewritten per client.
func TestUserInUpgradeOnly(t *testing.T) {
	p := compileDoc(t, `name: q
transport: websocket
framing: {type: delimiter, delimiter: "\n"}
kinds:
  client: [{name: say, match: {prefix: "say "}}]
  server: [{name: msg, match: {prefix: "msg "}}]
delivery: [msg]
identity: {user: {regexp: "EIO=4&user=(\\w+)"}}
`)
	m := p.Messages(wsRecording(true, []string{"say hi"}, []string{"msg hi"}))
	m.Upgrade = []byte("GET /socket.io/?EIO=4&user=alice01 HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n")
	r := p.Inspect("f", m, ScriptOptions{})
	if r.User != "alice01" {
		t.Fatalf("recorded user %q (notes %q)", r.User, r.Notes)
	}
	s, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.NewClient(Identity{Index: 7, Clients: 10, User: "replay-7"})
	if up := string(c.UpgradeRequest()); !strings.Contains(up, "user=replay-7 ") {
		t.Fatalf("upgrade %q", up)
	}
}

// TestRoomInKindPatternWarns: a kind that matches on the recorded room
// stops matching once rooms are rewritten: the script says so.
func TestRoomInKindPatternWarns(t *testing.T) {
	doc := strings.Replace(natsishDoc, `{name: msg, match: {prefix: "MSG "}}`, `{name: msg, match: {prefix: "MSG room "}}`, 1) +
		"identity: {room: {kind: pub, regexp: '^PUB (\\S+)'}}\n"
	p := compileDoc(t, doc)
	s, err := p.Compile(p.Messages(Recording{Client: []Segment{{0, []byte("CONNECT {}\r\n")}, {at(10), []byte("PUB room 2\r\nhi\r\n")}}}), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Join(s.Notes(), "; "); !strings.Contains(n, `kinds msg match on the recorded room "room"`) {
		t.Fatalf("notes %q", n)
	}
}

// TestEmptyPrefixMatchesAll: `prefix: ""` is a kind every message has
// (after the kinds before it), not a matcher with nothing given; an
// unknown key in a match is still refused.
func TestEmptyPrefixMatchesAll(t *testing.T) {
	p := compileDoc(t, `name: any
framing: {type: delimiter, delimiter: "\n"}
kinds:
  client: [{name: say, match: {prefix: "say "}}, {name: rest, match: {prefix: ""}}]
  server: [{name: msg, match: {prefix: ""}}]
delivery: [msg]
`)
	if k := p.ClientKind([]byte("whatever\n")); p.Kinds[k] != "rest" || p.ServerKind([]byte("x")) != 0 {
		t.Fatalf("kind %s, server %d", p.Kinds[k], p.ServerKind([]byte("x")))
	}
	_, err := ParseSpec("t.yaml", []byte("name: x\nframing: {type: resp}\nkinds:\n  client:\n    - {name: a, match: {prefx: x}}\n"))
	if err == nil || err.Error() != "t.yaml:5: kinds.client[0].match.prefx: unknown key (did you mean prefix?)" {
		t.Fatalf("unknown match key: %v", err)
	}
	if _, err := ParseSpec("t.yaml", []byte("name: x\nframing: {type: resp}\nkinds:\n  client:\n    - {name: a, match: {}}\n")); err == nil {
		t.Fatal("a match with nothing given was accepted")
	}
}

// TestUserIDDefaults: the id a client gets, as docs/profiles.md says:
// the profile's format; else the fleet's id where lengths may change (a
// text framing); else the recorded id's length kept.
func TestUserIDDefaults(t *testing.T) {
	acme, err := Lookup("../../examples/profiles/acme-binary.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		p    *Profile
		want string
	}{
		{"text framing: the fleet's id", compileDoc(t, lineDoc), "user-7"},
		{"length framing: the recorded length", acme, "alice007"},
		{"format", compileDoc(t, strings.Replace(lineDoc, `(\\w+)"}}`, `(\\w+)"}, format: "player%05d"}`, 1)), "player00007"},
	}
	for _, tt := range tests {
		s := &Script{p: tt.p, user: []byte("alice001")}
		got, err := s.idFor(s.user, Identity{Index: 7, Clients: 200, User: "user-7"})
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: %q %v, want %q", tt.name, got, err, tt.want)
		}
	}
}

// TestDocsTextExamples runs the framing and latency examples of
// docs/profiles.md on messages of their protocols.
func TestDocsTextExamples(t *testing.T) {
	counted := docBlock(t, "framing: {type: counted")
	p := compileDoc(t, strings.Replace(natsishDoc, `framing: {type: counted, count: "^(PUB|MSG) "}`+"\n", "", 1)+counted)
	msgs, rest, err := Split(p.framer, []byte("SUB a 1\r\nPUB a 5\r\nhe\r\no\r\nHMSG a 1 2 7\r\nxxhello\r\n"))
	if err != nil || len(msgs) != 3 || len(rest) != 0 {
		t.Fatalf("counted example: %q rest %q: %v", msgs, rest, err)
	}
	lat := strings.Split(strings.TrimSpace(docBlock(t, "latency: {send: say")), "\n")
	if len(lat) != 2 {
		t.Fatalf("latency examples %q", lat)
	}
	// The stamp written into a send reads back the way a delivery's is
	// read (same place in both).
	for i, tc := range []struct{ head, send string }{
		{jsonWSDoc, `{"op":"say","ts":""}`},
		{natsishDoc, "PUB room 19\r\nhi 0000000000000000\r\n"},
	} {
		line, _, _ := strings.Cut(lat[i], "   #")
		p := compileDoc(t, tc.head+line+"\n")
		rec := Recording{Client: []Segment{{0, []byte("CONNECT {}\r\n")}, {at(10), []byte(tc.send)}}}
		if p.Transport == WebSocket {
			rec = wsRecording(true, []string{`{"op":"hello"}`, tc.send}, nil)
		}
		m := p.Messages(rec)
		s, err := p.Compile(m, ScriptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := s.NewClient(Identity{Index: 0, Clients: 1, User: "u"})
		now := time.Now().UnixNano()
		step := -1
		for j := range s.msgs {
			if s.msgs[j].kind == p.stamp.send {
				step = j
			}
		}
		if step < 0 {
			t.Fatalf("example %d: no send in the script (%d messages, notes %q)", i, len(s.msgs), s.Notes())
		}
		sent, _ := c.AppendStep(nil, step, now)
		v, ok := p.readStamp(append([]byte(nil), sent...))
		if !ok || v != now {
			t.Fatalf("example %d: sent %q reads %d %v, want %d", i, sent, v, ok, now)
		}
	}
}
