package profile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"strconv"
)

// Framer cuts a byte stream into messages. Next returns the length of
// the whole message at the start of b, 0 when b holds only part of one
// (more bytes are needed), or an error when b does not start with a
// message of this framing. Next keeps no state: a caller feeding a stream
// keeps the unframed bytes and calls it again when more arrive.
type Framer interface {
	Next(b []byte) (int, error)
}

// ErrFraming marks bytes that are not a message of the framing.
var ErrFraming = errors.New("not a message")

func framingErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFraming, fmt.Sprintf(format, args...))
}

// DefaultMaxMessage caps a message's length unless a profile says
// otherwise: a length field is checked before anything is buffered.
const DefaultMaxMessage = 1 << 20

// LengthField frames messages by a length field: Size bytes (1, 2, 4 or
// 8) at Offset, big or little endian. The message is Offset+Size+value
// bytes long when CountsWhole is false (the field counts the bytes after
// it), value bytes when it is true; Adjust is added either way (a field
// that counts a header it does not sit in, or a trailer).
type LengthField struct {
	Offset      int
	Size        int
	LittleEnd   bool
	CountsWhole bool
	Adjust      int
	Max         int
}

// Next implements Framer.
func (l LengthField) Next(b []byte) (int, error) {
	end := l.Offset + l.Size
	if len(b) < end {
		return 0, nil
	}
	v, err := readUint(b[l.Offset:end], l.LittleEnd)
	if err != nil {
		return 0, err
	}
	n := int64(l.Adjust)
	if !l.CountsWhole {
		n += int64(end)
	}
	if v > uint64(maxOr(l.Max, DefaultMaxMessage)) {
		return 0, framingErr("length field %d over the maximum %d", v, maxOr(l.Max, DefaultMaxMessage))
	}
	n += int64(v)
	switch {
	case n < int64(end):
		return 0, framingErr("length %d is shorter than the length field's end %d", n, end)
	case n > int64(maxOr(l.Max, DefaultMaxMessage)):
		return 0, framingErr("message of %d bytes over the maximum %d", n, maxOr(l.Max, DefaultMaxMessage))
	case int64(len(b)) < n:
		return 0, nil
	}
	return int(n), nil
}

func maxOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func readUint(b []byte, little bool) (uint64, error) {
	var o binary.ByteOrder = binary.BigEndian
	if little {
		o = binary.LittleEndian
	}
	switch len(b) {
	case 1:
		return uint64(b[0]), nil
	case 2:
		return uint64(o.Uint16(b)), nil
	case 4:
		return uint64(o.Uint32(b)), nil
	case 8:
		return o.Uint64(b), nil
	}
	return 0, fmt.Errorf("length field of %d bytes: want 1, 2, 4 or 8", len(b))
}

func putUint(b []byte, v uint64, little bool) {
	var o binary.ByteOrder = binary.BigEndian
	if little {
		o = binary.LittleEndian
	}
	switch len(b) {
	case 1:
		b[0] = byte(v)
	case 2:
		o.PutUint16(b, uint16(v))
	case 4:
		o.PutUint32(b, uint32(v))
	case 8:
		o.PutUint64(b, v)
	}
}

// Varint frames messages by a variable-length integer at Offset, seven
// bits a byte, least significant group first, high bit meaning more (as
// MQTT's remaining length): the value counts the bytes after it.
type Varint struct {
	Offset int
	Max    int
}

// maxVarintLen is MQTT's limit: four bytes, 256 MiB.
const maxVarintLen = 4

// Next implements Framer.
func (v Varint) Next(b []byte) (int, error) {
	val, n, err := ReadVarint(b[min(v.Offset, len(b)):])
	if err != nil || n == 0 || len(b) < v.Offset {
		return 0, err
	}
	total := v.Offset + n + val
	if total > maxOr(v.Max, DefaultMaxMessage) {
		return 0, framingErr("message of %d bytes over the maximum %d", total, maxOr(v.Max, DefaultMaxMessage))
	}
	if len(b) < total {
		return 0, nil
	}
	return total, nil
}

// ReadVarint reads a variable-length integer: its value and size, size 0
// when b ends before it does.
func ReadVarint(b []byte) (val, size int, err error) {
	mult := 1
	for i := 0; i < maxVarintLen; i++ {
		if i >= len(b) {
			return 0, 0, nil
		}
		val += int(b[i]&0x7f) * mult
		if b[i]&0x80 == 0 {
			return val, i + 1, nil
		}
		mult <<= 7
	}
	return 0, 0, framingErr("variable-length integer longer than %d bytes", maxVarintLen)
}

// AppendVarint appends v as a variable-length integer.
func AppendVarint(dst []byte, v int) []byte {
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if v > 0 {
			b |= 0x80
		}
		dst = append(dst, b)
		if v == 0 {
			return dst
		}
	}
}

// Delimiter frames text-like messages ending in Delim ("\n", "\r\n").
// With BulkPrefix set, a line that starts with it and a decimal count (as
// RESP's "$5") is followed by that many bytes and another Delim, which
// belong to the same message.
type Delimiter struct {
	Delim      []byte
	BulkPrefix []byte
	Max        int
}

// Next implements Framer.
func (d Delimiter) Next(b []byte) (int, error) {
	limit := maxOr(d.Max, DefaultMaxMessage)
	i := bytes.Index(b, d.Delim)
	if i < 0 {
		if len(b) > limit {
			return 0, framingErr("no delimiter %q in %d bytes", d.Delim, len(b))
		}
		return 0, nil
	}
	n := i + len(d.Delim)
	if len(d.BulkPrefix) == 0 || !bytes.HasPrefix(b, d.BulkPrefix) {
		return n, nil
	}
	cnt, err := strconv.Atoi(string(b[len(d.BulkPrefix):i]))
	if err != nil {
		return n, nil // not a count: a plain line
	}
	if cnt < 0 {
		return n, nil // RESP's null bulk string: no bytes follow
	}
	if cnt > limit {
		return 0, framingErr("bulk of %d bytes over the maximum %d", cnt, limit)
	}
	total := n + cnt + len(d.Delim)
	if len(b) < total {
		return 0, nil
	}
	if !bytes.Equal(b[n+cnt:total], d.Delim) {
		return 0, framingErr("bulk of %d bytes not followed by the delimiter", cnt)
	}
	return total, nil
}

// Whole is one message per unit the transport delivers: a datagram, a
// WebSocket message, or a recorded segment (raw).
type Whole struct{}

// Next implements Framer.
func (Whole) Next(b []byte) (int, error) { return len(b), nil }

// Split cuts b into whole messages with f and returns them and the bytes
// of a message not complete yet.
func Split(f Framer, b []byte) (msgs [][]byte, rest []byte, err error) {
	for len(b) > 0 {
		n, err := f.Next(b)
		if err != nil {
			return msgs, b, err
		}
		if n == 0 {
			break
		}
		msgs = append(msgs, b[:n])
		b = b[n:]
	}
	return msgs, b, nil
}

// Counted frames lines ending in Delim, where a line that Count matches
// announces a payload: its last token (or Count's group named "count",
// when it has one) is a byte count, and that many bytes and another Delim follow,
// all one message (NATS `PUB subj 52\r\n` + 52 bytes + `\r\n`, `MSG`,
// `HMSG`). A payload may hold the delimiter: it is counted, not searched.
type Counted struct {
	Delim []byte
	Count *regexp.Regexp
	Max   int
}

// Next implements Framer.
func (c Counted) Next(b []byte) (int, error) {
	limit := maxOr(c.Max, DefaultMaxMessage)
	i := bytes.Index(b, c.Delim)
	if i < 0 {
		if len(b) > limit {
			return 0, framingErr("no delimiter %q in %d bytes", c.Delim, len(b))
		}
		return 0, nil
	}
	n := i + len(c.Delim)
	cnt, _, _, ok, err := c.count(b[:i])
	switch {
	case err != nil:
		return 0, err
	case !ok:
		return n, nil
	case cnt > limit:
		return 0, framingErr("payload of %d bytes over the maximum %d", cnt, limit)
	}
	total := n + cnt + len(c.Delim)
	if len(b) < total {
		return 0, nil
	}
	if !bytes.Equal(b[n+cnt:total], c.Delim) {
		return 0, framingErr("payload of %d bytes not followed by the delimiter %q", cnt, c.Delim)
	}
	return total, nil
}

// count reads the byte count a line announces and where it sits in the
// line ([from, to)); ok false when the line announces none.
func (c Counted) count(line []byte) (n, from, to int, ok bool, err error) {
	if c.Count == nil {
		return 0, 0, 0, false, nil
	}
	if g := c.Count.SubexpIndex("count"); g > 0 {
		m := c.Count.FindSubmatchIndex(line)
		if m == nil || m[2*g] < 0 {
			return 0, 0, 0, false, nil
		}
		from, to = m[2*g], m[2*g+1]
	} else {
		if !c.Count.Match(line) {
			return 0, 0, 0, false, nil
		}
		to = len(bytes.TrimRight(line, " \t"))
		from = bytes.LastIndexAny(line[:to], " \t") + 1
	}
	tok := line[from:to]
	if len(tok) == 0 || len(tok) > 10 {
		return 0, 0, 0, false, framingErr("line %q: byte count %q is not a number", clip(line), tok)
	}
	for _, d := range tok {
		if d < '0' || d > '9' {
			return 0, 0, 0, false, framingErr("line %q: byte count %q is not a number", clip(line), tok)
		}
		n = n*10 + int(d-'0')
	}
	return n, from, to, true, nil
}

// fix rewrites the byte count of message m (a whole message of this
// framing) to its payload's length, after a rewrite changed it.
func (c Counted) fix(m []byte) []byte {
	i := bytes.Index(m, c.Delim)
	if i < 0 {
		return m
	}
	_, from, to, ok, err := c.count(m[:i])
	if !ok || err != nil {
		return m
	}
	payload := len(m) - i - 2*len(c.Delim)
	if payload < 0 {
		return m
	}
	out := make([]byte, 0, len(m)+4)
	out = append(out, m[:from]...)
	out = strconv.AppendInt(out, int64(payload), 10)
	return append(out, m[to:]...)
}

func clip(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

// delimOf is the delimiter a framing ends its messages with, nil when it
// has none.
func delimOf(f Framer) []byte {
	switch f := f.(type) {
	case Delimiter:
		return f.Delim
	case Counted:
		return f.Delim
	case RESP:
		return crlf
	}
	return nil
}

// trailer is how many bytes at m's end are the framing's final
// delimiter: stamp offsets count without them.
func trailer(f Framer, m []byte) int {
	if d := delimOf(f); d != nil && bytes.HasSuffix(m, d) {
		return len(d)
	}
	return 0
}

// endUnit takes the bytes left over at the end of a WebSocket message or
// a datagram, where no message spans into the next: a line framing's last
// line needs no delimiter, so a rest without one is a last message;
// anything else is a message cut short.
func endUnit(f Framer, rest []byte) ([]byte, error) {
	if len(rest) == 0 {
		return nil, nil
	}
	switch f.(type) {
	case Delimiter, Counted:
		if !bytes.Contains(rest, delimOf(f)) {
			return rest, nil
		}
	}
	return nil, framingErr("%d bytes at the end of a transport message are not a whole message (framing.span lets messages span them)", len(rest))
}
