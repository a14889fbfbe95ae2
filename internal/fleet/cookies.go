package fleet

import (
	"bytes"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sync"

	"github.com/reprise-harness/reprise/internal/profile"
)

// A client's cookie jar, as a browser's: a cookie an HTTP step's answer
// set goes with the client's later steps and its WebSocket upgrade (a
// session cookie set at login and required on the upgrade), and stays
// the client's for the run: a client that connects again (its next
// connection in turn, a login made anew) makes its steps and upgrade
// with the cookies it was set before, as a browser that reconnects does.
// The jar is the client's (by its index in the fleet), not one
// connection's: made at its first step, none for a client without steps. The jar is
// net/http/cookiejar with no public-suffix list (a load test talks to its
// own hosts), bounded: at most maxCookies cookies a client, each at most
// maxCookieBytes of name and value (RFC 6265 §6.1's least a user agent
// holds: 50 a domain, 4096 bytes each); cookies past the bound are not
// kept, whatever a server sets.
const (
	maxCookies     = 50
	maxCookieBytes = 4096
)

type cookieJar struct {
	jar  *cookiejar.Jar
	mu   sync.Mutex
	keys map[string]struct{} // name, domain, path and host of each cookie kept
}

func newCookieJar() *cookieJar {
	j, _ := cookiejar.New(nil) // errors only on a bad public-suffix list
	return &cookieJar{jar: j, keys: map[string]struct{}{}}
}

// SetCookies implements http.CookieJar, within the bounds.
func (j *cookieJar) SetCookies(u *url.URL, cookies []*http.Cookie) {
	j.mu.Lock()
	keep := make([]*http.Cookie, 0, len(cookies))
	for _, c := range cookies {
		if len(c.Name)+len(c.Value) > maxCookieBytes {
			continue
		}
		k := c.Name + "\x00" + c.Domain + "\x00" + c.Path + "\x00" + u.Hostname()
		if _, ok := j.keys[k]; !ok {
			if len(j.keys) >= maxCookies {
				continue
			}
			j.keys[k] = struct{}{}
		}
		keep = append(keep, c)
	}
	j.mu.Unlock()
	j.jar.SetCookies(u, keep)
}

// Cookies implements http.CookieJar.
func (j *cookieJar) Cookies(u *url.URL) []*http.Cookie { return j.jar.Cookies(u) }

// jarOf is client idx's jar, made when first asked for.
func (f *Fleet) jarOf(idx int) *cookieJar {
	if j, ok := f.jars.Load(idx); ok {
		return j.(*cookieJar)
	}
	j, _ := f.jars.LoadOrStore(idx, newCookieJar())
	f.jarsMade.Store(true)
	return j.(*cookieJar)
}

// jarIfAny is client idx's jar, nil when it has made no step yet (a
// fleet whose clients make none looks nothing up).
func (f *Fleet) jarIfAny(idx int) *cookieJar {
	if !f.jarsMade.Load() {
		return nil
	}
	if j, ok := f.jars.Load(idx); ok {
		return j.(*cookieJar)
	}
	return nil
}

// names are the names of the cookies the jar holds for u.
func (j *cookieJar) names(u *url.URL) []string {
	var names []string
	for _, c := range j.jar.Cookies(u) {
		names = append(names, c.Name)
	}
	return names
}

// withCookies is the upgrade request req to addr ("" for the target)
// carrying the jar's cookies for its URL in place of recorded ones.
func (c *client) withCookies(req []byte, addr string, jar *cookieJar) []byte {
	if addr == "" {
		addr = c.f.target
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "" { // ":port": the target's host (a lobby that answered a port)
		if host, _, err = net.SplitHostPort(c.f.target); err != nil {
			host = c.f.target
		}
	}
	scheme := "http"
	if c.f.tlsCfg != nil {
		scheme = "https"
	}
	target := []byte("/")
	if line, _, ok := bytes.Cut(req, []byte("\r\n")); ok {
		if f := bytes.Fields(line); len(f) == 3 {
			target = f[1]
		}
	}
	u, err := url.Parse(scheme + "://" + host + string(target))
	if err != nil {
		return req
	}
	cookies := jar.Cookies(u)
	pairs := make([]string, len(cookies))
	for i, k := range cookies {
		pairs[i] = k.Name + "=" + k.Value
	}
	return profile.WithCookies(req, pairs)
}
