package profile

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// Payload encodings: where a replaced value (a user id, a room, a
// server-issued id) sits in a string of an encoded payload, a value of
// another length changes the string's length prefix, and in protobuf the
// length of every message that encloses it. identity.encoding says how
// a profile's client messages are encoded; rewriting then walks each
// message, replaces inside its strings and writes their prefixes anew.
// A message that does not parse as its encoding is rewritten as bytes.

// payloadEncoding is how a profile's client messages encode strings.
type payloadEncoding int

// Payload encodings.
const (
	encodingBytes    payloadEncoding = iota // no length prefix of its own (text, or a framing's only)
	encodingJSON                            // JSON: a replaced value is escaped for a string
	encodingMsgpack                         // msgpack: str headers rewritten (socket.io-msgpack-parser, Colyseus)
	encodingProtobuf                        // protobuf: length-delimited fields rewritten, nested ones too
)

var payloadEncodings = []string{"", "json", "msgpack", "protobuf"}

func (e payloadEncoding) String() string {
	if e == encodingBytes {
		return "bytes"
	}
	return payloadEncodings[e]
}

// parsePayloadEncoding reads identity.encoding.
func parsePayloadEncoding(s string) (payloadEncoding, bool) {
	for i, n := range payloadEncodings {
		if s == n {
			return payloadEncoding(i), true
		}
	}
	return 0, false
}

// errEncoding is a payload that is not what its encoding says.
var errEncoding = errors.New("not of the encoding")

// maxEncodingDepth bounds the nesting walked.
const maxEncodingDepth = 32

// replace is m with subs replaced inside its strings and their prefixes
// fixed up; ok is false when m does not parse as e (nothing replaced).
func (e payloadEncoding) replace(m []byte, subs []sub) ([]byte, bool) {
	switch e {
	case encodingJSON:
		return replaceAll(m, jsonSubs(subs)), true
	case encodingMsgpack:
		out := make([]byte, 0, len(m)+16)
		for rest := m; len(rest) > 0; {
			var err error
			if out, rest, err = msgpackReplace(out, rest, subs, 0); err != nil {
				return nil, false
			}
		}
		return out, true
	case encodingProtobuf:
		out, err := protobufReplace(make([]byte, 0, len(m)+16), m, subs, 0)
		return out, err == nil
	}
	return replaceAll(m, subs), true
}

// jsonSubs are subs with each new value escaped for a JSON string.
func jsonSubs(subs []sub) []sub {
	out := make([]sub, len(subs))
	for i, s := range subs {
		b, _ := json.Marshal(string(s.new))
		out[i] = sub{old: s.old, new: b[1 : len(b)-1]}
	}
	return out
}

// replaceIn replaces subs in a string's content, nil when none is in it.
func replaceIn(b []byte, subs []sub) []byte {
	for _, s := range subs {
		if len(s.old) > 0 && bytes.Contains(b, s.old) {
			return replaceAll(b, subs)
		}
	}
	return nil
}

// msgpackReplace appends the msgpack object at the start of m to dst,
// its strings (map keys too) with subs replaced and their headers
// rewritten; it returns the bytes after the object.
func msgpackReplace(dst, m []byte, subs []sub, depth int) ([]byte, []byte, error) {
	if len(m) == 0 || depth > maxEncodingDepth {
		return nil, nil, errEncoding
	}
	b := m[0]
	var n, hdr int // n: a string's length, or the elements of a container
	switch {
	case b <= 0x7f, b >= 0xe0, b == 0xc0, b == 0xc2, b == 0xc3:
		return append(dst, b), m[1:], nil
	case b >= 0x80 && b <= 0x8f:
		return msgpackItems(append(dst, b), m[1:], 2*int(b&0x0f), subs, depth)
	case b >= 0x90 && b <= 0x9f:
		return msgpackItems(append(dst, b), m[1:], int(b&0x0f), subs, depth)
	case b >= 0xa0 && b <= 0xbf:
		n, hdr = int(b&0x1f), 1
	case b == 0xd9, b == 0xda, b == 0xdb:
		size := 1 << (b - 0xd9) // 1, 2, 4
		v, ok := beUint(m[1:], size)
		if !ok {
			return nil, nil, errEncoding
		}
		n, hdr = int(v), 1+size
	case b == 0xdc, b == 0xdd, b == 0xde, b == 0xdf:
		size := 2 << ((b - 0xdc) & 1) // 2, 4
		v, ok := beUint(m[1:], size)
		if !ok || v > uint64(len(m)) {
			return nil, nil, errEncoding
		}
		items := int(v)
		if b >= 0xde {
			items *= 2
		}
		return msgpackItems(append(dst, m[:1+size]...), m[1+size:], items, subs, depth)
	default:
		skip, ok := msgpackOpaque(m)
		if !ok || skip > len(m) {
			return nil, nil, errEncoding
		}
		return append(dst, m[:skip]...), m[skip:], nil
	}
	if n < 0 || hdr+n > len(m) || hdr+n < hdr {
		return nil, nil, errEncoding
	}
	s := m[hdr : hdr+n]
	r := replaceIn(s, subs)
	if r == nil {
		return append(dst, m[:hdr+n]...), m[hdr+n:], nil
	}
	return append(appendMsgpackStrHeader(dst, len(r)), r...), m[hdr+n:], nil
}

// msgpackItems walks n objects of a container.
func msgpackItems(dst, m []byte, n int, subs []sub, depth int) ([]byte, []byte, error) {
	if n > len(m) { // each object takes a byte at least
		return nil, nil, errEncoding
	}
	var err error
	for range n {
		if dst, m, err = msgpackReplace(dst, m, subs, depth+1); err != nil {
			return nil, nil, err
		}
	}
	return dst, m, nil
}

// msgpackOpaque is the size of a number, bin or ext object at m[0]
// (copied as it is).
func msgpackOpaque(m []byte) (int, bool) {
	switch b := m[0]; b {
	case 0xcc, 0xd0:
		return 2, true
	case 0xcd, 0xd1:
		return 3, true
	case 0xca, 0xce, 0xd2:
		return 5, true
	case 0xcb, 0xcf, 0xd3:
		return 9, true
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16 and a type byte
		return 2 + 1<<(b-0xd4), true
	case 0xc4, 0xc5, 0xc6: // bin 8, 16, 32
		size := 1 << (b - 0xc4)
		v, ok := beUint(m[1:], size)
		return 1 + size + int(v), ok && v <= uint64(len(m))
	case 0xc7, 0xc8, 0xc9: // ext 8, 16, 32 and a type byte
		size := 1 << (b - 0xc7)
		v, ok := beUint(m[1:], size)
		return 2 + size + int(v), ok && v <= uint64(len(m))
	}
	return 0, false // 0xc1: never used
}

// appendMsgpackStrHeader is the shortest str header for n bytes.
func appendMsgpackStrHeader(dst []byte, n int) []byte {
	switch {
	case n < 32:
		return append(dst, 0xa0|byte(n))
	case n < 1<<8:
		return append(dst, 0xd9, byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(dst, 0xda), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
}

// beUint reads a size-byte big-endian unsigned integer at b.
func beUint(b []byte, size int) (uint64, bool) {
	if len(b) < size {
		return 0, false
	}
	var v uint64
	for _, c := range b[:size] {
		v = v<<8 | uint64(c)
	}
	return v, true
}

// protobufReplace appends the protobuf message m to dst with subs
// replaced in its length-delimited fields, each one's length written
// anew: a field of text (printable UTF-8: a nested message holding a
// string has a length byte under 0x20 at least) as a string, any other
// that parses as a message and took a replacement as one (an id deep in
// nested messages fixes every enclosing length), else as bytes.
func protobufReplace(dst, m []byte, subs []sub, depth int) ([]byte, error) {
	if depth > maxEncodingDepth {
		return nil, errEncoding
	}
	for len(m) > 0 {
		key, n := binary.Uvarint(m)
		if n <= 0 || key>>3 == 0 {
			return nil, errEncoding
		}
		start := m
		m = m[n:]
		var size int
		switch key & 7 {
		case 0:
			if _, k := binary.Uvarint(m); k <= 0 {
				return nil, errEncoding
			} else {
				size = k
			}
		case 1:
			size = 8
		case 5:
			size = 4
		case 2:
			l, k := binary.Uvarint(m)
			if k <= 0 || l > uint64(len(m)-k) {
				return nil, errEncoding
			}
			body := m[k : k+int(l)]
			r := replaceIn(body, subs)
			if r == nil {
				dst = append(dst, start[:n+k+int(l)]...)
				m = m[k+int(l):]
				continue
			}
			if !isText(body) {
				if nested, err := protobufReplace(nil, body, subs, depth+1); err == nil && !bytes.Equal(nested, body) {
					r = nested
				}
			}
			dst = binary.AppendUvarint(append(dst, start[:n]...), uint64(len(r)))
			dst = append(dst, r...)
			m = m[k+int(l):]
			continue
		default: // groups (3, 4) and 6, 7: not walked
			return nil, errEncoding
		}
		if size > len(m) {
			return nil, errEncoding
		}
		dst = append(dst, start[:n+size]...)
		m = m[size:]
	}
	return dst, nil
}

// isText reports whether b is printable UTF-8 text (tabs and line ends
// allowed).
func isText(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' || c == 0x7f {
			return false
		}
	}
	return true
}
