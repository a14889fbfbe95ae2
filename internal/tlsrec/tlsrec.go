// Package tlsrec is the TLS 1.3 record layer (RFC 8446 §5) run from a
// direction's traffic secret: the keys (HKDF-Expand-Label), sealing and
// opening records with the suite's AEAD, sequence numbers and key
// updates. It is for a peer whose handshake crypto/tls completed and which
// carries on with the secrets the handshake logged (KeyLogWriter), so that
// it keeps a few hundred bytes per connection instead of a tls.Conn and
// opens records in place. It is not a TLS implementation: no handshake,
// no TLS 1.2, no CBC suites, no alerts beyond their bytes.
package tlsrec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"

	"golang.org/x/crypto/chacha20poly1305"
)

// Record content types (RFC 8446 §5.1).
const (
	TypeChangeCipherSpec = 20
	TypeAlert            = 21
	TypeHandshake        = 22
	TypeApplicationData  = 23
)

// HeaderLen is a record header's length; MaxPlain the most plaintext one
// record carries; MaxRecord the most bytes a TLS 1.3 record's body may
// hold (plaintext, content type, padding and tag: 2^14 + 256).
const (
	HeaderLen = 5
	MaxPlain  = 1 << 14
	MaxRecord = MaxPlain + 256
)

// Suite is a TLS 1.3 cipher suite: its AEAD and the hash of its key
// schedule.
type Suite struct {
	ID     uint16
	chacha bool
	keyLen int
	hash   func() hash.Hash
}

// Suite13 is the TLS 1.3 suite with id (tls.ConnectionState's
// CipherSuite); false for one that is not a TLS 1.3 suite.
func Suite13(id uint16) (Suite, bool) {
	switch id {
	case 0x1301: // TLS_AES_128_GCM_SHA256
		return Suite{id, false, 16, sha256.New}, true
	case 0x1302: // TLS_AES_256_GCM_SHA384
		return Suite{id, false, 32, sha512.New384}, true
	case 0x1303: // TLS_CHACHA20_POLY1305_SHA256
		return Suite{id, true, 32, sha256.New}, true
	}
	return Suite{}, false
}

// ExpandLabel is HKDF-Expand-Label (RFC 8446 §7.1) with an empty context.
func ExpandLabel(h func() hash.Hash, secret []byte, label string, n int) ([]byte, error) {
	full := "tls13 " + label
	info := make([]byte, 0, 4+len(full))
	info = binary.BigEndian.AppendUint16(info, uint16(n))
	info = append(info, byte(len(full)))
	info = append(info, full...)
	info = append(info, 0) // context: empty
	return hkdf.Expand(h, secret, string(info), n)
}

// Half is one direction of a connection: its traffic secret's AEAD, IV
// and sequence number. It is not safe for concurrent use.
type Half struct {
	aead   cipher.AEAD
	iv     [12]byte
	seq    uint64
	secret []byte
	suite  Suite
}

// NewHalf derives a direction's record keys from its traffic secret
// (RFC 8446 §7.3), at sequence number 0.
func NewHalf(s Suite, secret []byte) (*Half, error) {
	key, err := ExpandLabel(s.hash, secret, "key", s.keyLen)
	if err != nil {
		return nil, err
	}
	iv, err := ExpandLabel(s.hash, secret, "iv", 12)
	if err != nil {
		return nil, err
	}
	var a cipher.AEAD
	if s.chacha {
		a, err = chacha20poly1305.New(key)
	} else {
		var b cipher.Block
		if b, err = aes.NewCipher(key); err == nil {
			a, err = cipher.NewGCM(b)
		}
	}
	if err != nil {
		return nil, err
	}
	h := &Half{aead: a, secret: secret, suite: s}
	copy(h.iv[:], iv)
	return h, nil
}

// Seq is the sequence number of the next record; SetSeq sets it.
func (h *Half) Seq() uint64       { return h.seq }
func (h *Half) SetSeq(seq uint64) { h.seq = seq }

// Update moves to the next traffic secret (a KeyUpdate, RFC 8446 §7.2),
// at sequence number 0.
func (h *Half) Update() error {
	next, err := ExpandLabel(h.suite.hash, h.secret, "traffic upd", len(h.secret))
	if err != nil {
		return err
	}
	n, err := NewHalf(h.suite, next)
	if err != nil {
		return err
	}
	*h = *n
	return nil
}

func (h *Half) nonce(seq uint64) [12]byte {
	n := h.iv
	for i := range 8 {
		n[4+i] ^= byte(seq >> (56 - 8*i))
	}
	return n
}

// ErrOpen is a record that does not open under the keys: a wrong key or
// sequence number, or bytes changed on the way.
var ErrOpen = errors.New("record does not open (bad record MAC)")

// Open decrypts rec (one whole record: header and body) in place and
// returns its inner content type and plaintext (a part of rec), padding
// removed; the sequence number moves on when it opened.
func (h *Half) Open(rec []byte) (byte, []byte, error) {
	typ, plain, err := h.open(rec[HeaderLen:HeaderLen], rec, h.seq)
	if err == nil {
		h.seq++
	}
	return typ, plain, err
}

// Try says whether rec opens at sequence number seq, decrypting into
// scratch (rec is left as it was; nothing moves on), and returns its
// inner type and plaintext (in scratch).
func (h *Half) Try(scratch, rec []byte, seq uint64) (byte, []byte, bool) {
	typ, plain, err := h.open(scratch[:0], rec, seq)
	return typ, plain, err == nil
}

func (h *Half) open(dst, rec []byte, seq uint64) (byte, []byte, error) {
	if len(rec) < HeaderLen+h.aead.Overhead()+1 {
		return 0, nil, fmt.Errorf("record of %d bytes is shorter than its tag", len(rec))
	}
	if rec[0] != TypeApplicationData {
		return 0, nil, fmt.Errorf("record of type %d after the handshake: TLS 1.3 protects every record as application data", rec[0])
	}
	n := h.nonce(seq)
	plain, err := h.aead.Open(dst, n[:], rec[HeaderLen:], rec[:HeaderLen])
	if err != nil {
		return 0, nil, ErrOpen
	}
	// The inner type is the last byte that is not padding (zeros).
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		return 0, nil, errors.New("record holds padding only (no content type)")
	}
	return plain[i], plain[:i], nil
}

// Seal appends plain to dst as records of type typ (as many as it takes,
// at most MaxPlain plaintext bytes each) and returns the extended slice.
func (h *Half) Seal(dst []byte, typ byte, plain []byte) []byte {
	for {
		n := min(len(plain), MaxPlain)
		dst = h.seal(dst, typ, plain[:n])
		plain = plain[n:]
		if len(plain) == 0 {
			return dst
		}
	}
}

func (h *Half) seal(dst []byte, typ byte, plain []byte) []byte {
	clen := len(plain) + 1 + h.aead.Overhead()
	start := len(dst)
	dst = slices.Grow(dst, HeaderLen+clen)
	hdr := [HeaderLen]byte{TypeApplicationData, 3, 3, byte(clen >> 8), byte(clen)}
	dst = append(dst, hdr[:]...)
	dst = append(dst, plain...)
	dst = append(dst, typ)
	body := dst[start+HeaderLen:]
	n := h.nonce(h.seq)
	h.seq++
	// Sealed in place: dst has room for the tag.
	sealed := h.aead.Seal(body[:0], n[:], body, hdr[:])
	return dst[:start+HeaderLen+len(sealed)]
}
