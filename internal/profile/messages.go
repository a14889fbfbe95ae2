package profile

import (
	"fmt"
	"time"
)

// Segment is what one packet brought to one direction of a recorded flow:
// a TCP payload or a datagram, at its offset from the flow's start.
type Segment struct {
	Offset time.Duration
	Bytes  []byte
}

// Recording is one recorded flow, both directions, as the transport
// carried it.
type Recording struct {
	Client, Server []Segment
}

// Message is one protocol message of a recorded flow.
type Message struct {
	// Offset is the time of the segment that completed it.
	Offset time.Duration
	Bytes  []byte
	// Kind indexes the profile's client kinds (Profile.Kinds) or server
	// kinds (ServerKinds), -1 for a server message of no kind.
	Kind int
	// Text: it came in a WebSocket text frame.
	Text bool
}

// Messages is a recording cut into messages by the profile.
type Messages struct {
	Client, Server []Message
	// Upgrade is the recorded WebSocket upgrade request (websocket only);
	// WSText says the client sent text frames.
	Upgrade []byte
	WSText  bool
	// Deflate is the permessage-deflate the server's 101 accepted: the
	// messages above are the plaintext, inflated.
	Deflate Deflate
	// HTTP are the exchanges of a flow that is plain HTTP requests and
	// answers, not a WebSocket (websocket profiles): no messages.
	HTTP  []HTTPExchange
	Notes []string
	// Dropped say which recorded bytes the framing could not cut into
	// messages: a profile that drops any does not fit the flow.
	Dropped []string
}

// Messages cuts a recording into messages and names their kinds.
func (p *Profile) Messages(r Recording) Messages {
	var out Messages
	var dropped []string
	var text bool
	if p.httpFlows() {
		if out.HTTP = HTTPExchanges(r); out.HTTP != nil {
			return out
		}
	}
	if p.Transport == WebSocket {
		var err error
		if out.Deflate, err = recordedDeflate(r.Server); err != nil {
			out.Dropped = append(out.Dropped, fmt.Sprintf("server's 101: %v", err))
		}
	}
	out.Client, out.Upgrade, text, dropped = p.cut("client", r.Client, out.Deflate)
	out.WSText = text
	out.Dropped = append(out.Dropped, dropped...)
	out.Server, _, _, dropped = p.cut("server", r.Server, out.Deflate)
	out.Dropped = append(out.Dropped, dropped...)
	for i := range out.Client {
		out.Client[i].Kind = p.ClientKind(out.Client[i].Bytes)
	}
	for i := range out.Server {
		out.Server[i].Kind = p.ServerKind(out.Server[i].Bytes)
	}
	return out
}

// ClientKind is the index in Kinds of a client message's kind (0: other).
// A kind matches a message with its framing's final delimiter or without
// it: a line of a delimited framing ends with one, except the last line of
// a WebSocket message or a datagram, so `^\{\}$` must match both; and a
// kind written with the delimiter (nats' `PING\r\n`) still matches.
func (p *Profile) ClientKind(b []byte) int {
	if i := matchKind(p.client, p.framer, b); i >= 0 {
		return p.Kinds.index(p.client[i].name)
	}
	return 0
}

// ServerKind is the index of a server message's kind, -1 for none
// (matched with or without the final delimiter, as ClientKind).
func (p *Profile) ServerKind(b []byte) int {
	return matchKind(p.server, p.framer, b)
}

// matchKind is the index of the first of ks that matches b as it is or,
// failing that, b without f's final delimiter; -1 for none.
func matchKind(ks []kind, f Framer, b []byte) int {
	if i := firstMatch(ks, b); i >= 0 {
		return i
	}
	if n := trailer(f, b); n > 0 {
		return firstMatch(ks, b[:len(b)-n])
	}
	return -1
}

func firstMatch(ks []kind, b []byte) int {
	for i := range ks {
		if ks[i].m.match(b) {
			return i
		}
	}
	return -1
}

// ServerKinds are the names of the server kinds.
func (p *Profile) ServerKinds() []string {
	out := make([]string, len(p.server))
	for i, k := range p.server {
		out[i] = k.name
	}
	return out
}

// KindName names a client kind index.
func (p *Profile) KindName(k int) string {
	if k >= 0 && k < len(p.Kinds) {
		return p.Kinds[k]
	}
	return "other"
}

// ServerKindName names a server kind index.
func (p *Profile) ServerKindName(k int) string {
	if k >= 0 && k < len(p.server) {
		return p.server[k].name
	}
	return "other"
}

// recordedDeflate is the permessage-deflate the recorded server's 101
// accepted (its head is at the start of the server's stream).
func recordedDeflate(segs []Segment) (Deflate, error) {
	var buf []byte
	for _, s := range segs {
		buf = append(buf, s.Bytes...)
		n, err := HTTPHead(buf, 0)
		if err != nil {
			return Deflate{}, nil // cut says why
		}
		if n > 0 {
			return AcceptedDeflate(buf[:n])
		}
	}
	return Deflate{}, nil
}

// cut cuts one direction into messages; the notes say what it dropped.
// With deflate on, compressed WebSocket messages are inflated first.
func (p *Profile) cut(dir string, segs []Segment, deflate Deflate) ([]Message, []byte, bool, []string) {
	if p.Raw && p.Transport != WebSocket {
		out := make([]Message, 0, len(segs))
		for _, s := range segs {
			out = append(out, Message{Offset: s.Offset, Bytes: s.Bytes})
		}
		return out, nil, false, nil
	}
	if p.Transport == UDP {
		var out []Message
		var notes []string
		for _, s := range segs {
			msgs, rest, err := splitUnit(p.framer, s.Bytes)
			for _, m := range msgs {
				out = append(out, Message{Offset: s.Offset, Bytes: m})
			}
			if err != nil && len(notes) < maxDropNotes {
				notes = append(notes, fmt.Sprintf("%s datagram at %v: %d bytes are not whole messages: dropped", dir, s.Offset, len(rest)))
			}
		}
		return out, nil, false, notes
	}
	st := &streamCutter{p: p, dir: dir}
	if deflate.On {
		st.ws.Deflate, st.infl = true, deflate.NewInflater(dir == "server")
	}
	for _, s := range segs {
		if !st.feed(s) {
			break
		}
	}
	st.end()
	return st.out, st.upgrade, st.text, st.notes
}

// streamCutter cuts a TCP direction (or a WebSocket one) into messages.
type streamCutter struct {
	p       *Profile
	dir     string
	buf     []byte
	out     []Message
	upgrade []byte
	headed  bool
	ws      WSReader
	infl    *Inflater // permessage-deflate's, when negotiated
	plain   []byte
	notes   []string
	failed  bool
	text    bool // the first data message was a text frame
	curText bool // the message being cut came in a text frame
	data    bool
}

func (c *streamCutter) feed(s Segment) bool {
	if c.p.Transport != WebSocket {
		return c.frame(s.Bytes, s.Offset)
	}
	if !c.headed {
		c.buf = append(c.buf, s.Bytes...)
		n, err := HTTPHead(c.buf, 0)
		if err != nil {
			c.note("%s stream: %v", c.dir, err)
			return false
		}
		if n == 0 {
			return true
		}
		c.headed = true
		c.upgrade = append([]byte(nil), c.buf[:n]...)
		rest := c.buf[n:]
		c.buf = nil
		if len(rest) == 0 {
			return true
		}
		s.Bytes = rest
	}
	c.ws.Max = c.p.frame.Max
	err := c.ws.Feed(s.Bytes, func(m WSMessage) error {
		if m.Opcode >= 0x8 {
			return nil
		}
		if !c.data {
			c.data, c.text = true, m.Opcode == WSText
		}
		c.curText = m.Opcode == WSText
		if m.Compressed {
			var err error
			if c.plain, err = c.infl.Inflate(c.plain[:0], m.Payload, c.p.frame.Max); err != nil {
				return err
			}
			m.Payload = c.plain
		}
		if !c.frame(m.Payload, s.Offset) {
			return errStop
		}
		return nil
	})
	if err != nil && err != errStop {
		c.note("%s stream at %v: %v: the rest is skipped", c.dir, s.Offset, err)
		return false
	}
	return err == nil
}

var errStop = fmt.Errorf("stop")

// maxDropNotes bounds the notes on dropped bytes of one direction.
const maxDropNotes = 8

// unit reports whether each transport message (a WebSocket message, a
// datagram) holds whole messages only, which end with it.
func (p *Profile) unit() bool {
	return p.Transport == UDP || (p.Transport == WebSocket && !p.frame.Span)
}

// splitUnit cuts one WebSocket message or datagram into messages; rest is
// what could not be cut, with the error.
func splitUnit(f Framer, b []byte) (msgs [][]byte, rest []byte, err error) {
	msgs, rest, err = Split(f, b)
	if err != nil {
		return msgs, rest, err
	}
	last, err := endUnit(f, rest)
	if err != nil {
		return msgs, rest, err
	}
	if last != nil {
		msgs = append(msgs, last)
	}
	return msgs, nil, nil
}

// frame adds stream bytes (or one WebSocket message) and emits the whole
// messages.
func (c *streamCutter) frame(b []byte, at time.Duration) bool {
	if c.p.Raw {
		c.out = append(c.out, Message{Offset: at, Bytes: append([]byte(nil), b...)})
		return true
	}
	if c.p.unit() {
		msgs, rest, err := splitUnit(c.p.framer, b)
		for _, m := range msgs {
			c.out = append(c.out, Message{Offset: at, Bytes: append([]byte(nil), m...), Text: c.curText})
		}
		if err != nil {
			c.note("%s WebSocket message at %v: %d bytes are not whole messages: dropped", c.dir, at, len(rest))
		}
		return true
	}
	c.buf = append(c.buf, b...)
	msgs, rest, err := Split(c.p.framer, c.buf)
	for _, m := range msgs {
		c.out = append(c.out, Message{Offset: at, Bytes: append([]byte(nil), m...), Text: c.curText})
	}
	c.buf = append(c.buf[:0], rest...)
	if err != nil {
		c.note("%s stream at %v: %v: the rest is skipped", c.dir, at, err)
		c.failed = true
		return false
	}
	return true
}

func (c *streamCutter) end() {
	if !c.failed && len(c.buf) > 0 && c.headed == (c.p.Transport == WebSocket) {
		c.note("%s stream ends inside a message (%d bytes): dropped", c.dir, len(c.buf))
	}
}

func (c *streamCutter) note(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
	if len(c.notes) > maxDropNotes {
		c.notes = append(c.notes[:maxDropNotes-1], "and more")
	}
}
