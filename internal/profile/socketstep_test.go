package profile

import (
	"strings"
	"testing"
)

// TestSocketStepSpec: a socket step is a websocket profile's GET at a
// path or a ws(s):// URL, with messages and no body, taking json,
// regexp or header values (the upgrade's answer's); each mistake is named
// where it is.
func TestSocketStepSpec(t *testing.T) {
	ok := HTTPStepSpec{Name: "lobby", Socket: true, URL: "/lobby", Send: []string{`{"u":"${user}"}`}, Take: []TakeSpec{{Name: "addr", JSON: "$.addr"}}}
	for _, tc := range []struct {
		name      string
		transport string
		edit      func(*HTTPStepSpec)
		want      string // "" compiles
	}{
		{"ok", "websocket", func(*HTTPStepSpec) {}, ""},
		{"ws url", "websocket", func(s *HTTPStepSpec) { s.URL = "wss://lobby.example/l?v=2" }, ""},
		{"regexp take", "websocket", func(s *HTTPStepSpec) { s.Take = []TakeSpec{{Name: "addr", Regexp: `"a":"([^"]+)"`}} }, ""},
		{"not websocket", "tcp", func(*HTTPStepSpec) {}, "http[0].socket: a socket step is a WebSocket"},
		{"body", "websocket", func(s *HTTPStepSpec) { s.Body = "x" }, "http[0].body: a socket step sends its messages"},
		{"post", "websocket", func(s *HTTPStepSpec) { s.Method = "POST" }, "http[0].method: a socket step's upgrade is a GET"},
		{"http url", "websocket", func(s *HTTPStepSpec) { s.URL = "http://x/l" }, "http[0].url: \"http://x/l\": a socket step's url is a path"},
		{"no take", "websocket", func(s *HTTPStepSpec) { s.Take = nil }, "http[0].take: a socket step is there for the values it takes"},
		{"header take", "websocket", func(s *HTTPStepSpec) { s.Take = []TakeSpec{{Name: "addr", Header: "X-Addr"}} }, ""}, // from the 101's headers
		{"bad send", "websocket", func(s *HTTPStepSpec) { s.Send = []string{"${nope}"} }, "http[0].send[0]:"},
		{"send without socket", "websocket", func(s *HTTPStepSpec) { s.Socket = false }, "http[0].send: only a socket step sends messages"},
	} {
		st := ok
		st.Send = append([]string(nil), ok.Send...)
		tc.edit(&st)
		spec := &Spec{Name: "s", Transport: tc.transport, Framing: FramingSpec{Type: "message"}, HTTP: []HTTPStepSpec{st}}
		if tc.transport == "tcp" {
			spec.Framing = FramingSpec{Type: "delimiter", Delimiter: `\n`}
		}
		_, err := Compile(spec)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v; want %q", tc.name, err, tc.want)
		}
	}
}
