package fleet

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
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
// URL (host and path, whatever port), in place of the recorded value.
func TestUpgradeCookies(t *testing.T) {
	c, jar := &client{f: &Fleet{target: "127.0.0.1:9000"}}, newCookieJar()
	set, _ := url.Parse("http://127.0.0.1:9000/login")
	jar.SetCookies(set, []*http.Cookie{{Name: "sid", Value: "new", Path: "/"}, {Name: "admin", Value: "1", Path: "/admin"}})
	req := []byte("GET /chat?x=1 HTTP/1.1\r\nHost: 127.0.0.1:9000\r\nCookie: theme=dark; sid=old\r\n\r\n")
	for _, addr := range []string{"", "127.0.0.1:9001"} {
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
