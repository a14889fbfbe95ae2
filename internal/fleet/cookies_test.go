package fleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
)

// TestCookieJarBounded: a server setting cookies without end fills a
// client's jar to maxCookies and no further; a cookie already kept is
// still updated, and one past maxCookieBytes is never kept.
func TestCookieJarBounded(t *testing.T) {
	j := newCookieJar()
	u, _ := url.Parse("http://127.0.0.1:8080/login")
	for i := range 3 * maxCookies {
		j.SetCookies(u, []*http.Cookie{{Name: fmt.Sprintf("c%d", i), Value: "v"}})
	}
	j.SetCookies(u, []*http.Cookie{{Name: "c0", Value: "updated"}, {Name: "big", Value: strings.Repeat("x", maxCookieBytes)}})
	got := j.Cookies(u)
	if len(got) != maxCookies {
		t.Fatalf("the jar holds %d cookies; want %d", len(got), maxCookies)
	}
	for _, c := range got {
		if c.Name == "c0" && c.Value != "updated" {
			t.Errorf("c0 = %q; want it updated", c.Value)
		}
		if c.Name == "big" || c.Name == fmt.Sprintf("c%d", maxCookies) {
			t.Errorf("the jar kept %s past its bound", c.Name)
		}
	}
}

// TestUpgradeCookies: the upgrade carries the jar's cookies for its own
// URL (host and path, whatever port; a port alone is on the target's
// host), in place of the recorded value.
func TestUpgradeCookies(t *testing.T) {
	c, jar := &client{f: &Fleet{target: "127.0.0.1:9000"}}, newCookieJar()
	set, _ := url.Parse("http://127.0.0.1:9000/login")
	jar.SetCookies(set, []*http.Cookie{{Name: "sid", Value: "new", Path: "/"}, {Name: "admin", Value: "1", Path: "/admin"}})
	req := []byte("GET /chat?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nCookie: theme=dark; sid=old\r\n\r\n")
	for _, addr := range []string{"", "127.0.0.1:9001", ":9001"} { // ":9001": the target's host
		got := string(c.withCookies(req, addr, jar))
		want := "GET /chat?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nCookie: theme=dark; sid=new\r\n\r\n"
		if got != want {
			t.Errorf("to %q:\n%q\nwant\n%q", addr, got, want)
		}
	}
	if got := string(c.withCookies(req, "10.0.0.1:9000", jar)); got != string(req) {
		t.Errorf("another host got the jar's cookies: %q", got)
	}
}

// TestJarKeptAcrossConnections: the cookie jar is the client's, not one
// connection's. A client that logs in again (its next connection in
// turn: a new connection of the same client index) makes its step with
// the cookie the server set on its first, as a browser would, and its
// upgrade carries it; another client has a jar of its own; a fleet whose
// clients make no step keeps none. The server is a real one on loopback:
// POST /login sets sid unless the request carries one it set.
func TestJarKeptAcrossConnections(t *testing.T) {
	var mu sync.Mutex
	issued := map[string]bool{}
	var sent []string // each request's sid ("" none)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		c, err := r.Cookie("sid")
		if err != nil || !issued[c.Value] {
			sid := fmt.Sprintf("s%d", len(issued))
			issued[sid] = true
			http.SetCookie(w, &http.Cookie{Name: "sid", Value: sid, Path: "/"})
			sent = append(sent, "")
		} else {
			sent = append(sent, c.Value)
		}
		io.WriteString(w, `{"ok":true}`)
	}), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Close()

	p, err := profile.Compile(&profile.Spec{Name: "steps", Transport: "websocket", Framing: profile.FramingSpec{Type: "message"},
		HTTP: []profile.HTTPStepSpec{{Name: "login", Method: "POST", URL: "/login", Body: `{"user":"${user}"}`}}})
	if err != nil {
		t.Fatal(err)
	}
	upgrade := "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: k\r\nSec-WebSocket-Version: 13\r\n\r\n"
	sc, err := p.Compile(p.Messages(profile.Recording{
		Client: []profile.Segment{{Bytes: append([]byte(upgrade), profile.AppendWSFrame(nil, profile.WSText, []byte("hello"), profile.NewWSKey())...)}},
		Server: []profile.Segment{{Bytes: []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")}},
	}), profile.ScriptOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f := &Fleet{target: ln.Addr().String()}
	login := func(idx int) *cookieJar {
		t.Helper()
		pc, err := sc.NewClient(profile.Identity{Index: idx, Clients: 2, User: fmt.Sprintf("u%d", idx)})
		if err != nil {
			t.Fatal(err)
		}
		c := &client{f: f, idx: idx, pc: pc}
		_, jar, why, ok := c.httpSteps(context.Background(), time.Now().Add(10*time.Second))
		if !ok || jar == nil {
			t.Fatalf("client %d: %v", idx, why)
		}
		return jar
	}
	first := login(0)
	again := login(0) // the same client's next connection
	other := login(1)
	mu.Lock()
	got := append([]string(nil), sent...)
	mu.Unlock()
	if want := []string{"", "s0", ""}; !slices.Equal(got, want) {
		t.Fatalf("the requests carried sid %q; want %q (the first set s0, the same client sent it again, another client got its own)", got, want)
	}
	if first != again || first == other {
		t.Error("a client's jar is not kept across its connections, or two clients share one")
	}
	c := &client{f: f, idx: 0}
	if req := string(c.withCookies([]byte(upgrade), "", again)); !strings.Contains(req, "\r\nCookie: sid=s0\r\n") {
		t.Errorf("the next connection's upgrade carries no sid:\n%s", req)
	}
	if j := (&Fleet{}).jarIfAny(0); j != nil {
		t.Error("a fleet whose clients made no step has a jar")
	}
}
