package profile

import "testing"

// TestKindsMatchWithoutDelimiter: a line framing's messages end with the
// delimiter except the last of a WebSocket message or datagram; a kind's
// regexp anchored at the end (`^\{\}$`, a JSON ping) matches both, so
// batched pings are not missed (11 of 100 clients were cut for it).
func TestKindsMatchWithoutDelimiter(t *testing.T) {
	p := pingPongProfile(t, "websocket", `\n`, `^\{\}$`, `^\{\}$`)
	for _, m := range []string{"{}\n", "{}"} {
		if k := p.ServerKind([]byte(m)); k != p.serverKind("ping") {
			t.Errorf("server %q: kind %d, want ping", m, k)
		}
		if k := p.ClientKind([]byte(m)); k != p.Kinds.index("pong") {
			t.Errorf("client %q: kind %d, want pong", m, k)
		}
	}
	if k := p.ServerKind([]byte("{}x\n")); k != -1 {
		t.Errorf("server %q: kind %d, want none", "{}x\n", k)
	}
}

// TestKindsWrittenWithDelimiter: a kind written with the delimiter (a
// profile from before kinds matched without it, `^PING\r\n` in nats')
// still matches the message that carries it.
func TestKindsWrittenWithDelimiter(t *testing.T) {
	p := pingPongProfile(t, "tcp", `\r\n`, `^PONG\r\n`, `^PING\r\n`)
	if k := p.ServerKind([]byte("PING\r\n")); k != p.serverKind("ping") {
		t.Errorf("server PING: kind %d, want ping", k)
	}
	if k := p.ClientKind([]byte("PONG\r\n")); k != p.Kinds.index("pong") {
		t.Errorf("client PONG: kind %d, want pong", k)
	}
}

// pingPongProfile is a profile over transport framed by delim (YAML's
// double-quoted escapes) with one client kind, pong, and one server kind,
// ping, matched by the regexps (YAML single-quoted).
func pingPongProfile(t *testing.T, transport, delim, pong, ping string) *Profile {
	t.Helper()
	return compileDoc(t, "name: x\ntransport: "+transport+"\nframing: {type: delimiter, delimiter: \""+delim+"\"}\n"+
		"kinds:\n  client:\n    - {name: pong, match: {regexp: '"+pong+"'}}\n  server:\n    - {name: ping, match: {regexp: '"+ping+"'}}\n")
}
