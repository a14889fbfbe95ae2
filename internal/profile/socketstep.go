package profile

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Socket steps: a connection a client opens, plays and closes before
// its realtime one, for the values the server answers there (a lobby
// socket naming the game server's address and a token). The step
// upgrades, takes its header values from the upgrade's answer (a 101's
// header), sends its messages, and reads the server's messages until
// every other take has its value; the fleet then closes it and goes on to the
// next step or the connection. The recording's own lobby socket becomes
// such a step (flowgroup.go).

// compileSocket compiles a step's socket and send, every mistake at once.
func (st *httpStep) compileSocket(h HTTPStepSpec, path string, p *Profile) error {
	if !h.Socket {
		if len(h.Send) > 0 {
			return bad(path+".send", "only a socket step sends messages (socket: true); an HTTP step sends its body")
		}
		return nil
	}
	var errs specErrors
	if p.Transport != WebSocket {
		errs.add(bad(path+".socket", "a socket step is a WebSocket: only a websocket profile has them"))
	}
	if h.Body != "" {
		errs.add(bad(path+".body", "a socket step sends its messages (send), not a body"))
	}
	if st.method != "GET" {
		errs.add(bad(path+".method", "a socket step's upgrade is a GET"))
	}
	if u := h.URL; u != "" && !strings.HasPrefix(u, "/") && !strings.HasPrefix(u, "ws://") && !strings.HasPrefix(u, "wss://") {
		errs.add(bad(path+".url", "%q: a socket step's url is a path (to --target) or a ws:// or wss:// URL", u))
	}
	if len(h.Take) == 0 {
		errs.add(bad(path+".take", "a socket step is there for the values it takes: give at least one"))
	}
	if len(h.Send) > maxSocketSends {
		errs.add(bad(path+".send", "%d messages: at most %d", len(h.Send), maxSocketSends))
	}
	st.socket = true
	for j, m := range h.Send {
		t, err := parseTemplate(TemplateSpec{Text: m}, p.clientResolver)
		if err != nil {
			errs.add(bad(fmt.Sprintf("%s.send[%d]", path, j), "%v", err))
			continue
		}
		st.send = append(st.send, t)
	}
	return errs.err()
}

// SocketUpgraded takes socket step i's header values from the answer
// to its upgrade (header: the 101's header by name), as an HTTP step
// takes them from its answer, and names the first one missing ("" when
// every header take has its value; the step then reads messages for the
// rest). The fleet calls it once the upgrade is answered, before
// SocketAnswer.
func (c *client) SocketUpgraded(i int, header func(string) string) (missing string) {
	for _, t := range c.s.p.http[i].takes {
		if t.header == "" {
			continue
		}
		v := header(t.header)
		if v == "" {
			return "missing_" + t.name
		}
		cp := []byte(v)
		c.vals[t.corr].Store(&cp)
	}
	return ""
}

// maxSocketSends bounds a socket step's messages.
const maxSocketSends = 64

// SocketAnswer takes, from one message the server sent on socket step
// i, the step's values found in it, and names the first value still
// missing ("" once every take has its value: the step is done); msg nil
// takes nothing. The fleet's reader of the step calls it, before the
// client has any other reader.
func (c *client) SocketAnswer(i int, msg []byte) (missing string) {
	st := &c.s.p.http[i]
	var doc any
	decoded := false
	for _, t := range st.takes {
		if t.header != "" || c.vals[t.corr].Load() != nil {
			continue // the upgrade's answer's (SocketUpgraded), or found in an earlier message
		}
		var v []byte
		switch {
		case msg == nil:
		case t.re != nil:
			if m := t.re.FindSubmatch(msg); len(m) > 1 {
				v = m[1]
			}
		default:
			if !decoded {
				decoded = true
				if json.Unmarshal(msg, &doc) != nil {
					doc = nil
				}
			}
			v, _ = jsonAt(doc, t.path)
		}
		if len(v) > 0 {
			cp := append([]byte(nil), v...)
			c.vals[t.corr].Store(&cp)
		}
	}
	for _, t := range st.takes {
		if c.vals[t.corr].Load() == nil {
			return "missing_" + t.name
		}
	}
	return ""
}
