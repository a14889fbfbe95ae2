package profile

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestJSONPath(t *testing.T) {
	var doc any
	json.Unmarshal([]byte(`{"sessionId":"COKKzZnfn","room":{"roomId":"r1","processId":"p9","clients":3},"seats":[{"id":"a"},{"id":"b"}],"ok":true,"none":null}`), &doc)
	for _, tc := range []struct {
		path, want string
		ok         bool
	}{
		{"$.sessionId", "COKKzZnfn", true},
		{"room.roomId", "r1", true},
		{"$.room.clients", "3", true},
		{"$.seats[1].id", "b", true},
		{"$.ok", "true", true},
		{"$.room", `{"clients":3,"processId":"p9","roomId":"r1"}`, true},
		{"$.seats[2].id", "", false},
		{"$.none", "", false},
		{"$.room.missing", "", false},
	} {
		p, err := parseJSONPath(tc.path)
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		got, ok := jsonAt(doc, p)
		if ok != tc.ok || string(got) != tc.want {
			t.Errorf("%s: %q %v, want %q %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
	for _, bad := range []string{"$", "$.a[x]", "$.a[1", "$..a"} {
		if _, err := parseJSONPath(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestHTTPStepValues: a step's request is rendered from the client's
// values and the steps before; its answer's values replace the recorded
// ones in the upgrade and feed the connect address; a missing value is
// named.
func TestHTTPStepValues(t *testing.T) {
	spec := `name: seat
transport: websocket
framing: {type: message}
http:
  - name: seat
    url: /matchmake/joinOrCreate/chat
    headers: {Content-Type: application/json}
    body: '{"name":"${user}"}'
    take:
      - {name: session, json: $.sessionId, recorded: {regexp: 'sessionId=(\w+)'}}
      - {name: room_id, json: $.room.roomId, recorded: {regexp: 'GET /\w+/(\w+)'}}
      - {name: server, header: X-Server}
  - name: check
    method: PUT
    url: "http://${server}/check/${session}?r=${random}"
connect: "${server}"
identity:
  user: {regexp: 'user=(\w+)'}
`
	s, err := ParseSpec("seat.yaml", []byte(spec))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.compile()
	if err != nil {
		t.Fatal(err)
	}
	up := "GET /p1/ROOMrec?sessionId=SESSrec&user=alice HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Key: k\r\n\r\n"
	client := []byte(up + string(AppendWSFrame(nil, WSText, []byte("hi alice"), []byte{1, 2, 3, 4})))
	m := p.Messages(Recording{Client: []Segment{{Bytes: client}}})
	sc, err := p.Compile(m, ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := sc.NewClient(Identity{Index: 3, User: "replay-3"})
	if err != nil {
		t.Fatal(err)
	}
	hs := c.(HTTPStepper)
	r, ok := hs.HTTPRequest(0)
	if !ok || r.Method != "POST" || r.URL != "/matchmake/joinOrCreate/chat" || string(r.Body) != `{"name":"replay-3"}` || r.Headers[0] != [2]string{"Content-Type", "application/json"} {
		t.Fatalf("%+v %q", r, r.Body)
	}
	hdr := func(k string) string {
		if k == "X-Server" {
			return "127.0.0.1:2567"
		}
		return ""
	}
	if miss := hs.HTTPAnswer(0, hdr, []byte(`{"room":{"roomId":"R7"}}`)); miss != "missing_session" {
		t.Fatalf("an answer without sessionId: %q", miss)
	}
	if miss := hs.HTTPAnswer(0, hdr, []byte(`{"sessionId":"S1","room":{"roomId":"R7"}}`)); miss != "" {
		t.Fatal(miss)
	}
	r, _ = hs.HTTPRequest(1)
	if r.Method != "PUT" || !strings.HasPrefix(r.URL, "http://127.0.0.1:2567/check/S1?r=") || len(r.URL) != len("http://127.0.0.1:2567/check/S1?r=")+16 {
		t.Fatalf("%+v", r)
	}
	if _, ok := hs.HTTPRequest(2); ok {
		t.Fatal("a third step")
	}
	if got := string(c.UpgradeRequest()); !strings.HasPrefix(got, "GET /p1/R7?sessionId=S1&user=replay-3 HTTP/1.1") {
		t.Fatalf("upgrade %q", got)
	}
	if hs.ConnectAddr() != "127.0.0.1:2567" {
		t.Fatalf("connect %q", hs.ConnectAddr())
	}

	for _, bad := range []struct{ yaml, want string }{
		{"http: [{url: /a, take: [{name: t}]}]", "give one of json, regexp or header"},
		{"http: [{url: /a, take: [{name: t, json: $.a, header: X}]}]", "give one of json, regexp or header"},
		{"http: [{take: [{name: t, json: $.a}]}]", "http[0].url"},
		{"http: [{url: '/a/${nope}'}]", "${nope}"},
		{"http: [{url: /a}]\nconnect: '${nope}'", "connect"},
	} {
		_, err := ParseSpec("bad.yaml", []byte("name: x\ntransport: websocket\n"+bad.yaml+"\n"))
		var le *LineError
		if !errors.As(err, &le) || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want a line error with %q", bad.yaml, err, bad.want)
		}
	}
}
