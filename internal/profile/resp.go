package profile

import (
	"bytes"
	"strconv"
)

// RESP frames Redis's serialization protocol, versions 2 and 3: one
// message is one whole value, arrays, maps, sets and pushes with all
// their elements. Inline commands (a plain line, as typed into telnet)
// are one message each.
type RESP struct {
	Max int
}

// maxRESPDepth bounds nesting, so hostile input cannot recurse deeply.
const maxRESPDepth = 32

// Next implements Framer.
func (r RESP) Next(b []byte) (int, error) {
	return r.value(b, 0)
}

func (r RESP) value(b []byte, depth int) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if depth > maxRESPDepth {
		return 0, framingErr("RESP nested deeper than %d", maxRESPDepth)
	}
	limit := maxOr(r.Max, DefaultMaxMessage)
	i := bytes.Index(b, crlf)
	if i < 0 {
		if len(b) > limit {
			return 0, framingErr("RESP line longer than %d bytes", limit)
		}
		return 0, nil
	}
	if i == 0 {
		return 2, nil // an empty inline line
	}
	line, n := b[1:i], i+2
	switch b[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return n, nil
	case '$', '!', '=':
		cnt, err := strconv.Atoi(string(line))
		if err != nil {
			return 0, framingErr("RESP bulk length %q", line)
		}
		if cnt < 0 {
			return n, nil
		}
		if cnt > limit {
			return 0, framingErr("RESP bulk of %d bytes over the maximum %d", cnt, limit)
		}
		if len(b) < n+cnt+2 {
			return 0, nil
		}
		if !bytes.Equal(b[n+cnt:n+cnt+2], crlf) {
			return 0, framingErr("RESP bulk of %d bytes not followed by CRLF", cnt)
		}
		return n + cnt + 2, nil
	case '*', '%', '~', '>', '|':
		cnt, err := strconv.Atoi(string(line))
		if err != nil {
			return 0, framingErr("RESP element count %q", line)
		}
		if b[0] == '%' || b[0] == '|' {
			cnt *= 2
		}
		if cnt > limit/3 {
			return 0, framingErr("RESP aggregate of %d elements over the maximum", cnt)
		}
		for k := 0; k < cnt; k++ {
			m, err := r.value(b[n:], depth+1)
			if err != nil || m == 0 {
				return 0, err
			}
			n += m
		}
		if b[0] == '|' { // an attribute precedes the value it describes
			m, err := r.value(b[n:], depth+1)
			if err != nil || m == 0 {
				return 0, err
			}
			n += m
		}
		return n, nil
	}
	if b[0] < ' ' && b[0] != '\t' {
		return 0, framingErr("RESP type byte %#x", b[0])
	}
	return n, nil // an inline command
}

var crlf = []byte("\r\n")

// RESPStrings returns the strings of a RESP array or push of simple and
// bulk strings (a command, a pub/sub message), or of a simple/error line,
// as one element; nil when m is something else.
func RESPStrings(m []byte) [][]byte {
	if len(m) == 0 {
		return nil
	}
	i := bytes.Index(m, crlf)
	if i < 0 {
		return nil
	}
	switch m[0] {
	case '+', '-':
		return [][]byte{m[1:i]}
	case '*', '>':
	default:
		return nil
	}
	cnt, err := strconv.Atoi(string(m[1:i]))
	if err != nil || cnt < 0 || cnt > 64 {
		return nil
	}
	out := make([][]byte, 0, cnt)
	p := i + 2
	for range cnt {
		if p >= len(m) {
			return nil
		}
		j := bytes.Index(m[p:], crlf)
		if j < 0 {
			return nil
		}
		switch m[p] {
		case '+', ':':
			out = append(out, m[p+1:p+j])
			p += j + 2
		case '$':
			n, err := strconv.Atoi(string(m[p+1 : p+j]))
			if err != nil || n < 0 || p+j+2+n > len(m) {
				return nil
			}
			out = append(out, m[p+j+2:p+j+2+n])
			p += j + 2 + n + 2
		default:
			return nil
		}
	}
	return out
}

// AppendRESPCommand appends args as a RESP array of bulk strings.
func AppendRESPCommand(dst []byte, args ...[]byte) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(len(args)), 10)
	dst = append(dst, crlf...)
	for _, a := range args {
		dst = append(dst, '$')
		dst = strconv.AppendInt(dst, int64(len(a)), 10)
		dst = append(dst, crlf...)
		dst = append(dst, a...)
		dst = append(dst, crlf...)
	}
	return dst
}
