package profile

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
	"go.yaml.in/yaml/v3"
)

// TestSessionGroups: links that share a flow make one client; unlinked
// flows are in no group.
func TestSessionGroups(t *testing.T) {
	links := []Link{
		{From: 0, To: 2, Path: "$.token"},
		{From: 1, To: 2, Path: "$.seat"},
		{From: 3, To: 4, Path: "$.sid"},
		{From: 3, To: 5, Path: "$.sid"},
	}
	got := sessionGroups(links)
	want := []struct{ http, realtime []int }{{[]int{0, 1}, []int{2}}, {[]int{3}, []int{4, 5}}}
	if len(got) != len(want) {
		t.Fatalf("groups %+v", got)
	}
	for i, w := range want {
		if !reflect.DeepEqual(got[i].http, w.http) || !reflect.DeepEqual(got[i].realtime, w.realtime) {
			t.Errorf("group %d: http %v realtime %v; want %v %v", i, got[i].http, got[i].realtime, w.http, w.realtime)
		}
	}
	if s := got[0].String(); s != "flows 0, 1, 2" {
		t.Errorf("String %q", s)
	}
}

// TestRecordedSteps: a recorded login then a seat request become two
// steps: headers as recorded but those of the connection and the body's
// framing, "${" kept literal, the token the first answer handed out
// taken and sent where the second request sent it, and the seat taken
// where the socket carried it (as seat2: seat is a correlation's name).
func TestRecordedSteps(t *testing.T) {
	login := HTTPExchange{Method: "POST", Target: "/v2/auth?x=${y}",
		Header: [][2]string{{"Host", "127.0.0.1:1"}, {"Content-Type", "application/json"}, {"Content-Length", "9"}, {"Accept-Encoding", "gzip"}},
		Sent:   []byte(`{"u":"a"}`), Status: 200, Body: []byte(`{"token":"tk-1234567"}`)}
	seat := HTTPExchange{Method: "GET", Target: "/seat", Header: [][2]string{{"Authorization", "Bearer tk-1234567"}},
		Status: 200, Body: []byte(`{"seat":"S33T"}`)}
	flows := map[int]FlowData{
		0: {Index: 0, Client: "10.0.0.1:5", HTTP: []HTTPExchange{login, seat}},
		1: {Index: 1, Client: "10.0.0.1:6", Upgrade: []byte("GET /ws?seat=S33T HTTP/1.1\r\nHost: x\r\n\r\n")},
	}
	links := Links([]FlowData{flows[0], flows[1]})
	if len(links) != 1 || links[0].Path != "$.seat" {
		t.Fatalf("links %+v", links)
	}
	steps, connect, err := recordedSteps(sessionGroups(links)[0], flows, []string{"seat"}, recordedIdentity{user: "a"})
	if err != nil || connect != "" {
		t.Fatal(connect, err)
	}
	want := []HTTPStepSpec{
		{Name: "v2", Method: "POST", URL: "/v2/auth?x=$${y}", Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"u":"a"}`,
			Take: []TakeSpec{{Name: "token", JSON: "$.token"}}},
		{Name: "seat", Method: "GET", URL: "/seat", Headers: map[string]string{"Authorization": "Bearer ${token}"},
			Take: []TakeSpec{{Name: "seat2", JSON: "$.seat", Recorded: &FieldSpec{Regexp: `[?&]seat=([^& ]+)`}}}},
	}
	if !reflect.DeepEqual(steps, want) {
		t.Errorf("steps\n%+v\nwant\n%+v", steps, want)
	}
	// They compile as a profile's steps.
	p, err := Compile(&Spec{Name: "s", Transport: "websocket", Framing: FramingSpec{Type: "message"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.withRecordedSteps(sessionGroups(links)[0], flows, recordedIdentity{}); err != nil {
		t.Fatal(err)
	}
}

// TestRecordedIdentity: the recorded user id and room become the
// client's own where each stands alone, not inside a longer word, and a
// value shorter than a link's is left (it would match by chance).
func TestRecordedIdentity(t *testing.T) {
	id := recordedIdentity{user: "rec-user-01", room: "lobby"}
	for _, tc := range []struct{ in, want string }{
		{`{"id":"rec-user-01"}`, `{"id":"${user}"}`},
		{`/join/lobby?u=rec-user-01&r=lobby`, `/join/${room}?u=${user}&r=${room}`},
		{`{"id":"rec-user-012","room":"lobbyist"}`, `{"id":"rec-user-012","room":"lobbyist"}`},
		{"", ""},
	} {
		if got := id.in(tc.in); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := (recordedIdentity{user: "ab"}).in("ab cd"); got != "ab cd" {
		t.Errorf("a 2-letter user replaced: %q", got)
	}
}

// TestLobbyAddress: a lobby's answer that names where the client then
// connected (the game server's host:port, or its port alone) is a link
// to the connect address, not a value the socket sends: the recorded
// step takes it and the profile connects where it says (the port alone
// on the target's host); the address is also replaced where the socket's
// upgrade carried it (Host); a hand-written connect wins; a value equal
// to the lobby's own address or port links nothing.
func TestLobbyAddress(t *testing.T) {
	lobby := func(body string) FlowData {
		return FlowData{Index: 0, Client: "10.0.0.1:5", Server: "10.0.0.9:8080",
			HTTP: []HTTPExchange{{Method: "GET", Target: "/lobby", Status: 200, Body: []byte(body)}}}
	}
	game := FlowData{Index: 1, Client: "10.0.0.1:6", Server: "10.0.0.9:7351",
		Upgrade: []byte("GET /ws HTTP/1.1\r\nHost: 10.0.0.9:7351\r\n\r\n")}
	for _, tc := range []struct {
		body, where, recorded, connect string
	}{
		{`{"match":{"addr":"10.0.0.9:7351"}}`, "connect address", `(10\.0\.0\.9:7351)`, "${addr}"},
		{`{"host":"game.example:7351"}`, "connect address", "", "${host}"},
		{`{"port":7351}`, "connect port", "", ":${port}"},
		{`{"port":"7351","lobby":"10.0.0.9:8080","other":8080}`, "connect port", "", ":${port}"},
		{`{"addr":"10.0.0.9:8080","port":8080}`, "", "", ""},
		{`{"addr":"10.0.0.9:7352"}`, "", "", ""},
	} {
		flows := map[int]FlowData{0: lobby(tc.body), 1: game}
		links := Links([]FlowData{flows[0], flows[1]})
		if tc.where == "" {
			if len(links) != 0 {
				t.Errorf("%s: links %+v, want none", tc.body, links)
			}
			continue
		}
		if len(links) != 1 || links[0].Where != tc.where || links[0].Recorded != tc.recorded || !links[0].Addr() {
			t.Errorf("%s: links %+v, want one %q recorded %q", tc.body, links, tc.where, tc.recorded)
			continue
		}
		if !strings.Contains(links[0].String(), "is where flow 1 connected") || !strings.Contains(links[0].Take(), "connect: ") {
			t.Errorf("%s: %s; take: %s", tc.body, links[0], links[0].Take())
		}
		steps, connect, err := recordedSteps(sessionGroups(links)[0], flows, nil, recordedIdentity{})
		if err != nil || connect != tc.connect || len(steps) != 1 || len(steps[0].Take) != 1 || (steps[0].Take[0].Recorded != nil) != (tc.recorded != "") {
			t.Errorf("%s: steps %+v connect %q err %v; want connect %q", tc.body, steps, connect, err, tc.connect)
		}
		p, err := Compile(&Spec{Name: "s", Transport: "websocket", Framing: FramingSpec{Type: "message"}})
		if err != nil {
			t.Fatal(err)
		}
		dp, desc, err := p.withRecordedSteps(sessionGroups(links)[0], flows, recordedIdentity{})
		if err != nil || dp.spec.Connect != tc.connect || !strings.Contains(strings.Join(desc, "; "), "connect ") {
			t.Errorf("%s: compiled connect %q desc %q err %v", tc.body, dp.spec.Connect, desc, err)
		}
		p, err = Compile(&Spec{Name: "s", Transport: "websocket", Framing: FramingSpec{Type: "message"}, Connect: "127.0.0.1:9"})
		if err != nil {
			t.Fatal(err)
		}
		if dp, _, err := p.withRecordedSteps(sessionGroups(links)[0], flows, recordedIdentity{}); err != nil || dp.spec.Connect != "127.0.0.1:9" {
			t.Errorf("%s: a hand-written connect lost: %v", tc.body, err)
		}
	}
}

// TestCookieLinks: a cookie a login's answer set, sent by a later
// request and by the upgrade (in their Cookie headers), links the three
// flows into one client: the later request is an HTTP flow of the group
// (a step, not a connection to play), no take is made for the cookie
// (the client's jar carries it), and requests linked to requests only
// make no group.
func TestCookieLinks(t *testing.T) {
	login := HTTPExchange{Method: "POST", Target: "/login", Status: 200, SetCookies: [][2]string{{"sid", "c0ffee12"}, {"theme", "dark"}, {"x", "1"}}}
	me := HTTPExchange{Method: "GET", Target: "/me", Header: [][2]string{{"Cookie", "sid=c0ffee12; theme=dark"}}, Status: 200}
	flows := []FlowData{
		{Index: 0, Client: "10.0.0.1:5", HTTP: []HTTPExchange{login}},
		{Index: 1, Client: "10.0.0.1:6", HTTP: []HTTPExchange{me}},
		{Index: 2, Client: "10.0.0.1:7", Upgrade: []byte("GET /chat HTTP/1.1\r\nHost: x\r\nCookie: theme=dark; sid=c0ffee12\r\n\r\n")},
		{Index: 3, Client: "10.0.0.2:7", Upgrade: []byte("GET /chat HTTP/1.1\r\nCookie: sid=c0ffee12\r\n\r\n")}, // another host
	}
	links := Links(flows)
	var got []string
	for _, l := range links {
		got = append(got, l.String()+"; take: "+l.Take())
	}
	want := []string{
		`the cookie sid="c0ffee12" set in flow 0's answer (POST /login) is sent in flow 1's request header Cookie (GET /me); take: none, each client's cookie jar carries it`,
		`the cookie sid="c0ffee12" set in flow 0's answer (POST /login) is sent in flow 2's upgrade header Cookie; take: none, each client's cookie jar carries it`,
		`the cookie theme="dark" set in flow 0's answer (POST /login) is sent in flow 1's request header Cookie (GET /me); take: none, each client's cookie jar carries it`,
		`the cookie theme="dark" set in flow 0's answer (POST /login) is sent in flow 2's upgrade header Cookie; take: none, each client's cookie jar carries it`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("links:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	g := sessionGroups(links)
	if len(g) != 1 || !reflect.DeepEqual(g[0].http, []int{0, 1}) || !reflect.DeepEqual(g[0].realtime, []int{2}) {
		t.Fatalf("groups %+v; want http 0, 1 and realtime 2", g)
	}
	byIndex := map[int]FlowData{0: flows[0], 1: flows[1], 2: flows[2]}
	steps, _, err := recordedSteps(g[0], byIndex, nil, recordedIdentity{})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 2 || len(steps[0].Take) != 0 || len(steps[1].Take) != 0 || steps[1].Headers["Cookie"] != "sid=c0ffee12; theme=dark" {
		t.Errorf("steps %+v; want login and me, no take, me's recorded Cookie (the jar replaces its pairs)", steps)
	}
	if g := sessionGroups(Links(flows[:2])); len(g) != 0 {
		t.Errorf("requests alone made groups %+v", g)
	}
}

// TestLobbySocket: a lobby socket's answer (a server message) hands out
// the game server's address and a token that the later socket carries:
// both are links, the lobby becomes a socket step sending its recorded
// messages (the recorded user the client's own) and taking both, and
// the profile connects where it says. A value the lobby's client sent
// itself (its room, echoed), or one that reached a flow which started
// before the answer (a chat passing words on), links nothing.
func TestLobbySocket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	lobby := FlowData{Index: 0, Client: "10.0.0.1:5", Server: "10.0.0.9:8080", Start: t0,
		Upgrade: []byte("GET /lobby HTTP/1.1\r\nHost: 10.0.0.9:8080\r\nSec-WebSocket-Key: k\r\nOrigin: http://x\r\n\r\n"),
		Msgs:    []Message{{Bytes: []byte(`{"find":"hall","user":"rec-user-01"}`)}},
		Answers: []Message{{Offset: 10 * time.Millisecond, Bytes: []byte(`{"room":"hall","match":{"addr":"10.0.0.9:7351","token":"tk0123456789"}}`)}}}
	game := FlowData{Index: 1, Client: "10.0.0.1:6", Server: "10.0.0.9:7351", Start: t0.Add(20 * time.Millisecond),
		Upgrade: []byte("GET /ws?token=tk0123456789 HTTP/1.1\r\nHost: 10.0.0.9:7351\r\n\r\n"),
		Msgs:    []Message{{Bytes: []byte(`{"join":"hall","user":"rec-user-01"}`)}}}
	early := game
	early.Index, early.Start = 2, t0.Add(5*time.Millisecond)
	links := Links([]FlowData{lobby, game, early})
	if len(links) != 2 {
		t.Fatalf("links %+v; want the address and the token, to flow 1", links)
	}
	for _, l := range links {
		if l.To != 1 || !l.Socket() || !strings.Contains(l.String(), "flow 0's socket message #0") {
			t.Errorf("link %s", l)
		}
	}
	g := sessionGroups(links)
	if len(g) != 1 || !reflect.DeepEqual(g[0].http, []int{0}) || !reflect.DeepEqual(g[0].realtime, []int{1}) {
		t.Fatalf("groups %+v", g)
	}
	flows := map[int]FlowData{0: lobby, 1: game}
	steps, connect, err := recordedSteps(g[0], flows, nil, recordedIdentity{user: "rec-user-01", room: "hall"})
	if err != nil || connect != "${addr}" || len(steps) != 1 {
		t.Fatalf("steps %+v connect %q err %v", steps, connect, err)
	}
	want := HTTPStepSpec{Name: "lobby", Method: "GET", URL: "/lobby", Socket: true, Headers: map[string]string{"Origin": "http://x"},
		Send: []string{`{"find":"${room}","user":"${user}"}`},
		Take: []TakeSpec{{Name: "addr", JSON: "$.match.addr", Recorded: &FieldSpec{Regexp: `(10\.0\.0\.9:7351)`}}, {Name: "token", JSON: "$.match.token", Recorded: &FieldSpec{Regexp: `[?&]token=([^& ]+)`}}}}
	if !reflect.DeepEqual(steps[0], want) {
		t.Errorf("step\n%+v\nwant\n%+v", steps[0], want)
	}
	p, err := Compile(&Spec{Name: "s", Transport: "websocket", Framing: FramingSpec{Type: "message"}})
	if err != nil {
		t.Fatal(err)
	}
	dp, desc, err := p.withRecordedSteps(g[0], flows, recordedIdentity{user: "rec-user-01", room: "hall"})
	if err != nil || !strings.Contains(strings.Join(desc, "; "), "lobby (a socket: GET /lobby, sends 1 messages, takes addr at $.match.addr, token at $.match.token); connect \"${addr}\"") {
		t.Fatalf("desc %q err %v", desc, err)
	}
	// The compiled client: the request, then the values from the answers.
	s, err := dp.Compile(Messages{Upgrade: game.Upgrade, Client: []Message{{Bytes: game.Msgs[0].Bytes, Kind: -1}}}, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.NewClient(Identity{User: "u-7", Room: "r-2", Clients: 1})
	if err != nil {
		t.Fatal(err)
	}
	hs := c.(HTTPStepper)
	r, ok := hs.HTTPRequest(0)
	if !ok || !r.Socket || r.URL != "/lobby" || len(r.Send) != 1 || string(r.Send[0]) != `{"find":"r-2","user":"u-7"}` {
		t.Fatalf("request %+v", r)
	}
	if m := hs.SocketAnswer(0, nil); m != "missing_addr" {
		t.Errorf("before any answer: %q", m)
	}
	if m := hs.SocketAnswer(0, []byte(`{"match":{"addr":"127.0.0.1:9"}}`)); m != "missing_token" {
		t.Errorf("after the address: %q", m)
	}
	if m := hs.SocketAnswer(0, []byte(`{"match":{"token":"tk-new-0001"}}`)); m != "" {
		t.Errorf("after the token: %q", m)
	}
	if a := hs.ConnectAddr(); a != "127.0.0.1:9" {
		t.Errorf("connect %q", a)
	}
	if up := string(c.UpgradeRequest()); !strings.Contains(up, "token=tk-new-0001") || !strings.Contains(up, "Host: 127.0.0.1:9") {
		t.Errorf("upgrade %q", up)
	}
}

// TestHTTPFlowsOfStreamProfiles: a plain HTTP flow (a lobby's GET) is
// read as HTTP by any stream profile, a TCP protocol's (mqtt) as a
// WebSocket's, so that --flows all can play it as the client's step
// before its MQTT connection; a UDP profile reads it as its own
// messages; an MQTT flow is never HTTP.
func TestHTTPFlowsOfStreamProfiles(t *testing.T) {
	lobby := Recording{
		Client: []Segment{{Bytes: []byte("GET /v1/match?mode=pvp HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\n\r\n")}},
		Server: []Segment{{Offset: time.Millisecond, Bytes: []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\r\n{\"game\":{\"port\":1883}}")}},
	}
	mqttConnect := Recording{Client: []Segment{{Bytes: []byte("\x10\x17\x00\x04MQTT\x04\x02\x00\x3c\x00\x0brec-client1")}}}
	udp, err := Compile(&Spec{Name: "u", Transport: "udp", Framing: FramingSpec{Type: "raw"}})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := Compile(&Spec{Name: "w", Transport: "websocket", Framing: FramingSpec{Type: "message"}})
	if err != nil {
		t.Fatal(err)
	}
	mqtt, err := Lookup("mqtt")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    *Profile
		http bool
	}{{mqtt, true}, {ws, true}, {udp, false}} {
		m := tc.p.Messages(lobby)
		if got := len(m.HTTP) == 1 && m.HTTP[0].Target == "/v1/match?mode=pvp" && m.HTTP[0].Status == 200; got != tc.http {
			t.Errorf("%s (%s): the lobby's GET read as HTTP: %v, want %v (%+v)", tc.p.Name, tc.p.Transport, got, tc.http, m.HTTP)
		}
	}
	if m := mqtt.Messages(mqttConnect); m.HTTP != nil || len(m.Client) != 1 {
		t.Errorf("an MQTT CONNECT read as %+v", m)
	}
}

// TestHeaderLinks: values an answer handed out in its headers (an HTTP
// answer's X-Game-Server naming the game server, its X-Session sent in
// the upgrade's query; a lobby socket's 101 naming the server too) are
// links with header takes, the protocol's own headers (Date, Server,
// Content-Length), a value the client sent itself (an echoed
// X-Request-Id) and one the socket's message handed out too (X-Token:
// the message's link) none; each proposed take, as inspect prints it, loads
// as a profile's take, and the recorded steps take the values from the
// headers (testdata/links-header.golden: go test -update rewrites it).
func TestHeaderLinks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	hdr := [][2]string{{"Date", "Sat, 28 Nov 2026 08:00:00 GMT"}, {"Server", "lobby/1.0"}, {"Content-Length", "1234"},
		{"X-Request-Id", "req-77aa"}, {"X-Game-Server", "10.0.0.9:7351"}, {"X-Session", "s3ss10n42"}}
	lobby := FlowData{Index: 0, Client: "10.0.0.1:5", Server: "10.0.0.9:8080", Start: t0,
		HTTP: []HTTPExchange{{Method: "GET", Target: "/v2/lobby", Header: [][2]string{{"X-Request-Id", "req-77aa"}}, Status: 200,
			Body: []byte(`{}`), Answer: answerHeaders(headLines(hdr))}}}
	game := FlowData{Index: 1, Client: "10.0.0.1:6", Server: "10.0.0.9:7351", Start: t0.Add(20 * time.Millisecond),
		Upgrade: []byte("GET /ws?session=s3ss10n42&r=req-77aa HTTP/1.1\r\nHost: 10.0.0.9:7351\r\n\r\n")}
	sock := FlowData{Index: 2, Client: "10.0.0.2:5", Server: "10.0.0.9:8080", Start: t0,
		Upgrade: []byte("GET /lobby?v=2 HTTP/1.1\r\nHost: 10.0.0.9:8080\r\nSec-WebSocket-Key: k\r\n\r\n"),
		Msgs:    []Message{{Bytes: []byte(`{"find":"hall"}`)}},
		// Its answer names a token, in its 101's header too: one link,
		// the message's.
		Answers:  []Message{{Offset: time.Millisecond, Bytes: []byte(`{"token":"tk0123456789"}`)}},
		Upgraded: UpgradeAnswer(Recording{Server: []Segment{{Bytes: []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nSec-WebSocket-Accept: abcd\r\nX-Game-Server: 10.0.0.9:7352\r\nX-Token: tk0123456789\r\n\r\n\x81\x02{}")}}})}
	game2 := FlowData{Index: 3, Client: "10.0.0.2:6", Server: "10.0.0.9:7352", Start: t0.Add(20 * time.Millisecond),
		Upgrade: []byte("GET /ws?token=tk0123456789 HTTP/1.1\r\nHost: 10.0.0.9:7352\r\n\r\n")}
	flows := []FlowData{lobby, game, sock, game2}
	links := Links(flows)
	var b strings.Builder
	for _, l := range links {
		fmt.Fprintf(&b, "link: %s; take: %s\n", l, l.Take())
		if l.Header == "" {
			if l.Path != "$.token" {
				t.Errorf("a link not by a header: %s", l)
			}
			continue
		}
		// The take as printed is a profile's take.
		var tk TakeSpec
		if err := yaml.Unmarshal([]byte(strings.SplitN(l.Take(), "; connect: ", 2)[0]), &tk); err != nil || tk != (TakeSpec{Name: tk.Name, Header: l.Header, Recorded: tk.Recorded}) {
			t.Errorf("take %s: %+v, %v", l.Take(), tk, err)
		}
	}
	byIndex := map[int]FlowData{}
	for _, f := range flows {
		byIndex[f.Index] = f
	}
	p, err := Compile(&Spec{Name: "s", Transport: "websocket", Framing: FramingSpec{Type: "message"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range sessionGroups(links) {
		_, desc, err := p.withRecordedSteps(g, byIndex, recordedIdentity{})
		if err != nil {
			t.Fatalf("%s: %v", g, err)
		}
		fmt.Fprintf(&b, "%s: %s\n", g, strings.Join(desc, "; "))
	}
	testproc.Golden(t, filepath.Join("testdata", "links-header.golden"), []byte(b.String()), *update, "-update")
}

// headLines are an answer's head lines (as httpMessage cuts them) of
// its headers.
func headLines(hdr [][2]string) [][]byte {
	var out [][]byte
	for _, h := range hdr {
		out = append(out, []byte(h[0]+": "+h[1]))
	}
	return out
}
