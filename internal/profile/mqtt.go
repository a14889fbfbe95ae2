package profile

import (
	"bytes"
	"encoding/binary"
)

// mqttHooks is the MQTT profile's Go code: it knows where the client id
// and topics sit in CONNECT, PUBLISH, SUBSCRIBE and UNSUBSCRIBE, in
// versions 3.1.1 and 5 (whose packets carry properties).
type mqttHooks struct {
	v5 bool
}

// mqttPacket splits a packet into its fixed header byte and its body.
func mqttPacket(m []byte) (byte, []byte, bool) {
	if len(m) < 2 {
		return 0, nil, false
	}
	n, sz, err := ReadVarint(m[1:])
	if err != nil || sz == 0 || 1+sz+n != len(m) {
		return 0, nil, false
	}
	return m[0], m[1+sz:], true
}

// mqttString reads a 2-byte-length string at b[off:].
func mqttString(b []byte, off int) ([]byte, int, bool) {
	if off+2 > len(b) {
		return nil, 0, false
	}
	n := int(binary.BigEndian.Uint16(b[off:]))
	if off+2+n > len(b) {
		return nil, 0, false
	}
	return b[off+2 : off+2+n], off + 2 + n, true
}

// skipProps skips MQTT 5 properties at b[off:].
func skipProps(b []byte, off int) (int, bool) {
	n, sz, err := ReadVarint(b[min(off, len(b)):])
	if err != nil || sz == 0 || off+sz+n > len(b) {
		return 0, false
	}
	return off + sz + n, true
}

// field is a 2-byte-length string's place in a packet body.
type field struct{ start, end int } // the string's bytes, after its length

// fields finds the client id (CONNECT) or topics of a packet body.
func (h *mqttHooks) fields(typ byte, body []byte) []field {
	var out []field
	switch typ >> 4 {
	case 1: // CONNECT: protocol name, level, flags, keep alive, [props], client id
		_, off, ok := mqttString(body, 0)
		if !ok || off+4 > len(body) {
			return nil
		}
		v5 := body[off] == 5
		off += 4
		if v5 {
			if off, ok = skipProps(body, off); !ok {
				return nil
			}
		}
		if _, end, ok := mqttString(body, off); ok {
			out = append(out, field{off + 2, end})
		}
	case 3: // PUBLISH: topic first
		if _, end, ok := mqttString(body, 0); ok {
			out = append(out, field{2, end})
		}
	case 8, 10: // SUBSCRIBE, UNSUBSCRIBE: packet id, [props], filters
		off, ok := 2, true
		if h.v5 {
			if off, ok = skipProps(body, off); !ok {
				return nil
			}
		}
		for off < len(body) {
			_, end, ok := mqttString(body, off)
			if !ok {
				break
			}
			out = append(out, field{off + 2, end})
			off = end
			if typ>>4 == 8 {
				off++ // subscription options
			}
		}
	}
	return out
}

// recorded proposes the client id of the CONNECT as the user and the
// first topic subscribed or published to as the room.
func (h *mqttHooks) recorded(msgs []Message) (user, room []byte) {
	for _, m := range msgs {
		typ, body, ok := mqttPacket(m.Bytes)
		if !ok {
			continue
		}
		if typ>>4 == 1 {
			if _, off, ok := mqttString(body, 0); ok && off < len(body) {
				h.v5 = body[off] == 5
			}
		}
		fs := h.fields(typ, body)
		if len(fs) == 0 {
			continue
		}
		v := append([]byte(nil), body[fs[0].start:fs[0].end]...)
		switch {
		case typ>>4 == 1 && user == nil:
			user = v
			if user == nil {
				// An empty client id: the server names the client. The
				// empty field takes the client's own id (see rewrite).
				user = emptyID
			}
		case typ>>4 != 1 && room == nil && len(v) > 0:
			room = v
		}
	}
	return user, room
}

// mqttTemplated: a CONNECT differs per client even where no recorded
// value shows (an empty client id is filled in).
func mqttTemplated(b []byte) bool { return len(b) > 0 && b[0]>>4 == 1 }

// emptyID stands for a recorded empty client id.
var emptyID = []byte{}

// rewrite replaces the client id and topics equal to an old value and
// re-encodes the lengths; payloads stay as recorded.
func (h *mqttHooks) rewrite(m []byte, subs []sub) []byte {
	typ, body, ok := mqttPacket(m)
	if !ok {
		return append([]byte(nil), m...)
	}
	fs := h.fields(typ, body)
	var nb []byte
	last := 0
	for i, f := range fs {
		v := body[f.start:f.end]
		repl := v
		for _, s := range subs {
			switch {
			case bytes.Equal(v, s.old) && (len(s.old) > 0 || (typ>>4 == 1 && i == 0)):
				repl = s.new
			}
		}
		if typ>>4 == 1 && len(v) == 0 {
			for _, s := range subs {
				if len(s.old) == 0 {
					repl = s.new
				}
			}
		}
		nb = append(nb, body[last:f.start-2]...)
		nb = binary.BigEndian.AppendUint16(nb, uint16(len(repl)))
		nb = append(nb, repl...)
		last = f.end
	}
	nb = append(nb, body[last:]...)
	out := []byte{typ}
	out = AppendVarint(out, len(nb))
	return append(out, nb...)
}
