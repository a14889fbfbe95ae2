package profile

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// socketio recordings, cut to their WebSocket flows: a client with the
// default transports (its upgrade carries the sid its polling handshake
// was handed; no 40 on the socket) and a websocket-only one.
const (
	sioPolledUpgrade = "GET /socket.io/?EIO=4&transport=websocket&sid=RECsid0000 HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Key: k\r\n\r\n"
	sioWSUpgrade     = "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Key: k\r\n\r\n"
)

func sioRecording(upgrade string, client ...string) Recording {
	b := []byte(upgrade)
	for _, m := range client {
		b = AppendWSFrame(b, WSText, []byte(m), []byte{1, 2, 3, 4})
	}
	return Recording{Client: []Segment{{Bytes: b}}}
}

// TestSocketIOVariants: the built-in socketio profile logs in as the
// recording shows (variant polling for an upgrade with a sid) or as
// --variant forces; the polling way makes the handshake and the 40 over
// HTTP and upgrades with the sid it was handed, the websocket way leaves
// a recorded sid out and sends the recorded 40, or its template where
// the recording has none; each way's login sends what the server expects.
func TestSocketIOVariants(t *testing.T) {
	p, err := Lookup("socketio")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Variants(), ","); got != "websocket,polling" {
		t.Fatalf("variants %s", got)
	}
	polled := sioRecording(sioPolledUpgrade, "2probe", "5", `420["join","lobby"]`, `42["chat",{"text":"hi","ts":""}]`)
	wsOnly := sioRecording(sioWSUpgrade, `40{"user":"rec-user-01"}`, `420["join","lobby"]`, `42["chat",{"text":"hi","ts":""}]`)
	for _, tc := range []struct {
		name    string
		rec     Recording
		force   string
		variant string
		http    []string // method and URL prefix of each HTTP step
		upgrade string   // the upgrade's request line
		login   []string // the login's messages, in order, over the socket
	}{
		{"polled", polled, "", "polling", []string{"GET /socket.io/?EIO=4&transport=polling&t=", "POST /socket.io/?EIO=4&transport=polling&sid=NEWsid%2B1&t="},
			"GET /socket.io/?EIO=4&transport=websocket&sid=NEWsid%2B1 HTTP/1.1", []string{"2probe", "5", `420["join","lobby"]`}},
		{"polled, forced websocket", polled, "websocket", "websocket", nil,
			"GET /socket.io/?EIO=4&transport=websocket HTTP/1.1", []string{`40{"user":"replay-3"}`, `420["join","lobby"]`}},
		{"websocket-only", wsOnly, "", "websocket", nil,
			"GET /socket.io/?EIO=4&transport=websocket HTTP/1.1", []string{`40{"user":"replay-3"}`, `420["join","lobby"]`}},
		{"websocket-only, forced polling", wsOnly, "polling", "polling", []string{"GET /socket.io/?EIO=4&transport=polling&t=", "POST "},
			"GET /socket.io/?EIO=4&transport=websocket&sid=NEWsid%2B1 HTTP/1.1", []string{"2probe", "5", `420["join","lobby"]`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := p.Compile(p.Messages(tc.rec), ScriptOptions{Variant: tc.force})
			if err != nil {
				t.Fatal(err)
			}
			if s.p.Variant() != tc.variant || !strings.Contains(strings.Join(s.Notes(), "\n"), "logs in as variant "+tc.variant) {
				t.Fatalf("variant %s, notes %q; want %s", s.p.Variant(), s.Notes(), tc.variant)
			}
			c, err := s.NewClient(Identity{Index: 3, User: "replay-3", Room: "lobby"})
			if err != nil {
				t.Fatal(err)
			}
			hs := c.(HTTPStepper)
			for i, want := range tc.http {
				r, ok := hs.HTTPRequest(i)
				if !ok || !strings.HasPrefix(r.Method+" "+r.URL, want) {
					t.Fatalf("http step %d: %+v, want %q", i, r, want)
				}
				if r.Method == "POST" && string(r.Body) != `40{"user":"replay-3"}` {
					t.Fatalf("the polled connect %q", r.Body)
				}
				if i == 0 && hs.HTTPAnswer(0, func(string) string { return "" }, []byte(`0{"sid":"NEWsid+1","upgrades":["websocket"],"pingInterval":25000}`)) != "" {
					t.Fatal("the handshake's sid not taken")
				}
			}
			if _, ok := hs.HTTPRequest(len(tc.http)); ok {
				t.Fatalf("more than %d http steps", len(tc.http))
			}
			if got, _, _ := strings.Cut(string(c.UpgradeRequest()), "\r\n"); got != tc.upgrade {
				t.Fatalf("upgrade %q, want %q", got, tc.upgrade)
			}
			var got []string
			for st := range s.stages {
				for i := range s.stages[st].sends {
					b, _ := c.(*client).appendSend(nil, &s.stages[st].sends[i], 0)
					got = append(got, string(b))
				}
			}
			if strings.Join(got, " | ") != strings.Join(tc.login, " | ") {
				t.Fatalf("login sends %q, want %q", got, tc.login)
			}
		})
	}
	if _, err := p.Compile(p.Messages(polled), ScriptOptions{Variant: "longpoll"}); err == nil || !strings.Contains(err.Error(), "websocket, polling") {
		t.Fatalf("an unknown variant: %v", err)
	}
}

// TestUpgradeQuery: upgrade_query sets, replaces or leaves out a
// parameter of the recorded upgrade's request line, the rest as recorded.
func TestUpgradeQuery(t *testing.T) {
	for _, tc := range []struct{ query, line, want string }{
		{`{sid: ""}`, "GET /s/?a=1&sid=X&b=2 HTTP/1.1", "GET /s/?a=1&b=2 HTTP/1.1"},
		{`{sid: ""}`, "GET /s/?sid=X HTTP/1.1", "GET /s/ HTTP/1.1"},
		{`{sid: ""}`, "GET /s/ HTTP/1.1", "GET /s/ HTTP/1.1"},
		{`{sid: "${user}"}`, "GET /s/?a=1&sid=X HTTP/1.1", "GET /s/?a=1&sid=u+1%2F2 HTTP/1.1"},
		{`{sid: "${user}"}`, "GET /s/?a=1 HTTP/1.1", "GET /s/?a=1&sid=u+1%2F2 HTTP/1.1"},
		{`{sid: "${user}", a: ""}`, "GET /s HTTP/1.1", "GET /s?sid=u+1%2F2 HTTP/1.1"},
		{`{sid: "${user}"}`, "GET /s/?sid=X&sid=Y HTTP/1.1", "GET /s/?sid=u+1%2F2 HTTP/1.1"},
	} {
		spec := "name: q\ntransport: websocket\nframing: {type: message}\nupgrade_query: " + tc.query + "\n"
		s, err := ParseSpec("q.yaml", []byte(spec))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := s.compile()
		sc, err := p.Compile(p.Messages(sioRecording(tc.line+"\r\nHost: x\r\nSec-WebSocket-Key: k\r\n\r\n", "hello")), ScriptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := sc.NewClient(Identity{Index: 1, User: "u 1/2"})
		got := string(c.UpgradeRequest())
		if line, rest, _ := strings.Cut(got, "\r\n"); line != tc.want || rest != "Host: x\r\nSec-WebSocket-Key: k\r\n\r\n" {
			t.Errorf("%s on %q: %q, want %q", tc.query, tc.line, got, tc.want)
		}
	}
	for _, bad := range []struct{ yaml, want string }{
		{"transport: tcp\nframing: {type: raw}\nupgrade_query: {sid: x}", "only a websocket profile"},
		{"transport: websocket\nupgrade_query: {'a=b': x}", "not a query parameter"},
		{"transport: websocket\nupgrade_query: {sid: '${nope}'}", "${nope}"},
		{"transport: websocket\nvariants: [{name: Bad}]", "variants[0].name"},
		{"transport: websocket\nvariant: ws\nvariants: [{name: ws}]", "variants[0].name"},
		{"transport: websocket\nvariants: [{name: v, when: '('}]", "variants[0].when"},
		{"transport: websocket\nvariants: [{name: v, http: [{url: '/${nope}'}]}]", "variants[0].http[0].url"},
		{"transport: websocket\nkinds: {client: [{name: a, match: {prefix: a}}]}\nlogin: {steps: [{send: [{kind: a, text: x, as: b}]}]}", "drop as"},
	} {
		_, err := ParseSpec("bad.yaml", []byte("name: x\n"+bad.yaml+"\n"))
		var le *LineError
		if err == nil || !strings.Contains(err.Error(), bad.want) || (!errors.As(err, &le) && !strings.Contains(bad.want, "drop as")) {
			t.Errorf("%s: %v, want an error with %q", bad.yaml, err, bad.want)
		}
	}
}

// TestVariantsDocExample: docs/profiles.md's variants example is the
// built-in socketio profile's text (TestSocketIO's polling subtest runs
// it against the real app).
func TestVariantsDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/profiles.md")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := BuiltinFile("socketio")
	for _, part := range strings.Split(string(doc), "```yaml\n")[1:] {
		if block, _, _ := strings.Cut(part, "```"); strings.HasPrefix(block, "variant: websocket\n") {
			if !strings.Contains(string(file), block) {
				t.Fatalf("docs/profiles.md's variants example is not in the built-in socketio profile:\n%s", block)
			}
			return
		}
	}
	t.Fatal("docs/profiles.md has no example starting variant: websocket")
}

// TestStepMap: each http step stands for the first recorded request of
// its method whose path its URL's matches (values as any segment text);
// a step the client never made and a request no step makes are said.
func TestStepMap(t *testing.T) {
	for _, tc := range []struct {
		tmpl, path string
		match      bool
	}{
		{"/socket.io/?EIO=4&transport=polling&t=${random}", "/socket.io/", true},
		{"/matchmake/joinOrCreate/${room}", "/matchmake/joinOrCreate/chat", true},
		{"/matchmake/joinOrCreate/${room}", "/matchmake/joinOrCreate/chat/x", false},
		{"http://${server}/check/${session}?r=${random}", "/check/S1", true},
		{"https://lobby.example:8443", "/", true},
		{"/v2/a.b", "/v2/aXb", false},
	} {
		if got := pathPattern(tc.tmpl).MatchString(tc.path); got != tc.match {
			t.Errorf("%s on %s: %v", tc.tmpl, tc.path, got)
		}
	}
	p, err := Lookup("socketio")
	if err != nil {
		t.Fatal(err)
	}
	r := p.variants[0].p.Inspect("#2", p.Messages(sioRecording(sioPolledUpgrade, "2probe", "5", `420["join","lobby"]`)), ScriptOptions{})
	got := strings.Join(r.StepMap([]FlowData{
		{Index: 0, HTTP: []HTTPExchange{{Method: "GET", Target: "/socket.io/?EIO=4&transport=polling&t=a", Status: 200}}},
		{Index: 1, HTTP: []HTTPExchange{{Method: "GET", Target: "/socket.io/?EIO=4&transport=polling&t=b&sid=x", Status: 200}}},
	}), "\n")
	for _, want := range []string{"http step handshake (GET /socket.io/?EIO=4&transport=polling&t=${random}): flow 0's GET /socket.io/?EIO=4&transport=polling&t=a -> 200",
		"(POST /socket.io/?EIO=4&transport=polling&sid=${eio_sid}&t=${random}): no recorded request of this method and path",
		"no http step makes flow 1's GET"} {
		if !strings.Contains(got, want) {
			t.Errorf("step map lacks %q:\n%s", want, got)
		}
	}
}
