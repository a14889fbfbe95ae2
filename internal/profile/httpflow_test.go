package profile

import (
	"strconv"
	"strings"
	"testing"
)

// TestHTTPExchangesAndLinks: a kept-alive HTTP flow (a Content-Length
// answer, then a chunked one) is named as HTTP; a WebSocket upgrade is
// not; the values its JSON answers handed out are found in the socket
// flow's query, path, header and messages, each with the take that
// finds the recorded value there again.
func TestHTTPExchangesAndLinks(t *testing.T) {
	body1 := `{"sessionId":"COKKzZnfn","room":{"roomId":"r0om1","processId":"pr0c","clients":12345}}`
	chunked := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"d\r\n{\"token\":\"tk-\r\nb\r\n0123456789\"\r\n1\r\n}\r\n0\r\n\r\n"
	httpFlow := Recording{
		Client: []Segment{{Bytes: []byte("POST /matchmake/joinOrCreate/chat HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}GET /auth HTTP/1.1\r\nHost: a\r\n\r\n")}},
		Server: []Segment{{Bytes: []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body1)) + "\r\n\r\n" + body1)}, {Bytes: []byte(chunked)}},
	}
	ex := HTTPExchanges(httpFlow)
	if len(ex) != 2 || ex[0].String() != "POST /matchmake/joinOrCreate/chat -> 200 (application/json, 86 bytes)" || string(ex[1].Body) != `{"token":"tk-0123456789"}` {
		t.Fatalf("%v %q", ex, ex[len(ex)-1].Body)
	}
	upgrade := "GET /pr0c/r0om1?sessionId=COKKzZnfn HTTP/1.1\r\nHost: a\r\nX-Token: tk-0123456789\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n"
	if HTTPExchanges(Recording{Client: []Segment{{Bytes: []byte(upgrade)}}}) != nil {
		t.Fatal("a WebSocket upgrade taken for an HTTP flow")
	}
	links := Links([]FlowData{
		{Index: 0, Client: "10.0.0.1:5000", HTTP: ex},
		{Index: 1, Client: "10.0.0.1:5001", Upgrade: []byte(upgrade), Msgs: []Message{{Bytes: []byte(`{"clients":12345}`)}}},
		{Index: 2, Client: "10.0.0.2:5000", Upgrade: []byte(upgrade)}, // another client host
	})
	var got []string
	for _, l := range links {
		got = append(got, l.Where+" <- "+l.Path+" "+l.Take())
	}
	want := []string{
		`client message #0 <- $.room.clients {name: clients, json: $.room.clients, recorded: {regexp: '(12345)'}}`,
		`upgrade path segment 1 <- $.room.processId {name: processid, json: $.room.processId, recorded: {regexp: 'GET /([^/ ?]+)'}}`,
		`upgrade path segment 2 <- $.room.roomId {name: roomid, json: $.room.roomId, recorded: {regexp: 'GET /[^/ ?]+/([^/ ?]+)'}}`,
		`upgrade query sessionId <- $.sessionId {name: sessionid, json: $.sessionId, recorded: {regexp: '[?&]sessionId=([^& ]+)'}}`,
		`upgrade header X-Token <- $.token {name: token, json: $.token, recorded: {regexp: '(tk-0123456789)'}}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("links\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if g := ClientGroups([]FlowData{{Index: 0, Client: "10.0.0.1:5000"}, {Index: 1, Client: "10.0.0.1:5001"}}, links); len(g) != 1 ||
		g[0].String() != "flows 0, 1 are one client's (host 10.0.0.1, linked by 5 values): replay the socket's flow with an http step for this one, or --flows all: the recorded requests as each client's steps" {
		t.Errorf("groups %v", g)
	}
	for _, l := range links { // each recorded regexp finds the value again
		f, err := (&Profile{}).compileField("x", &FieldSpec{Regexp: l.Recorded}, false)
		if err != nil {
			t.Fatal(err)
		}
		if v := f.take([]byte(upgrade), -1); l.Where[:7] == "upgrade" && string(v) != l.Value {
			t.Errorf("%s: %q finds %q", l.Where, l.Recorded, v)
		}
	}
}
