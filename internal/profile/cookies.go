package profile

import (
	"bytes"
	"strings"
)

// A client's cookie jar and a recorded request: a browser sends the
// cookies its jar holds for the URL, so a pair of a recorded Cookie header
// whose name the jar now carries is the recording's stale value (another
// session's) and is dropped, never sent beside the jar's.

// DropCookies returns the Cookie header value recorded without the pairs
// named in names.
func DropCookies(recorded string, names []string) string {
	var out []string
	for _, p := range strings.Split(recorded, ";") {
		p = strings.TrimSpace(p)
		name, _, _ := strings.Cut(p, "=")
		if p != "" && !cookieNamed(names, name) {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}

func cookieNamed(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// WithCookies puts the jar's pairs ("name=value") into the request head
// req: the recorded Cookie header keeps its other pairs, the jar's come
// after them; a request with no Cookie header gets one.
func WithCookies(req []byte, pairs []string) []byte {
	if len(pairs) == 0 {
		return req
	}
	names := make([]string, len(pairs))
	for i, p := range pairs {
		names[i], _, _ = strings.Cut(p, "=")
	}
	lines := bytes.Split(req, []byte("\r\n"))
	out := make([][]byte, 0, len(lines)+1)
	added := false
	for i, l := range lines {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if i == 0 || !ok || !bytes.EqualFold(bytes.TrimSpace(k), []byte("Cookie")) {
			out = append(out, l)
			continue
		}
		kept := DropCookies(string(v), names)
		if !added {
			kept = strings.TrimPrefix(kept+"; "+strings.Join(pairs, "; "), "; ")
			added = true
		}
		if kept != "" {
			out = append(out, []byte("Cookie: "+kept))
		}
	}
	if !added && len(out) > 0 {
		out = append(out[:1], append([][]byte{[]byte("Cookie: " + strings.Join(pairs, "; "))}, out[1:]...)...)
	}
	return bytes.Join(out, []byte("\r\n"))
}
