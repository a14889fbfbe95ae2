package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// TLSInfo says a flow was TLS: what its handshake named, and whether its
// bytes in the capture are the plaintext (decrypted with a key log, or
// recorded in the clear by a TLS-terminating `record proxy`).
type TLSInfo struct {
	// Version is "TLS 1.3", "TLS 1.2", ... ("TLS" when the handshake is not
	// in the capture).
	Version string `json:"version"`
	SNI     string `json:"sni,omitempty"`
	ALPN    string `json:"alpn,omitempty"`
	Cipher  string `json:"cipher,omitempty"`
	// Plaintext says how the flow's bytes are the application's:
	// PlaintextKeyLog or PlaintextProxy; empty when they are not (no key,
	// or decryption failed: Problem says why).
	Plaintext string `json:"plaintext,omitempty"`
	Problem   string `json:"problem,omitempty"`
}

// How a TLS flow's plaintext came to be in the capture.
const (
	PlaintextKeyLog = "decrypted with a key log"
	PlaintextProxy  = "terminated by record proxy"
)

// String is "TLS 1.3 (SNI example.com, ALPN h2, TLS_AES_128_GCM_SHA256)".
func (t *TLSInfo) String() string {
	var parts []string
	if t.SNI != "" {
		parts = append(parts, "SNI "+t.SNI)
	}
	if t.ALPN != "" {
		parts = append(parts, "ALPN "+t.ALPN)
	}
	if t.Cipher != "" {
		parts = append(parts, t.Cipher)
	}
	if len(parts) == 0 {
		return t.Version
	}
	return t.Version + " (" + strings.Join(parts, ", ") + ")"
}

// Note is the line a TLS-terminating proxy writes as a pcapng comment on a
// flow's SYN, and the reader parses back (ParseTLSNote).
func (t *TLSInfo) Note() string {
	return fmt.Sprintf("%s version=%q sni=%q alpn=%q cipher=%q", tlsNotePrefix, t.Version, t.SNI, t.ALPN, t.Cipher)
}

const tlsNotePrefix = "reprise-tls:"

// ParseTLSNote reads a comment TLSInfo.Note wrote; false if it is not one.
func ParseTLSNote(s string) (*TLSInfo, bool) {
	rest, ok := strings.CutPrefix(s, tlsNotePrefix+" ")
	if !ok {
		return nil, false
	}
	t := &TLSInfo{Plaintext: PlaintextProxy}
	var err error
	for _, kv := range []struct {
		key string
		p   *string
	}{{"version", &t.Version}, {"sni", &t.SNI}, {"alpn", &t.ALPN}, {"cipher", &t.Cipher}} {
		rest, ok = strings.CutPrefix(strings.TrimLeft(rest, " "), kv.key+"=")
		if !ok {
			return nil, false
		}
		*kv.p, rest, err = cutQuoted(rest)
		if err != nil {
			return nil, false
		}
	}
	return t, true
}

// cutQuoted reads a Go-quoted string at the start of s.
func cutQuoted(s string) (string, string, error) {
	if len(s) == 0 || s[0] != '"' {
		return "", s, fmt.Errorf("no quote")
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			var out string
			_, err := fmt.Sscanf(s[:i+1], "%q", &out)
			return out, s[i+1:], err
		}
	}
	return "", s, fmt.Errorf("unterminated quote")
}

// TLS versions as the wire numbers them.
const (
	versionTLS10 = 0x0301
	versionTLS11 = 0x0302
	versionTLS12 = 0x0303
	versionTLS13 = 0x0304
)

// VersionName names a TLS wire version.
func VersionName(v uint16) string {
	switch v {
	case 0x0300:
		return "SSL 3.0"
	case versionTLS10:
		return "TLS 1.0"
	case versionTLS11:
		return "TLS 1.1"
	case versionTLS12:
		return "TLS 1.2"
	case versionTLS13:
		return "TLS 1.3"
	}
	return fmt.Sprintf("TLS version 0x%04x", v)
}

// clientHello is what reprise reads of a ClientHello.
type clientHello struct {
	random [32]byte
	sni    string
	alpn   []string
}

// serverHello is what reprise reads of a ServerHello.
type serverHello struct {
	random  [32]byte
	version uint16 // supported_versions when present, else legacy_version
	suite   uint16
	alpn    string
}

// helloRetryRandom is the random of a HelloRetryRequest (RFC 8446 4.1.3).
var helloRetryRandom = [32]byte{
	0xCF, 0x21, 0xAD, 0x74, 0xE5, 0x9A, 0x61, 0x11, 0xBE, 0x1D, 0x8C, 0x02, 0x1E, 0x65, 0xB8, 0x91,
	0xC2, 0xA2, 0x11, 0x16, 0x7A, 0xBB, 0x8C, 0x5E, 0x07, 0x9E, 0x09, 0xE2, 0xC8, 0xA8, 0x33, 0x9C,
}

// reader reads big-endian fields off a byte slice; a read past the end
// sets bad and returns zeros, so a parser checks once at the end.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n < 0 || len(r.b) < n {
		r.bad = true
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *reader) u8() int {
	b := r.bytes(1)
	if b == nil {
		return 0
	}
	return int(b[0])
}

func (r *reader) u16() int {
	b := r.bytes(2)
	if b == nil {
		return 0
	}
	return int(binary.BigEndian.Uint16(b))
}

func (r *reader) vec8() *reader  { return &reader{b: r.bytes(r.u8()), bad: r.bad} }
func (r *reader) vec16() *reader { return &reader{b: r.bytes(r.u16()), bad: r.bad} }

// Extensions reprise reads.
const (
	extServerName        = 0
	extALPN              = 16
	extSupportedVersions = 43
)

// parseClientHello reads a ClientHello body (after the 4-byte handshake
// header).
func parseClientHello(body []byte) (clientHello, error) {
	var h clientHello
	r := &reader{b: body}
	r.u16() // legacy_version
	copy(h.random[:], r.bytes(32))
	r.vec8()  // session id
	r.vec16() // cipher suites
	r.vec8()  // compression methods
	if r.bad {
		return h, fmt.Errorf("ClientHello of %d bytes cut short", len(body))
	}
	if len(r.b) == 0 {
		return h, nil // no extensions
	}
	exts := r.vec16()
	for len(exts.b) > 0 && !exts.bad {
		typ := exts.u16()
		ext := exts.vec16()
		switch typ {
		case extServerName:
			list := ext.vec16()
			for len(list.b) > 0 && !list.bad {
				kind := list.u8()
				name := list.vec16()
				if kind == 0 && !name.bad {
					h.sni = printable(name.b)
				}
			}
		case extALPN:
			list := ext.vec16()
			for len(list.b) > 0 && !list.bad {
				p := list.vec8()
				if !p.bad {
					h.alpn = append(h.alpn, printable(p.b))
				}
			}
		}
	}
	if exts.bad {
		return h, fmt.Errorf("ClientHello extensions cut short")
	}
	return h, nil
}

// parseServerHello reads a ServerHello body.
func parseServerHello(body []byte) (serverHello, error) {
	var h serverHello
	r := &reader{b: body}
	h.version = uint16(r.u16())
	copy(h.random[:], r.bytes(32))
	r.vec8() // session id
	h.suite = uint16(r.u16())
	r.u8() // compression
	if r.bad {
		return h, fmt.Errorf("ServerHello of %d bytes cut short", len(body))
	}
	if len(r.b) == 0 {
		return h, nil
	}
	exts := r.vec16()
	for len(exts.b) > 0 && !exts.bad {
		typ := exts.u16()
		ext := exts.vec16()
		switch typ {
		case extSupportedVersions:
			if v := ext.u16(); !ext.bad {
				h.version = uint16(v)
			}
		case extALPN:
			list := ext.vec16()
			if p := list.vec8(); !p.bad {
				h.alpn = printable(p.b)
			}
		}
	}
	if exts.bad {
		return h, fmt.Errorf("ServerHello extensions cut short")
	}
	return h, nil
}

// parseEncryptedExtensions reads the ALPN protocol of a TLS 1.3
// EncryptedExtensions body.
func parseEncryptedExtensions(body []byte) (string, bool) {
	r := &reader{b: body}
	exts := r.vec16()
	for len(exts.b) > 0 && !exts.bad {
		typ := exts.u16()
		ext := exts.vec16()
		if typ == extALPN {
			if p := ext.vec16().vec8(); !p.bad {
				return printable(p.b), true
			}
		}
	}
	return "", false
}

// printable keeps a name from a hostile capture readable on one line.
func printable(b []byte) string {
	const maxName = 255
	if len(b) > maxName {
		b = b[:maxName]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(string(b), "?"))
}

// ErrUndecrypted marks a capture whose TLS flows hold no plaintext.
var ErrUndecrypted = errors.New("TLS flow without its plaintext")

// Undecrypted returns an error naming the first TLS flow (flow only, or
// any with only < 0) whose application bytes the capture does not hold:
// no key log had its secrets, or decryption failed. A replay or an
// inspection of such a flow would read handshakes and ciphertext as if
// they were the protocol.
func (c *Capture) Undecrypted(only int) error {
	for i, f := range c.Flows {
		if (only >= 0 && i != only) || f.TLS == nil || f.TLS.Plaintext != "" {
			continue
		}
		switch p := f.TLS.Problem; p {
		case "", "no key log":
			return fmt.Errorf("%w: flow %d is %s: give --tls-keylog, or record through `record proxy --tls-cert …`", ErrUndecrypted, i, f.TLS)
		default:
			return fmt.Errorf("%w: flow %d is %s and cannot be read: %s", ErrUndecrypted, i, f.TLS, p)
		}
	}
	return nil
}
