package profile

import (
	"bytes"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
)

// WebSocket opcodes (RFC 6455 §5.2).
const (
	WSContinuation = 0x0
	WSText         = 0x1
	WSBinary       = 0x2
	WSClose        = 0x8
	WSPing         = 0x9
	WSPong         = 0xa
)

// WSFrame is one decoded WebSocket frame; Payload is unmasked and aliases
// the input only when it was not masked.
type WSFrame struct {
	Fin     bool
	Rsv1    bool // a compressed message's first frame (permessage-deflate)
	Opcode  byte
	Payload []byte
	// Len is the frame's size on the wire.
	Len int
}

// NextWSFrame decodes the frame at the start of b: ok false when b holds
// only part of one. A masked payload is unmasked into a copy.
func NextWSFrame(b []byte, max int) (f WSFrame, ok bool, err error) {
	return nextWSFrame(b, max, false)
}

// nextWSFrame is NextWSFrame; rsv1 allows RSV1 (permessage-deflate was
// negotiated).
func nextWSFrame(b []byte, max int, rsv1 bool) (f WSFrame, ok bool, err error) {
	if len(b) < 2 {
		return f, false, nil
	}
	f.Fin = b[0]&0x80 != 0
	f.Rsv1 = b[0]&0x40 != 0
	if bad := b[0] & 0x70; bad != 0 && (!rsv1 || bad != 0x40) {
		return f, false, framingErr("WebSocket frame with reserved bits %#x (no extension was negotiated that sets them)", bad)
	}
	f.Opcode = b[0] & 0x0f
	masked := b[1]&0x80 != 0
	n, h := uint64(b[1]&0x7f), 2
	switch n {
	case 126:
		if len(b) < 4 {
			return f, false, nil
		}
		n, h = uint64(binary.BigEndian.Uint16(b[2:])), 4
	case 127:
		if len(b) < 10 {
			return f, false, nil
		}
		n, h = binary.BigEndian.Uint64(b[2:]), 10
	}
	if n > uint64(maxOr(max, DefaultMaxMessage)) {
		return f, false, framingErr("WebSocket frame of %d bytes over the maximum %d", n, maxOr(max, DefaultMaxMessage))
	}
	if f.Opcode >= 0x8 && (n > 125 || !f.Fin) {
		return f, false, framingErr("WebSocket control frame %#x of %d bytes, fin %v", f.Opcode, n, f.Fin)
	}
	var key []byte
	if masked {
		if len(b) < h+4 {
			return f, false, nil
		}
		key, h = b[h:h+4], h+4
	}
	if uint64(len(b)-h) < n {
		return f, false, nil
	}
	f.Len = h + int(n)
	f.Payload = b[h:f.Len]
	if masked {
		p := make([]byte, n)
		copy(p, f.Payload)
		maskWS(p, key)
		f.Payload = p
	}
	return f, true, nil
}

// WSReader reassembles WebSocket messages from a byte stream: data
// frames with their continuations; control frames come out on their own.
type WSReader struct {
	Max int
	// Deflate: permessage-deflate was negotiated, a message whose first
	// frame has RSV1 is compressed (WSMessage.Compressed).
	Deflate bool
	buf     []byte
	msg     []byte
	op      byte
	frag    bool
	zipped  bool
}

// WSMessage is one whole message, or a control frame. Compressed: its
// payload is permessage-deflate data (Inflater.Inflate).
type WSMessage struct {
	Opcode     byte
	Payload    []byte
	Compressed bool
}

// Feed adds stream bytes and calls fn for each message completed. The
// payload is valid only during the call.
func (r *WSReader) Feed(b []byte, fn func(WSMessage) error) error {
	r.buf = append(r.buf, b...)
	off := 0
	defer func() {
		n := copy(r.buf, r.buf[off:])
		r.buf = r.buf[:n]
	}()
	for {
		f, ok, err := nextWSFrame(r.buf[off:], r.Max, r.Deflate)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		off += f.Len
		switch {
		case f.Opcode >= 0x8:
			if f.Rsv1 {
				return framingErr("WebSocket control frame %#x with RSV1", f.Opcode)
			}
			if err := fn(WSMessage{Opcode: f.Opcode, Payload: f.Payload}); err != nil {
				return err
			}
			continue
		case f.Opcode == WSContinuation:
			if !r.frag {
				return framingErr("WebSocket continuation frame without a first fragment")
			}
			if f.Rsv1 {
				return framingErr("WebSocket continuation frame with RSV1")
			}
		default:
			if r.frag {
				return framingErr("WebSocket data frame %#x inside a fragmented message", f.Opcode)
			}
			r.op, r.msg, r.zipped = f.Opcode, r.msg[:0], f.Rsv1
		}
		if len(r.msg)+len(f.Payload) > maxOr(r.Max, DefaultMaxMessage) {
			return framingErr("WebSocket message over the maximum %d", maxOr(r.Max, DefaultMaxMessage))
		}
		if f.Fin && !r.frag {
			if err := fn(WSMessage{Opcode: f.Opcode, Payload: f.Payload, Compressed: f.Rsv1}); err != nil {
				return err
			}
			continue
		}
		r.msg = append(r.msg, f.Payload...)
		r.frag = !f.Fin
		if f.Fin {
			if err := fn(WSMessage{Opcode: r.op, Payload: r.msg, Compressed: r.zipped}); err != nil {
				return err
			}
		}
	}
}

// AppendWSFrame appends one final frame of payload with opcode op, masked
// with key when key is not nil (a client must mask every frame).
func AppendWSFrame(dst []byte, op byte, payload []byte, key []byte) []byte {
	return appendWSFrame(dst, 0x80|op, payload, key)
}

// AppendWSDeflated is AppendWSFrame for a message compressed with
// Deflate.AppendDeflated: RSV1 set.
func AppendWSDeflated(dst []byte, op byte, payload []byte, key []byte) []byte {
	return appendWSFrame(dst, 0xc0|op, payload, key)
}

func appendWSFrame(dst []byte, b0 byte, payload []byte, key []byte) []byte {
	dst = appendWSHeader(dst, b0, len(payload), key)
	start := len(dst)
	dst = append(dst, payload...)
	if key != nil {
		maskWS(dst[start:], key)
	}
	return dst
}

// FrameWS puts the message at b[start:] into one final frame with opcode
// op, masked with key when key is not nil, in place: the payload moves up
// by the header's size. It is AppendWSFrame(b[:start], op, b[start:],
// key) without the copy of the payload that needs (a sender's per-send
// allocation, issue 34).
func FrameWS(b []byte, start int, op byte, key []byte) []byte {
	n := len(b) - start
	var hdr [14]byte
	h := appendWSHeader(hdr[:0], 0x80|op, n, key)
	b = slices.Grow(b, len(h))[:len(b)+len(h)]
	copy(b[start+len(h):], b[start:start+n])
	copy(b[start:], h)
	if key != nil {
		maskWS(b[start+len(h):], key)
	}
	return b
}

// appendWSHeader appends a frame's header: its first byte b0, the payload
// length n, the masking key when there is one.
func appendWSHeader(dst []byte, b0 byte, n int, key []byte) []byte {
	dst = append(dst, b0)
	var m byte
	if key != nil {
		m = 0x80
	}
	switch {
	case n < 126:
		dst = append(dst, m|byte(n))
	case n <= 0xffff:
		dst = append(dst, m|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, m|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if key != nil {
		dst = append(dst, key[:4]...)
	}
	return dst
}

// maskWS XORs p with key (4 bytes), byte i with key[i%4], eight bytes
// at a time.
func maskWS(p, key []byte) {
	k := uint64(binary.LittleEndian.Uint32(key))
	k |= k << 32
	i := 0
	for ; i+8 <= len(p); i += 8 {
		binary.LittleEndian.PutUint64(p[i:], binary.LittleEndian.Uint64(p[i:])^k)
	}
	for ; i < len(p); i++ {
		p[i] ^= key[i&3]
	}
}

// NewWSKey returns a random 4-byte masking key.
func NewWSKey() []byte {
	k := make([]byte, 4)
	rand.Read(k)
	return k
}

// HTTPHead returns the length of an HTTP head (request or response line
// and headers, through the blank line) at the start of b, 0 when b holds
// only part of it.
func HTTPHead(b []byte, max int) (int, error) {
	i := bytes.Index(b, []byte("\r\n\r\n"))
	if i < 0 {
		if len(b) > maxOr(max, 64<<10) {
			return 0, framingErr("HTTP head longer than %d bytes", maxOr(max, 64<<10))
		}
		return 0, nil
	}
	return i + 4, nil
}

// Upgrade is a recorded WebSocket upgrade request, replayed per client:
// the fleet rewrites ids in it like in any message, and a fresh
// Sec-WebSocket-Key replaces the recorded one.
type Upgrade struct {
	Request []byte
}

// ParseUpgrade checks that head is a WebSocket upgrade request.
func ParseUpgrade(head []byte) (Upgrade, error) {
	lines := bytes.Split(bytes.TrimRight(head, "\r\n"), []byte("\r\n"))
	if len(lines) == 0 || !bytes.HasPrefix(lines[0], []byte("GET ")) {
		return Upgrade{}, fmt.Errorf("websocket: the stream does not start with an HTTP GET (%q)", firstLine(head))
	}
	if headerValue(lines[1:], "Sec-WebSocket-Key") == nil {
		return Upgrade{}, fmt.Errorf("websocket: the upgrade request has no Sec-WebSocket-Key")
	}
	return Upgrade{Request: append([]byte(nil), head...)}, nil
}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 80 {
		b = b[:80]
	}
	return bytes.TrimRight(b, "\r")
}

func headerValue(lines [][]byte, name string) []byte {
	for _, l := range lines {
		k, v, ok := bytes.Cut(l, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(k), []byte(name)) {
			return bytes.TrimSpace(v)
		}
	}
	return nil
}

// WithKey returns the request with its Sec-WebSocket-Key replaced by key,
// and the Sec-WebSocket-Accept the server must answer with.
func WithKey(req []byte, key string) ([]byte, string) {
	lines := bytes.Split(req, []byte("\r\n"))
	for i, l := range lines {
		k, _, ok := bytes.Cut(l, []byte(":"))
		if ok && bytes.EqualFold(bytes.TrimSpace(k), []byte("Sec-WebSocket-Key")) {
			lines[i] = []byte("Sec-WebSocket-Key: " + key)
		}
	}
	h := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return bytes.Join(lines, []byte("\r\n")), base64.StdEncoding.EncodeToString(h[:])
}

// NewWSNonce returns a fresh Sec-WebSocket-Key.
func NewWSNonce() string {
	k := make([]byte, 16)
	rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// CheckUpgradeResponse checks the server's answer to an upgrade: a 101
// with the expected Sec-WebSocket-Accept. The error says what came back.
func CheckUpgradeResponse(head []byte, accept string) error {
	lines := bytes.Split(bytes.TrimRight(head, "\r\n"), []byte("\r\n"))
	status := bytes.Fields(lines[0])
	if len(status) < 2 || !bytes.HasPrefix(status[0], []byte("HTTP/")) {
		return fmt.Errorf("websocket: not an HTTP response: %q", firstLine(head))
	}
	if string(status[1]) != "101" {
		return &UpgradeRefused{Status: string(status[1])}
	}
	if got := headerValue(lines[1:], "Sec-WebSocket-Accept"); string(got) != accept {
		return fmt.Errorf("websocket: Sec-WebSocket-Accept %q, want %q", got, accept)
	}
	return nil
}

// UpgradeRefused is an upgrade answered with another status than 101.
type UpgradeRefused struct{ Status string }

func (e *UpgradeRefused) Error() string { return "websocket: upgrade refused with HTTP " + e.Status }
