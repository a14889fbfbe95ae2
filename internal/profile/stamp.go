package profile

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// A latency stamp is the sender's clock (Unix ns) written into a send and
// read back from the deliveries it causes. It is written in the
// protocol's own encoding, so a text protocol stays text: 8 raw bytes
// (binary), or fixed-width ASCII (decimal, hex, base64). It goes at an
// offset of the message (counted without the framing's final delimiter),
// in a regular expression's first group, or in a JSON string field.

// stampEncoding is how a stamp is written.
type stampEncoding uint8

// Stamp encodings.
const (
	encBinary  stampEncoding = iota // 8 bytes, big-endian
	encDecimal                      // 19 decimal digits, zero padded
	encHex                          // 16 lower-case hex digits
	encBase64                       // 12 characters: the 8 bytes in standard base64, padded
)

var encodingNames = map[string]stampEncoding{"binary": encBinary, "decimal": encDecimal, "hex": encHex, "base64": encBase64}

func (e stampEncoding) String() string {
	for n, v := range encodingNames {
		if v == e {
			return n
		}
	}
	return "binary"
}

// width is the stamp's size in bytes.
func (e stampEncoding) width() int {
	switch e {
	case encDecimal:
		return 19
	case encHex:
		return 16
	case encBase64:
		return 12
	}
	return 8
}

// text reports whether the encoding writes printable ASCII only.
func (e stampEncoding) text() bool { return e != encBinary }

// put writes v into dst, which is exactly width bytes.
func (e stampEncoding) put(dst []byte, v int64) {
	switch e {
	case encBinary:
		binary.BigEndian.PutUint64(dst, uint64(v))
	case encDecimal:
		u := uint64(v)
		for i := len(dst) - 1; i >= 0; i-- {
			dst[i] = byte('0' + u%10)
			u /= 10
		}
	case encHex:
		const digits = "0123456789abcdef"
		u := uint64(v)
		for i := len(dst) - 1; i >= 0; i-- {
			dst[i] = digits[u&0xf]
			u >>= 4
		}
	case encBase64:
		var raw [8]byte
		binary.BigEndian.PutUint64(raw[:], uint64(v))
		base64.StdEncoding.Encode(dst, raw[:])
	}
}

// read decodes a stamp; false when b is not one. A decimal stamp may have
// lost its leading zeros (a server that re-encodes numbers).
func (e stampEncoding) read(b []byte) (int64, bool) {
	switch e {
	case encBinary:
		if len(b) != 8 {
			return 0, false
		}
		return int64(binary.BigEndian.Uint64(b)), true
	case encDecimal:
		return readDecimal(b)
	case encHex:
		if len(b) != 16 {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b), 16, 64)
		return int64(v), err == nil
	case encBase64:
		var raw [9]byte
		if len(b) != 12 {
			return 0, false
		}
		n, err := base64.StdEncoding.Decode(raw[:], b)
		if err != nil || n != 8 {
			return 0, false
		}
		return int64(binary.BigEndian.Uint64(raw[:8])), true
	}
	return 0, false
}

// stampRule places the latency stamp.
type stampRule struct {
	send, delivery             int // kind indexes
	sendOffset, deliveryOffset int
	enc                        stampEncoding
	re                         *regexp.Regexp // group 1 is the place
	key                        finder         // a JSON key, quoted (its text); nil text: none
	add                        bool           // put the key into a send without it
}

// place finds the stamp's place in body (a message without its final
// delimiter): [from, to). An offset place is the encoding's width; a
// regexp group or a JSON string may have any length in a recording.
func (r *stampRule) place(body []byte, off int) (from, to int, ok bool) {
	switch {
	case r.re != nil:
		m := r.re.FindSubmatchIndex(body)
		if m == nil || m[2] < 0 {
			return 0, 0, false
		}
		return m[2], m[3], true
	case r.key.text != nil:
		return jsonString(body, &r.key)
	}
	if off < 0 {
		off += len(body)
	}
	w := r.enc.width()
	return off, off + w, off >= 0 && off+w <= len(body)
}

// where says where the stamp goes, for messages.
func (r *stampRule) where(off int) string {
	switch {
	case r.re != nil:
		return fmt.Sprintf("regexp %q", r.re)
	case r.key.text != nil:
		return fmt.Sprintf("JSON field %s", r.key.text)
	}
	return fmt.Sprintf("offset %d", off)
}

// jsonString finds the first string value of key (a quoted JSON key) in
// b: the bytes between its quotes. The key is looked for with a finder,
// not bytes.Index: a JSON message has a quote every few bytes, and each
// was a false start of the key's search (issue 34).
func jsonString(b []byte, key *finder) (from, to int, ok bool) {
	for off := 0; off < len(b); {
		i := key.index(b[off:])
		if i < 0 {
			return 0, 0, false
		}
		k := skipSpace(b, off+i+len(key.text))
		off += i + 1
		if k >= len(b) || b[k] != ':' {
			continue
		}
		k = skipSpace(b, k+1)
		if k >= len(b) || b[k] != '"' {
			continue
		}
		if to, ok := jsonStringEnd(b, k+1); ok {
			return k + 1, to, true
		}
		return 0, 0, false
	}
	return 0, 0, false
}

// jsonStringEnd is the index of the quote that ends the JSON string whose
// text starts at start (a backslash escapes the byte after it); false
// when b ends first. It scans for quotes, not byte by byte: a stamp's
// string is 19 digits and most have no escapes.
func jsonStringEnd(b []byte, start int) (int, bool) {
	for j := start; j < len(b); {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return 0, false
		}
		e := bytes.IndexByte(b[j:j+q], '\\')
		if e < 0 {
			return j + q, true
		}
		j += e + 2 // past the escaped byte, which may be a quote
	}
	return 0, false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// readDecimal reads 1 to 19 decimal digits, no sign, as a non-negative
// int64: what strconv.ParseInt accepts of them, at a third of its cost
// (13 against 36 ns for 19 digits; ParseInt was about 4 % of the fleet's
// user time a WebSocket delivery, issue 34).
func readDecimal(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64 // 19 digits fit: 10^19-1 < 2^64
	for _, c := range b {
		d := c - '0'
		if d > 9 {
			return 0, false
		}
		u = u*10 + uint64(d)
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// stampBody is m without the framing's final delimiter.
func (p *Profile) stampBody(m []byte) []byte { return m[:len(m)-trailer(p.framer, m)] }

// writeStamp writes now into a send at m, when its place has the
// stamp's width (the script made room for it).
func (p *Profile) writeStamp(m []byte, now int64) {
	r := p.stamp
	body := p.stampBody(m)
	if from, to, ok := r.place(body, r.sendOffset); ok && to-from == r.enc.width() {
		r.enc.put(body[from:to], now)
	}
}

// readStamp reads a delivery's stamp.
func (p *Profile) readStamp(m []byte) (int64, bool) {
	r := p.stamp
	body := p.stampBody(m)
	from, to, ok := r.place(body, r.deliveryOffset)
	if !ok {
		return 0, false
	}
	return r.enc.read(body[from:to])
}

// makeRoom returns a recorded send with a stamp-wide place where its stamp
// goes (zeros in the encoding; lengths fixed up), or why it has none. A
// binary stamp at an offset keeps the recorded bytes, as it always did.
func (p *Profile) makeRoom(m []byte) ([]byte, error) {
	r := p.stamp
	body := p.stampBody(m)
	from, to, ok := r.place(body, r.sendOffset)
	if ok && r.enc == encBinary && r.re == nil && r.key.text == nil {
		return m, nil
	}
	if !ok && r.add {
		if i := bytes.IndexByte(body, '{'); i >= 0 {
			// "ts":"" first in the first object (a comma when it has
			// others), then room is made in it as in any send.
			field := append(append(append([]byte(nil), r.key.text...), ':', '"', '"'), ',')
			if j := skipSpace(body, i+1); j < len(body) && body[j] == '}' {
				field = field[:len(field)-1]
			}
			added := append(append(append([]byte(nil), m[:i+1]...), field...), m[i+1:]...)
			return p.makeRoom(added)
		}
	}
	if !ok {
		return m, fmt.Errorf("the stamp's place (%s, %d bytes) is not in the message (%d bytes before its delimiter)", r.where(r.sendOffset), r.enc.width(), len(body))
	}
	w := r.enc.width()
	out := make([]byte, 0, len(m)-(to-from)+w)
	out = append(out, m[:from]...)
	out = append(out, make([]byte, w)...)
	r.enc.put(out[from:from+w], 0)
	out = append(out, m[to:]...)
	if to-from != w {
		out = p.fixFraming(out)
	}
	return out, nil
}

// stampProblem says why a recorded send, stamped, would not be the
// protocol's any more: the stamp falls outside it, overwrites a
// delimiter, could hold one, or breaks UTF-8 in a text frame.
func (p *Profile) stampProblem(m []byte, wsText bool) string {
	r := p.stamp
	if r.enc == encBinary && wsText {
		return "8 raw bytes break UTF-8 in a WebSocket text frame (RFC 6455 closes the connection): give latency.encoding decimal, hex or base64"
	}
	d := delimOf(p.framer)
	out, err := p.makeRoom(m)
	if err != nil {
		return err.Error()
	}
	body := p.stampBody(out)
	from, to, _ := r.place(body, r.sendOffset)
	if r.enc == encBinary && p.searched(out, from) {
		return fmt.Sprintf("8 raw bytes at %s may hold the delimiter %q and cut the message in two: give latency.encoding decimal, hex or base64", r.where(r.sendOffset), d)
	}
	if d != nil {
		for off := 0; ; {
			i := bytes.Index(m[off:], d)
			if i < 0 {
				break
			}
			if s := off + i; s < to && s+len(d) > from && r.re == nil && r.key.text == nil {
				return fmt.Sprintf("the stamp at %s (bytes %d to %d) would overwrite the delimiter %q at byte %d", r.where(r.sendOffset), from, to, d, s)
			}
			off += i + len(d)
		}
	}
	if wsText && utf8.Valid(m) && !utf8.Valid(out) {
		return fmt.Sprintf("the stamp at %s (bytes %d to %d) splits a UTF-8 character: the text frame would be invalid", r.where(r.sendOffset), from, to)
	}
	return ""
}

// searched reports whether the framing looks for its delimiter at byte i
// of message m: a line is searched, a counted payload (RESP's bulk, a
// counted framing's) is not.
func (p *Profile) searched(m []byte, i int) bool {
	switch f := p.framer.(type) {
	case Delimiter:
		return len(f.BulkPrefix) == 0 || !bytes.HasPrefix(m, f.BulkPrefix) || i < bytes.Index(m, f.Delim)+len(f.Delim)
	case Counted:
		if n, _, _, ok, _ := f.count(m[:max(bytes.Index(m, f.Delim), 0)]); ok && n > 0 {
			return i < bytes.Index(m, f.Delim)+len(f.Delim)
		}
		return true
	}
	return false
}
