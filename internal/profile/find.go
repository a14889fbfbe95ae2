package profile

import "bytes"

// A finder looks for one fixed text in messages, as bytes.Index does,
// but scans for the text's rarest byte rather than its first. Protocol
// texts begin with their commonest bytes ('"type":"joined"', '"ts"': a
// JSON message has a quote every few bytes), and bytes.Index stops at
// each of those: at about 100 ns, the kinds' match of a 200-byte
// WebSocket message was the most of the profile's work on it (issue 34).
// The rarest byte of '"type":"joined"' is its j, which such a message
// mostly has not got, and one vectorised scan says so.
type finder struct {
	text []byte
	at   int // the index in text of the byte scanned for
}

func newFinder(text []byte) finder {
	at := 0
	for i, c := range text {
		if commonness(c) < commonness(text[at]) {
			at = i
		}
	}
	return finder{text: text, at: at}
}

// index is the index of the first instance of the text in s, -1 when
// none (bytes.Index's answer).
func (f *finder) index(s []byte) int {
	n := len(f.text)
	if n <= 1 || len(s) < n {
		return bytes.Index(s, f.text)
	}
	c, end := f.text[f.at], len(s)-(n-1-f.at) // the scanned byte's last place
	misses := 0
	for i := f.at; i < end; {
		j := bytes.IndexByte(s[i:end], c)
		if j < 0 {
			return -1
		}
		start := i + j - f.at
		if bytes.Equal(s[start:start+n], f.text) {
			return start
		}
		i += j + 1
		// A message full of the scanned byte: bytes.Index's own
		// search bounds the rest, whatever the input.
		if misses++; misses > 8+i>>4 {
			if k := bytes.Index(s[i-f.at:], f.text); k >= 0 {
				return i - f.at + k
			}
			return -1
		}
	}
	return -1
}

// commonness ranks a byte by how often it comes in the messages of text
// and binary protocols (JSON, line protocols, length-prefixed binary):
// higher is commoner. A rough order is enough, it only picks which byte
// to scan for.
func commonness(c byte) int {
	switch {
	case c == 0 || c == ' ' || c == '"' || c == ':' || c == ',':
		return 9
	case c == 'e' || c == 't' || c == 'a' || c == 'o' || c == 'i' || c == 'n' || c == 's' || c == 'r':
		return 8
	case c >= '0' && c <= '9', c == 1, c == 0xff:
		return 7
	case c == 'h' || c == 'l' || c == 'd' || c == 'c' || c == 'u' || c == 'm',
		c == '{' || c == '}' || c == '[' || c == ']' || c == '\n' || c == '\r' || c == '\t',
		c == '=' || c == '&' || c == '/' || c == '.' || c == '-' || c == '_':
		return 6
	case c == 'f' || c == 'p' || c == 'g' || c == 'w' || c == 'y' || c == 'b' || c == 'v' || c == 'k':
		return 5
	case c < 0x20, c >= 'A' && c <= 'Z':
		return 4
	case c >= 'a' && c <= 'z':
		return 3
	}
	return 2
}
