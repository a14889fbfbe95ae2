package profile

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

func TestExampleProfileCompiles(t *testing.T) {
	p, err := Lookup("../../examples/profiles/acme-binary.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "acme" || p.Port != 9000 || p.Transport != TCP {
		t.Fatalf("profile %+v", p)
	}
	want := "other hello chat heartbeat leave"
	if got := strings.Join(p.Kinds, " "); got != want {
		t.Fatalf("kinds %q, want %q", got, want)
	}
}

func TestBuiltinsCompile(t *testing.T) {
	for _, name := range Builtin {
		if _, err := Lookup(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Lookup("nosuch"); err == nil || !strings.Contains(err.Error(), "not a built-in profile") {
		t.Fatalf("unknown name: %v", err)
	}
}

func TestSpecErrorsNameTheLine(t *testing.T) {
	base := "name: x\nframing:\n  type: length\n  size: 2\n"
	tests := []struct {
		name, doc, want string
		line            int
	}{
		{"unknown key", base + "  sise: 2\n", "framing.sise: unknown key (did you mean size?)", 5},
		{"wrong type", "name: x\nframing:\n  type: length\n  size: two\n", `framing.size: "two": want a whole number`, 4},
		{"bad size", "name: x\nframing:\n  type: length\n  size: 3\n", "framing.size: 3: 1, 2, 4 or 8", 4},
		{"bad transport", base + "transport: quic\n", "transport", 5},
		{"unknown hooks", base + "hooks: amqp\n", `hooks: "amqp": no Go code of that name (mqtt, redis)`, 5},
		{"bad kind ref", base + "kinds:\n  server:\n    - {name: ok, match: {byte: 1}}\nlogin:\n  success: nope\n", "login.success", 9},
		{"kind slip", base + "kinds:\n  client:\n    - {name: say, match: {byte: 1}}\nsends: [sya]\n", `sends[0]: "sya" is not a client kind (did you mean say?)`, 8},
		{"no such kind", base + "kinds:\n  server:\n    - {name: ok, match: {byte: 1}}\n    - {name: msg, match: {byte: 2}}\ndelivery: [zzz]\n", `delivery[0]: "zzz" is not a server kind (kinds: ok, msg)`, 9},
		{"step named like a fleet failure", base + "kinds:\n  client:\n    - {name: a, match: {byte: 1}}\nlogin:\n  steps:\n    - {name: connect, send: [a]}\n", `login.steps[0].name: "connect": a step's failures are labelled <step>_<reason>, and connect_... names the fleet's own failures`, 10},
		{"http step named like a fleet failure", base + "http:\n  - {name: tls_auth, url: /a}\n", `http[0].name: "tls_auth"`, 6},
		{"two matchers", base + "kinds:\n  client:\n    - name: a\n      match: {byte: 1, prefix: x}\n", "exactly one", 8},
		{"bad byte", base + "kinds:\n  client:\n    - name: a\n      match:\n        byte: 300\n", "a byte is 0 to 255", 9},
		{"bad duration", base + "heartbeat:\n  template: {text: x}\n  interval: soon\n", "not a duration", 7},
		{"bad regexp", base + "login:\n  reason: {regexp: \"(\"}\n", "login.reason.regexp", 6},
		{"bad name", "name: x\nframing: {type: resp}\nkinds:\n  client:\n    - {name: Bad, match: {prefix: x}}\n", "kinds.client[0].name", 5},
		// Bounds: a 1 ns heartbeat sent 11 M pings; a fresh regexp that
		// matches nothing finds a field in every message; a fan-out the
		// fleet cannot count by.
		{"heartbeat too short", base + "heartbeat:\n  template: {text: x}\n  interval: 1ns\n", "heartbeat.interval: 1ns: at least 10ms", 7},
		{"fresh matches empty", base + "kinds:\n  client:\n    - {name: a, match: {prefix: x}}\nfresh:\n  - {into: [a], regexp: \"id=([0-9]*)\", value: counter}\n", "its group matches the empty string", 9},
		{"bad fanout", base + "fanout: everyone\n", "fanout: \"everyone\": server, none, others or all", 5},
		{"fanout slip", base + "fanout: other\n", "fanout: \"other\": server, none, others or all (did you mean others?)", 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSpec("p.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q, want it to contain %q", err, tt.want)
			}
			var le *LineError
			line := 0
			if errors.As(err, &le) {
				line = le.Line
			} else if strings.Contains(err.Error(), "line ") {
				_, rest, _ := strings.Cut(err.Error(), "line ")
				for _, c := range rest {
					if c < '0' || c > '9' {
						break
					}
					line = line*10 + int(c-'0')
				}
			}
			if line != tt.line {
				t.Fatalf("error %q names line %d, want %d", err, line, tt.line)
			}
		})
	}
}

// acme builds messages of the example profile's protocol.
func acme(typ byte, body ...[]byte) []byte {
	var b []byte
	for _, p := range body {
		b = append(b, p...)
	}
	out := binary.BigEndian.AppendUint16(nil, uint16(1+len(b)))
	out = append(out, typ)
	return append(out, b...)
}

func at(ms int) time.Duration { return time.Duration(ms) * time.Millisecond }

// TestDeclarativeCorrelation plays the example profile's client: the
// recorded token in every later message is replaced by the one the server
// hands this client, the login waits for it, and ids keep their length.
func TestDeclarativeCorrelation(t *testing.T) {
	p, err := Lookup("../../examples/profiles/acme-binary.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rtok := []byte("RECORDED")
	stamp := make([]byte, 8)
	rec := Recording{
		Client: []Segment{
			{at(0), acme(1, []byte("alice001"))},
			{at(100), append(acme(2, rtok, []byte("hi"), stamp), acme(3, rtok)...)},
			{at(200), acme(2, rtok, []byte("again"), stamp)},
			{at(300), acme(4, rtok)},
		},
		Server: []Segment{{at(1), acme(0x81, rtok)}, {at(101), acme(0x83, []byte("hi"), stamp)}},
	}
	m := p.Messages(rec)
	if len(m.Client) != 5 || len(m.Server) != 2 || len(m.Notes) != 0 {
		t.Fatalf("messages %d/%d, notes %q", len(m.Client), len(m.Server), m.Notes)
	}
	s, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u, _, _ := s.Recorded(); u != "alice001" {
		t.Fatalf("recorded user %q", u)
	}
	if s.Timeline().Len() != 4 || s.LoginSteps() != 1 || s.Timeline().HandshakeEnd() != 1 {
		t.Fatalf("len %d login %d handshake %d; notes %q", s.Timeline().Len(), s.LoginSteps(), s.Timeline().HandshakeEnd(), s.Notes())
	}
	c, err := s.NewClient(Identity{Index: 7, Clients: 200, User: "r-7"})
	if err != nil {
		t.Fatal(err)
	}
	login, k := c.AppendStep(nil, 0, 0)
	if string(login) != string(acme(1, []byte("alice007"))) || p.Kinds[k] != "hello" {
		t.Fatalf("login %q kind %s", login, p.Kinds[k])
	}
	var ev Events
	// The answer comes in two reads: the login waits for the whole token.
	welcome := acme(0x81, []byte("TOKEN-07"))
	if err := c.Feed(welcome[:4], 0, &ev); err != nil || ev.LoggedIn {
		t.Fatalf("half a welcome: %v %+v", err, ev)
	}
	if err := c.Feed(welcome[4:], 0, &ev); err != nil || !ev.LoggedIn {
		t.Fatalf("welcome: %v %+v", err, ev)
	}
	now := time.Now().UnixNano()
	chat, k := c.AppendStep(nil, 1, now)
	want := acme(2, []byte("TOKEN-07hi"), binary.BigEndian.AppendUint64(nil, uint64(now)))
	if string(chat) != string(want) || p.Kinds[k] != "chat" {
		t.Fatalf("chat %q, want %q", chat, want)
	}
	ev.Reset()
	deliver := acme(0x83, []byte("hi"), binary.BigEndian.AppendUint64(nil, uint64(now)))
	if err := c.Feed(deliver, now+int64(time.Millisecond), &ev); err != nil || ev.Messages != 1 || len(ev.Latencies) != 1 || ev.Latencies[0] != 1000 {
		t.Fatalf("delivery: %v %+v", err, ev)
	}
	ev.Reset()
	if err := c.Feed(acme(0x82, []byte{2}), 0, &ev); err != nil || ev.Error != "room_full" {
		t.Fatalf("denied after login: %+v", ev)
	}
	c2, _ := s.NewClient(Identity{Index: 8, Clients: 200, User: "replay-8"})
	ev.Reset()
	if err := c2.Feed(acme(0x82, []byte{1}), 0, &ev); err != nil || ev.Failed != "bad_user" || ev.LoggedIn {
		t.Fatalf("denied: %+v", ev)
	}
	if _, err := s.NewClient(Identity{Index: 1, Clients: 1e9, User: "x"}); err == nil {
		t.Fatal("an id that cannot keep its length was accepted")
	}
}

// TestUDPTextProfile: a declarative profile over UDP with one message per
// datagram and a text protocol: the id changes length freely (the message
// is the datagram), the refusal reason comes from a regexp.
func TestUDPTextProfile(t *testing.T) {
	doc := `name: chat-udp
transport: udp
port: 5000
kinds:
  client:
    - {name: login, match: {prefix: "LOGIN "}}
    - {name: say, match: {prefix: "SAY "}}
  server:
    - {name: ok, match: {prefix: "OK"}}
    - {name: err, match: {prefix: "ERR "}}
    - {name: msg, match: {prefix: "MSG "}}
login: {send: [login], success: ok, failure: err, reason: {regexp: "^ERR (\\w+)"}}
heartbeat: {template: {text: "PING"}, interval: 10s}
delivery: [msg]
identity: {user: {regexp: "^LOGIN (\\w+)"}}
`
	p := compileDoc(t, doc)
	m := p.Messages(Recording{
		Client: []Segment{{0, []byte("LOGIN bob")}, {at(10), []byte("SAY hi from bob")}},
		Server: []Segment{{at(1), []byte("OK")}, {at(11), []byte("MSG bob: hi")}},
	})
	sc, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sc.NewClient(Identity{Index: 12, Clients: 100, User: "replay-12"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := c.AppendStep(nil, 0, 0); string(got) != "LOGIN replay-12" {
		t.Fatalf("login %q", got)
	}
	if got, _ := c.AppendStep(nil, 1, 0); string(got) != "SAY hi from replay-12" {
		t.Fatalf("say %q", got)
	}
	var ev Events
	c.Feed([]byte("ERR banned for a while"), 0, &ev)
	if ev.Failed != "banned" {
		t.Fatalf("refusal %+v", ev)
	}
	ev.Reset()
	c2, _ := sc.NewClient(Identity{Index: 1, Clients: 100, User: "replay-1"})
	c2.Feed([]byte("OK"), 0, &ev)
	c2.Feed([]byte("MSG x"), 0, &ev)
	if !ev.LoggedIn || ev.Messages != 1 || string(c2.AppendHeartbeat(nil, 0)) != "PING" {
		t.Fatalf("events %+v", ev)
	}
}

// TestSpecKeyErrors: every unknown key and ill-typed value of a profile
// is named at once, a line each, in the profile's words (file:line:
// key.path: what), with the key it was probably meant to be.
func TestSpecKeyErrors(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // the error's lines, exactly
	}{
		{"all of them, with suggestions",
			"name: x\ntransprt: tcp\nframing: {type: length, sise: 2}\nkinds:\n  client:\n    - {name: a, match: {regex: x}}\n  servr: []\nlogin:\n  steps:\n    - {name: s, send: [a, {txt: hi}], succes: ok}\n",
			[]string{
				"p.yaml:2: transprt: unknown key (did you mean transport?)",
				"p.yaml:3: framing.sise: unknown key (did you mean size?)",
				"p.yaml:6: kinds.client[0].match.regex: unknown key (did you mean regexp?)",
				"p.yaml:7: kinds.servr: unknown key (did you mean server?)",
				"p.yaml:10: login.steps[0].send[1].txt: unknown key (did you mean text?)",
				"p.yaml:10: login.steps[0].succes: unknown key (did you mean success?)",
			}},
		{"no close key: the keys there",
			"name: x\nframing: {type: resp}\nheartbeat: {template: {text: p}, interval: 1s, wobble: 3}\n",
			[]string{"p.yaml:3: heartbeat.wobble: unknown key (keys here: interval, template)"}},
		{"types",
			"name: x\nframing: {type: length, size: two, span: maybe}\nkinds: [a]\n",
			[]string{
				`p.yaml:2: framing.size: "two": want a whole number`,
				`p.yaml:2: framing.span: "maybe": want true or false`,
				"p.yaml:3: kinds: want a mapping of keys (key: value)",
			}},
		{"map values are checked", "name: x\nframing: {type: resp}\nreactions:\n  - on: a\n    capture: {n: {kind: a, offst: 1}}\n",
			[]string{"p.yaml:5: reactions[0].capture.n.offst: unknown key (did you mean offset?)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSpec("p.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatal("no error")
			}
			if got, want := err.Error(), strings.Join(tt.want, "\n"); got != want {
				t.Errorf("got:\n%s\nwant:\n%s", got, want)
			}
			var le *LineError
			if !errors.As(err, &le) || le.Path == "" {
				t.Errorf("no *LineError in %T", err)
			}
		})
	}
	// Bounded: a file of 100 unknown keys names 20 and counts the rest.
	var b strings.Builder
	b.WriteString("name: x\nframing: {type: resp}\n")
	for i := range 100 {
		fmt.Fprintf(&b, "k%d: 1\n", i)
	}
	_, err := ParseSpec("p.yaml", []byte(b.String()))
	if lines := strings.Split(fmt.Sprint(err), "\n"); len(lines) != maxKeyErrors+1 || lines[maxKeyErrors] != "p.yaml: and 80 more" {
		t.Errorf("%d lines, last %q", len(lines), lines[len(lines)-1])
	}
}

var update = flag.Bool("update", false, "rewrite testdata/errors/*.golden")

// TestSpecErrorsGolden: a profile file with mistakes in several parts
// (enumerated values slipped by a letter, a bad kind name, kind
// references, a fresh value) is refused with every mistake at once, in
// the file's order, each "file:line: key.path: what (did you mean X?)";
// testdata/errors/*.golden hold the exact lines (go test -update
// rewrites them).
func TestSpecErrorsGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "errors", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/errors/*.yaml: %v", err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseSpec(filepath.Base(path), data)
			if err == nil {
				t.Fatal("no error")
			}
			var le *LineError
			if !errors.As(err, &le) || le.Line == 0 {
				t.Errorf("no *LineError with a line in %T", err)
			}
			got := err.Error() + "\n"
			testproc.Golden(t, strings.TrimSuffix(path, ".yaml")+".golden", []byte(got), *update, "-update")
		})
	}
}

// TestSpecValueErrorsBounded: a file of 30 bad kind names (31 mistakes
// with their number) names 20 and counts the rest, as the key check does.
func TestSpecValueErrorsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: x\nframing: {type: resp}\nkinds:\n  client:\n")
	for i := range 30 {
		fmt.Fprintf(&b, "    - {name: K%d, match: {prefix: x}}\n", i)
	}
	_, err := ParseSpec("p.yaml", []byte(b.String()))
	lines := strings.Split(fmt.Sprint(err), "\n")
	// 31 mistakes: the 30 names, and 30 kinds where at most 13 go.
	if len(lines) != maxKeyErrors+1 || lines[0] != `p.yaml:4: kinds.client: 33 kinds: at most 13` || lines[1] != `p.yaml:5: kinds.client[0].name: "K0": a kind name is lower case letters, digits and _ (up to 32)` || lines[maxKeyErrors] != "p.yaml: and 11 more" {
		t.Errorf("%d lines, first %q, last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}
