package profile

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// chatSteps compiles testdata/chat-steps.yaml over a recording of alice
// logging in, subscribing and publishing twice.
func chatSteps(t testing.TB) (*Profile, *Script) {
	t.Helper()
	p, err := Lookup("testdata/chat-steps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rec := Recording{
		Client: []Segment{
			{at(5), []byte("CONNECT {\"name\":\"alice\",\"nonce\":\"abc123\"}\r\n")},
			{at(6), []byte("SUB lobby 1\r\n")},
			{at(100), []byte("PUB lobby 5\r\nhello\r\n")},
			{at(200), []byte("PUB lobby 5\r\nagain\r\n")},
		},
		Server: []Segment{{at(0), []byte("INFO {\"nonce\":\"abc123\"}\r\n")}, {at(7), []byte("+OK joined\r\n")}},
	}
	s, err := p.Compile(p.Messages(rec), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p, s
}

func newChatClient(t testing.TB, s *Script, user string) *client {
	t.Helper()
	c, err := s.NewClient(Identity{Index: 7, Clients: 10, User: user, Room: "hall5"})
	if err != nil {
		t.Fatal(err)
	}
	return c.(*client)
}

// feed feeds one server message and returns the events.
func feed(t *testing.T, c Client, m string) Events {
	t.Helper()
	var ev Events
	if err := c.Feed([]byte(m), 0, &ev); err != nil {
		t.Fatalf("feed %q: %v", m, err)
	}
	return ev
}

// replies splits ev.Reply into its messages, each with its kind's name.
func replies(p *Profile, ev Events) []string {
	var out []string
	prev := 0
	for _, r := range ev.Replies {
		out = append(out, p.KindName(r.Kind)+" "+string(ev.Reply[prev:r.End]))
		prev = r.End
	}
	return out
}

func TestLoginInSteps(t *testing.T) {
	p, s := chatSteps(t)
	if s.LoginSteps() != 2 {
		t.Fatalf("login steps %d, want 2 (connect, sub): the schedule starts at the first pub", s.LoginSteps())
	}
	tests := []struct {
		name   string
		server []string // fed in order
		want   []string // the last feed's replies
		stage  string   // after the last feed
		in     bool     // logged in by the last feed
		failed string
	}{
		{name: "nothing yet", stage: "hello"},
		{name: "info answers hello: connect goes out with the client's nonce",
			server: []string{"INFO {\"nonce\":\"zz9\"}\r\n"},
			want:   []string{"connect CONNECT {\"name\":\"bob\",\"nonce\":\"zz9\"}\r\n", "heartbeat PING\r\n"},
			stage:  "login"},
		{name: "a message of another kind does not end the step",
			server: []string{"INFO {\"nonce\":\"zz9\"}\r\n", "MSG x 1 y\r\n"},
			stage:  "login"},
		{name: "pong answers connect: the join goes out",
			server: []string{"INFO {\"nonce\":\"zz9\"}\r\n", "PONG\r\n"},
			want:   []string{"sub SUB hall5 1\r\n", "sub SUB inbox.bob 2\r\n"},
			stage:  "join"},
		{name: "an ok that fails the condition is waited past",
			server: []string{"INFO {\"nonce\":\"zz9\"}\r\n", "PONG\r\n", "+OK\r\n"},
			stage:  "join"},
		{name: "logged in at the last step's answer",
			server: []string{"INFO {\"nonce\":\"zz9\"}\r\n", "PONG\r\n", "+OK joined\r\n"},
			stage:  "join", in: true},
		{name: "refused in a step, by the server's reason",
			server: []string{"INFO {\"nonce\":\"zz9\"}\r\n", "-ERR 'Authorization Violation'\r\n"},
			stage:  "login", failed: "authorization_violation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newChatClient(t, s, "bob")
			var ev Events
			for _, m := range tt.server {
				ev = feed(t, c, m)
			}
			if got := replies(p, ev); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("replies %q, want %q", got, tt.want)
			}
			if c.LoginStage() != tt.stage || ev.LoggedIn != tt.in || ev.Failed != tt.failed {
				t.Errorf("stage %q logged in %v failed %q, want %q %v %q", c.LoginStage(), ev.LoggedIn, ev.Failed, tt.stage, tt.in, tt.failed)
			}
		})
	}
	// The first step sends nothing: the fleet writes nothing and waits.
	if _, _, ok := newChatClient(t, s, "bob").AppendLogin(nil, 0, 0); ok {
		t.Error("AppendLogin(0) of a step that only waits: ok")
	}
}

func TestReactions(t *testing.T) {
	p, s := chatSteps(t)
	c := newChatClient(t, s, "bob")
	// During the login (before INFO) and after it alike.
	for _, phase := range []string{"login", "after"} {
		ev := feed(t, c, "PING\r\n")
		if got := replies(p, ev); len(got) != 1 || got[0] != "pong PONG\r\n" {
			t.Fatalf("%s: PING answered with %q", phase, got)
		}
		for _, m := range []string{"INFO {\"nonce\":\"zz9\"}\r\n", "PONG\r\n", "+OK joined\r\n"} {
			feed(t, c, m)
		}
	}
	ev := feed(t, c, "MSG ask.carol 12 ask.carol\r\nMSG news 3 x\r\n")
	if got := replies(p, ev); len(got) != 1 || got[0] != "pub PUB ask.carol carol bob\r\n" {
		t.Fatalf("MSG answered with %q", got)
	}
	if ev.Messages != 2 {
		t.Fatalf("deliveries %d, want 2", ev.Messages)
	}
	if s.Counted(p.Kinds.Index("pong")) || !s.Counted(p.Kinds.Index("pub")) {
		t.Fatal("a kind only reactions send counts as a sent message, or pub does not")
	}
}

func TestMQTTPubackIsAReaction(t *testing.T) {
	p, _ := Lookup("mqtt")
	s, err := p.Compile(p.Messages(Recording{Client: []Segment{{0, mqttConnect(4, "a")}}}), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, _ := s.NewClient(Identity{Index: 0, Clients: 1, User: "b"})
	qos0 := mqttPkt(0x30, mqttStr("t/a"), []byte("x"))
	qos1 := mqttPkt(0x32, mqttStr("t/a"), []byte{0x01, 0x02}, []byte("x"))
	var ev Events
	if err := c.Feed(append(append([]byte{0x20, 2, 0, 0}, qos0...), qos1...), 0, &ev); err != nil {
		t.Fatal(err)
	}
	if got := replies(p, ev); len(got) != 1 || got[0] != "puback \x40\x02\x01\x02" {
		t.Fatalf("replies %q, want one puback of packet id 0x0102", got)
	}
}

func TestConversationSpecErrors(t *testing.T) {
	base := "name: x\nframing: {type: delimiter, delimiter: \"\\n\"}\nkinds:\n  client: [{name: hi, match: {prefix: HI}}]\n  server: [{name: ping, match: {regexp: \"^PING (\\\\d+)\"}}]\n"
	tests := []struct{ name, doc, want string }{
		{"reaction on a client kind", base + "reactions: [{on: hi, send: {text: x}}]\n", "reactions[0].on"},
		{"unknown value", base + "reactions: [{on: ping, send: {text: \"${nope}\"}}]\n", "${nope}"},
		{"group without a regexp", base + "reactions: [{on: ping, send: {text: \"${1}\"}}]\n", "no group 1"},
		{"unclosed value", base + "reactions: [{on: ping, send: {text: \"${1\"}}]\n", "without }"},
		{"empty answer", base + "reactions: [{on: ping, send: {}}]\n", "empty"},
		{"bad hex", base + "reactions: [{on: ping, send: {hex: \"4 ${user}\"}}]\n", "hex"},
		{"bad skip", base + "reactions: [{on: ping, capture: {a: {skip: [x], length: 1}}, send: {text: a}}]\n", "skip[0]"},
		{"capture named user", base + "reactions: [{on: ping, capture: {user: {offset: 1, length: 1}}, send: {text: a}}]\n", "capture.user"},
		{"steps beside send", base + "login: {send: [hi], steps: [{send: [hi]}]}\n", "login.steps"},
		{"step sends a server kind", base + "login: {steps: [{send: [ping]}]}\n", "login.steps[0].send[0]"},
		{"step name twice", base + "login: {steps: [{name: a}, {name: a}]}\n", "login.steps[1].name"},
		{"server id not a correlation", base + "identity: {server_id: sid}\n", "identity.server_id"},
		{"server peers without a server id", base + "identity: {server_peers: {regexp: \"to=(\\\\w+)\"}}\n", "identity.server_peers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSpec("p.yaml", []byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
	ok := base + "reactions: [{on: ping, when: {regexp: \"^PING (\\\\d+)\"}, send: {text: \"PONG ${1} $$${user} $5\"}, as: pong}]\n"
	if _, err := ParseSpec("p.yaml", []byte(ok)); err != nil {
		t.Fatal(err)
	}
}

func TestTemplateRender(t *testing.T) {
	_, s := chatSteps(t)
	c := newChatClient(t, s, "bob")
	resolve := func(name string) (valueSrc, int, error) {
		if name == "1" {
			return srcGroup, 1, nil
		}
		return s.p.clientResolver(name)
	}
	msg := []byte("ASK 42 now")
	groups := []int{0, 10, 4, 6}
	tests := []struct {
		tmpl TemplateSpec
		want string
	}{
		{TemplateSpec{Text: "PONG\r\n"}, "PONG\r\n"},
		{TemplateSpec{Text: "${user}@${room}#${index}:${1}"}, "bob@hall5#7:42"},
		{TemplateSpec{Text: "$5 $${user} $"}, "$5 ${user} $"},
		{TemplateSpec{Text: "n=${nonce}"}, "n=abc123"}, // the recorded value until the server sends one
		{TemplateSpec{Hex: "40 02 ${1} ff"}, "\x40\x0242\xff"},
	}
	for _, tt := range tests {
		tp, err := parseTemplate(tt.tmpl, resolve)
		if err != nil {
			t.Fatalf("%+v: %v", tt.tmpl, err)
		}
		if got := string(tp.render(nil, &tvalues{msg: msg, groups: groups, c: c})); got != tt.want {
			t.Errorf("%+v: %q, want %q", tt.tmpl, got, tt.want)
		}
	}
}

func conversationDoc(t *testing.T, doc string, client ...string) *Script {
	t.Helper()
	sp, err := ParseSpec("p.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(sp)
	if err != nil {
		t.Fatal(err)
	}
	var rec Recording
	for i, m := range client {
		rec.Client = append(rec.Client, Segment{at(i), []byte(m)})
	}
	s, err := p.Compile(p.Messages(rec), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestFreshIDs(t *testing.T) {
	const head = "name: x\nframing: {type: delimiter, delimiter: \"\\n\"}\nkinds:\n  client: [{name: hi, match: {prefix: HI}}, {name: cmd, match: {prefix: CMD}}]\n"
	tests := []struct {
		name, fresh string
		recorded    string
		want        []string // three sends of the recorded message, on through loops
	}{
		{"counter in a regexp, width grows", `[{regexp: "\"id\":(\\d+)", into: [cmd]}]`, `CMD {"id":7,"x":1}`,
			[]string{`CMD {"id":1,"x":1}`, `CMD {"id":2,"x":1}`, `CMD {"id":3,"x":1}`}},
		{"unique in the fleet", `[{regexp: "id=(\\d+)", value: unique}]`, `CMD id=100`,
			[]string{`CMD id=17`, `CMD id=27`, `CMD id=37`}},
		{"decimal at an offset keeps its width", `[{offset: 4, length: 4}]`, `CMD 0042 x`,
			[]string{`CMD 0001 x`, `CMD 0002 x`, `CMD 0003 x`}},
		{"binary at an offset", `[{offset: 4, length: 2}]`, "CMD \xff\xfe x",
			[]string{"CMD \x00\x01 x", "CMD \x00\x02 x", "CMD \x00\x03 x"}},
		{"another kind keeps its id", `[{regexp: "id=(\\d+)", into: [hi]}]`, `CMD id=5`,
			[]string{`CMD id=5`, `CMD id=5`, `CMD id=5`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := conversationDoc(t, head+"fresh: "+tt.fresh+"\n", "HI\n", tt.recorded+"\n")
			c, err := s.NewClient(Identity{Index: 7, Clients: 10, User: "u"})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tt.want {
				b, _ := c.AppendStep(nil, 1, 0)
				if string(b) != want+"\n" {
					t.Errorf("send %d: %q, want %q", i, b, want+"\n")
				}
			}
		})
	}
}

func TestPeersMapped(t *testing.T) {
	doc := "name: x\nframing: {type: delimiter, delimiter: \"\\n\"}\nkinds:\n  client: [{name: hi, match: {prefix: HI}}, {name: msg, match: {prefix: MSG}}]\n" +
		"identity:\n  user: {regexp: \"FROM (\\\\w+)\"}\n  peers: {kind: msg, regexp: \"TO (\\\\w+)\"}\n"
	s := conversationDoc(t, doc, "HI FROM alice01\n", "MSG FROM alice01 TO bob0001 hi\n", "MSG FROM alice01 TO carol01 hi\n", "MSG FROM alice01 TO bob0001 again\n")
	if _, _, others := s.Recorded(); others != 2 {
		t.Fatalf("others %d, want 2 (bob0001, carol01)", others)
	}
	c, err := s.NewClient(Identity{Index: 2, Clients: 10, User: "replay-2", Peers: []string{"replay-3", "replay-4"}, PeerIndexes: []int{3, 4}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range 4 {
		b, _ := c.AppendStep(nil, i, 0)
		got = append(got, string(b))
	}
	want := "HI FROM replay-2\n|MSG FROM replay-2 TO replay-3 hi\n|MSG FROM replay-2 TO replay-4 hi\n|MSG FROM replay-2 TO replay-3 again\n"
	if strings.Join(got, "|") != want {
		t.Fatalf("sent %q, want %q", strings.Join(got, "|"), want)
	}
}

// docBlocks are the YAML examples of docs/profiles.md.
func docBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, part := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		out = append(out, block)
	}
	return out
}

func docBlock(t *testing.T, prefix string) string {
	t.Helper()
	for _, b := range docBlocks(t) {
		if strings.HasPrefix(b, prefix) {
			return b
		}
	}
	t.Fatalf("docs/profiles.md has no example starting %q", prefix)
	return ""
}

// TestDocsConversationExamples runs the examples docs/profiles.md gives
// for reactions, logins in steps, fresh fields and peers.
func TestDocsConversationExamples(t *testing.T) {
	t.Run("login steps", func(t *testing.T) {
		var doc, file map[string]any
		if err := yaml.Unmarshal([]byte(docBlock(t, "login:\n  steps:")), &doc); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile("testdata/chat-steps.yaml")
		if err := yaml.Unmarshal(b, &file); err != nil {
			t.Fatal(err)
		}
		// TestLoginInSteps runs testdata/chat-steps.yaml's login.
		if !reflect.DeepEqual(doc["login"], file["login"]) {
			t.Fatalf("the docs' login in steps is not testdata/chat-steps.yaml's:\n%v\n%v", doc["login"], file["login"])
		}
	})
	t.Run("reactions", func(t *testing.T) {
		head := "name: x\ntransport: udp\nframing: {type: message}\nkinds:\n" +
			"  client: [{name: hello, match: {prefix: HELLO}}, {name: puback, match: {byte: 0x40, mask: 0xf0}}]\n" +
			"  server: [{name: ping, match: {prefix: PING}}, {name: eio_ping, match: {regexp: \"^2$\"}}, {name: event, match: {prefix: \"42\"}},\n" +
			"    {name: json_ping, match: {prefix: \"{\"}}, {name: publish, match: {byte: 0x30, mask: 0xf0}}]\n"
		s := conversationDoc(t, head+docBlock(t, "reactions:"), "HELLO")
		c, err := s.NewClient(Identity{Index: 0, Clients: 1, User: "bob"})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct{ in, want string }{
			{"PING\r\n", "pong PONG\r\n"},
			{"2", "other 3"},
			{`4212["chat","hi"]`, "other 4312[]"},
			{`42["chat","hi"]`, ""},
			{`{"type":"ping","id":77}`, `other {"type":"pong","id":77,"user":"bob"}`},
			{string(mqttPkt(0x32, mqttStr("t"), []byte{0, 9}, []byte("x"))), "puback \x40\x02\x00\x09"},
		} {
			if got := strings.Join(replies(s.p, feed(t, c, tt.in)), "|"); got != tt.want {
				t.Errorf("%q answered %q, want %q", tt.in, got, tt.want)
			}
		}
	})
	t.Run("fresh", func(t *testing.T) {
		head := "name: x\nframing: {type: delimiter, delimiter: \"\\n\"}\nkinds:\n  client: [{name: hello, match: {prefix: HELLO}}, {name: command, match: {prefix: \"{\"}}, {name: request, match: {prefix: REQ}}]\n"
		s := conversationDoc(t, head+docBlock(t, "fresh:"), "HELLO\n", `{"id":41,"m":"msg-5","n":"x"}`+"\n", "REQ 0042 x\n")
		c, _ := s.NewClient(Identity{Index: 3, Clients: 10, User: "u"})
		b, _ := c.AppendStep(nil, 1, 0)
		if want := `{"id":1,"m":"msg-13","n":"x"}` + "\n"; string(b) != want {
			t.Fatalf("sent %q, want %q", b, want)
		}
		if b, _ = c.AppendStep(nil, 2, 0); string(b) != "REQ 0001 x\n" {
			t.Fatalf("sent %q, want %q", b, "REQ 0001 x\n")
		}
	})
	t.Run("peers", func(t *testing.T) {
		head := "name: x\nframing: {type: delimiter, delimiter: \"\\n\"}\nkinds:\n  client: [{name: direct, match: {prefix: \"{\"}}]\n"
		s := conversationDoc(t, head+docBlock(t, "identity:\n  user: {regexp: \"\\\"from"), `{"from":"ann","to":"joe"}`+"\n")
		c, _ := s.NewClient(Identity{Index: 0, Clients: 2, User: "c0", Peers: []string{"c1"}, PeerIndexes: []int{1}})
		b, _ := c.AppendStep(nil, 0, 0)
		if want := `{"from":"c0","to":"c1"}` + "\n"; string(b) != want {
			t.Fatalf("sent %q, want %q", b, want)
		}
	})
}

// TestServerPeers runs the docs' example of peers the server names: a
// client's direct message to the recorded peer's server id carries its
// room-mate's current one once the mate has it, the recorded one until
// then; the recorded client's own id is no peer.
func TestServerPeers(t *testing.T) {
	doc := "name: x\nframing: {type: delimiter, delimiter: \"\\n\"}\nkinds:\n" +
		"  client: [{name: hello, match: {prefix: HELLO}}, {name: direct, match: {prefix: \"{\"}}]\n" +
		"  server: [{name: connected, match: {prefix: \"40\"}}]\n" + docBlock(t, "correlation:\n  - {name: sid")
	sp, err := ParseSpec("p.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Compile(sp)
	if err != nil {
		t.Fatal(err)
	}
	rec := Recording{
		Client: []Segment{
			{at(1), []byte("HELLO ann\n")},
			{at(2), []byte(`{"to":"S0bob","text":"hi"}` + "\n")},
			{at(3), []byte(`{"to":"S0own","text":"me"}` + "\n")},
			{at(4), []byte(`{"to":"S0cat","text":"hi"}` + "\n")},
		},
		Server: []Segment{{at(0), []byte(`40{"sid":"S0own"}` + "\n")}},
	}
	s, err := p.Compile(p.Messages(rec), ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, others := s.Recorded(); others != 2 {
		t.Fatalf("others %d, want 2 (S0bob, S0cat; S0own is the client's own)", others)
	}
	var out strings.Builder
	if err := p.Inspect("f", p.Messages(rec), ScriptOptions{}).WriteText(&out); err != nil || !strings.Contains(out.String(), `peers' server ids: "S0bob", "S0cat"`) {
		t.Errorf("inspect (%v):\n%s", err, out.String())
	}
	ids := NewServerIDs(3)
	newClient := func(i int, peers ...int) Client {
		c, err := s.NewClient(Identity{Index: i, Clients: 3, User: "c", PeerIndexes: peers, ServerIDs: ids})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b, c := newClient(0, 1, 2), newClient(1, 2, 0), newClient(2, 0, 1)
	sends := func(cl Client) string {
		var out []string
		for _, i := range []int{1, 3} {
			m, _ := cl.AppendStep(nil, i, 0)
			out = append(out, strings.TrimSuffix(string(m), "\n"))
		}
		return strings.Join(out, " ")
	}
	if got, want := sends(a), `{"to":"S0bob","text":"hi"} {"to":"S0cat","text":"hi"}`; got != want {
		t.Errorf("before any mate has an id: %s, want %s", got, want)
	}
	feed(t, b, `40{"sid":"today-b-longer"}`+"\n")
	feed(t, c, `40{"sid":"tc"}`+"\n")
	if got, want := sends(a), `{"to":"today-b-longer","text":"hi"} {"to":"tc","text":"hi"}`; got != want {
		t.Errorf("a: %s, want %s", got, want)
	}
	if got, want := sends(b), `{"to":"tc","text":"hi"} {"to":"S0cat","text":"hi"}`; got != want {
		t.Errorf("b (its second mate, a, has no id yet): %s, want %s", got, want)
	}
	feed(t, c, `40{"sid":"tc2"}`+"\n") // a new id replaces the old
	if got, want := sends(a), `{"to":"today-b-longer","text":"hi"} {"to":"tc2","text":"hi"}`; got != want {
		t.Errorf("a after c's new id: %s, want %s", got, want)
	}
}

// TestExpects runs the docs' example: a ping waits for its pong, which a
// reaction, a step or a heartbeat may send; Unanswered names it until
// then.
func TestExpects(t *testing.T) {
	head := "name: x\nframing: {type: delimiter, delimiter: \"\\n\"}\nkinds:\n" +
		"  client: [{name: hello, match: {prefix: HELLO}}, {name: pong, match: {prefix: PONG}}, {name: chat, match: {prefix: CHAT}}]\n" +
		"  server: [{name: ping, match: {prefix: PING}}, {name: news, match: {prefix: NEWS}}]\n"
	tests := []struct {
		name, extra string
		server      []string
		sendStep    int // a script step sent after the feeds, -1 none
		want        string
	}{
		{"nothing arrived", "", nil, -1, ""},
		{"a ping waits", "", []string{"PING\n"}, -1, "ping"},
		{"another message does not answer it", "", []string{"PING\n", "NEWS\n"}, 2, "ping"},
		{"a recorded pong answers it", "", []string{"PING\n"}, 1, ""},
		{"a reaction answers it", "reactions: [{on: ping, send: {text: \"PONG\\n\"}}]\n", []string{"PING\n"}, -1, ""},
		{"a ping after the answer waits again", "", []string{"PING\n", "PING\n"}, -1, "ping"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := conversationDoc(t, head+tt.extra+docBlock(t, "expects:"), "HELLO\n", "PONG\n", "CHAT hi\n")
			c, err := s.NewClient(Identity{Index: 0, Clients: 1, User: "u"})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tt.server {
				feed(t, c, m)
			}
			if tt.sendStep >= 0 {
				c.AppendStep(nil, tt.sendStep, 0)
			}
			if got := c.Unanswered(); got != tt.want {
				t.Errorf("unanswered %q, want %q", got, tt.want)
			}
		})
	}
	base := head + "expects: "
	for _, bad := range []struct{ doc, want string }{
		{base + "[{on: pong, answer: pong}]\n", "expects[0].on"},
		{base + "[{on: ping, answer: ping}]\n", "expects[0].answer"},
	} {
		if _, err := ParseSpec("p.yaml", []byte(bad.doc)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: error %v, want %q", bad.doc, err, bad.want)
		}
	}
}

func TestInspectWalksLoginSteps(t *testing.T) {
	p, err := Lookup("testdata/chat-steps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	client := []Segment{{at(5), []byte("CONNECT {\"name\":\"alice\",\"nonce\":\"abc123\"}\r\n")}, {at(6), []byte("SUB lobby 1\r\n")}}
	for _, tt := range []struct {
		server []string
		want   string
	}{
		{[]string{"INFO {}\r\n", "PONG\r\n", "+OK joined\r\n"}, "accepted"},
		{[]string{"INFO {}\r\n", "+OK joined\r\n"}, "none (waiting in login)"},
		{[]string{"INFO {}\r\n", "PONG\r\n", "-ERR 'Permissions Violation'\r\n"}, "refused in join: permissions_violation"},
	} {
		rec := Recording{Client: client}
		for i, m := range tt.server {
			rec.Server = append(rec.Server, Segment{at(i), []byte(m)})
		}
		r := p.Inspect("f", p.Messages(rec), ScriptOptions{})
		if r.Answer != tt.want {
			t.Errorf("server %q: answer %q, want %q", tt.server, r.Answer, tt.want)
		}
		if problem := strings.Join(r.Problems, "; "); strings.HasPrefix(tt.want, "none") != strings.Contains(problem, "accepts or refuses") {
			t.Errorf("server %q: problems %q", tt.server, problem)
		}
	}
}

// TestLeaveWithoutGoodbye: leave: {text: ""} cuts the recorded goodbye
// from the script like any leave, but the client leaves without it (the
// fleet only closes); without the key the recorded goodbye is the leave.
func TestLeaveWithoutGoodbye(t *testing.T) {
	head := "name: x\nframing: {type: delimiter, delimiter: \"\\n\"}\nkinds:\n  client: [{name: hello, match: {prefix: HELLO}}, {name: say, match: {prefix: SAY}}, {name: leave, match: {prefix: BYE}}]\n"
	for _, tt := range []struct{ extra, want string }{
		{"", "BYE u\n"},
		{"leave: {text: \"\"}\n", ""},
	} {
		s := conversationDoc(t, head+tt.extra, "HELLO u\n", "SAY hi\n", "BYE u\n")
		c, err := s.NewClient(Identity{Index: 0, Clients: 1, User: "u"})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(c.AppendLeave(nil)); got != tt.want || s.Timeline().Len() != 2 {
			t.Errorf("%q: leave %q, want %q; script of %d steps, want 2", tt.extra, got, tt.want, s.Timeline().Len())
		}
	}
}
