package capture

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"fmt"
	"hash"

	"golang.org/x/crypto/chacha20poly1305"

	"github.com/reprise-harness/reprise/internal/tlsrec"
)

// suite is a cipher suite reprise can decrypt: an AEAD with its key and
// IV lengths and the hash of its key schedule.
type suite struct {
	name string
	// aead is "gcm" or "chacha".
	aead   string
	keyLen int
	hash   func() hash.Hash
	tls13  bool
}

var suites = map[uint16]suite{
	0x1301: {"TLS_AES_128_GCM_SHA256", "gcm", 16, sha256.New, true},
	0x1302: {"TLS_AES_256_GCM_SHA384", "gcm", 32, sha512.New384, true},
	0x1303: {"TLS_CHACHA20_POLY1305_SHA256", "chacha", 32, sha256.New, true},

	0xC02B: {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "gcm", 16, sha256.New, false},
	0xC02F: {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "gcm", 16, sha256.New, false},
	0xC02C: {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "gcm", 32, sha512.New384, false},
	0xC030: {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "gcm", 32, sha512.New384, false},
	0xCCA8: {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "chacha", 32, sha256.New, false},
	0xCCA9: {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "chacha", 32, sha256.New, false},
	0x009C: {"TLS_RSA_WITH_AES_128_GCM_SHA256", "gcm", 16, sha256.New, false},
	0x009D: {"TLS_RSA_WITH_AES_256_GCM_SHA384", "gcm", 32, sha512.New384, false},
	0x009E: {"TLS_DHE_RSA_WITH_AES_128_GCM_SHA256", "gcm", 16, sha256.New, false},
	0x009F: {"TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "gcm", 32, sha512.New384, false},
	0xCCAA: {"TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "chacha", 32, sha256.New, false},
}

// suiteName names a cipher suite, known to reprise or not.
func suiteName(id uint16) string {
	if s, ok := suites[id]; ok {
		return s.name
	}
	return fmt.Sprintf("cipher suite 0x%04x", id)
}

// newAEAD makes the suite's AEAD from a key.
func (s suite) newAEAD(key []byte) (cipher.AEAD, error) {
	if s.aead == "chacha" {
		return chacha20poly1305.New(key)
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// recordKeys decrypt one direction's records: the AEAD, its IV (TLS 1.3
// and ChaCha20: the whole nonce to XOR the sequence into; TLS 1.2 GCM:
// the 4-byte salt before the explicit nonce) and the sequence number.
type recordKeys struct {
	aead  cipher.AEAD
	iv    []byte
	seq   uint64
	tls13 bool
	// secret is the TLS 1.3 traffic secret, for a KeyUpdate.
	secret []byte
	suite  suite
}

// keys13 derives a TLS 1.3 direction's record keys from its traffic
// secret (RFC 8446 7.3).
func keys13(s suite, secret []byte) (*recordKeys, error) {
	key, err := tlsrec.ExpandLabel(s.hash, secret, "key", s.keyLen)
	if err != nil {
		return nil, err
	}
	iv, err := tlsrec.ExpandLabel(s.hash, secret, "iv", 12)
	if err != nil {
		return nil, err
	}
	a, err := s.newAEAD(key)
	if err != nil {
		return nil, err
	}
	return &recordKeys{aead: a, iv: iv, tls13: true, secret: secret, suite: s}, nil
}

// update is TLS 1.3's KeyUpdate: the next traffic secret and its keys.
func (k *recordKeys) update() (*recordKeys, error) {
	next, err := tlsrec.ExpandLabel(k.suite.hash, k.secret, "traffic upd", len(k.secret))
	if err != nil {
		return nil, err
	}
	return keys13(k.suite, next)
}

// prf12 is the TLS 1.2 PRF (RFC 5246 5): P_hash over HMAC.
func prf12(h func() hash.Hash, secret []byte, label string, seed []byte, n int) []byte {
	ls := append([]byte(label), seed...)
	mac := hmac.New(h, secret)
	mac.Write(ls)
	a := mac.Sum(nil)
	out := make([]byte, 0, n+mac.Size())
	for len(out) < n {
		mac.Reset()
		mac.Write(a)
		mac.Write(ls)
		out = mac.Sum(out)
		mac.Reset()
		mac.Write(a)
		a = mac.Sum(a[:0])
	}
	return out[:n]
}

// keys12 derives both directions' record keys of a TLS 1.2 AEAD suite
// from the master secret (RFC 5246 6.3; GCM RFC 5288, ChaCha20 RFC 7905).
func keys12(s suite, master []byte, clientRandom, serverRandom [32]byte) (client, server *recordKeys, err error) {
	ivLen := 4
	if s.aead == "chacha" {
		ivLen = 12
	}
	seed := append(serverRandom[:], clientRandom[:]...)
	kb := prf12(s.hash, master, "key expansion", seed, 2*s.keyLen+2*ivLen)
	ck, sk := kb[:s.keyLen], kb[s.keyLen:2*s.keyLen]
	civ, siv := kb[2*s.keyLen:2*s.keyLen+ivLen], kb[2*s.keyLen+ivLen:]
	ca, err := s.newAEAD(ck)
	if err != nil {
		return nil, nil, err
	}
	sa, err := s.newAEAD(sk)
	if err != nil {
		return nil, nil, err
	}
	return &recordKeys{aead: ca, iv: civ, suite: s}, &recordKeys{aead: sa, iv: siv, suite: s}, nil
}

// open decrypts a record's fragment (hdr is its 5-byte header) into dst
// and advances the sequence number when it succeeds. TLS 1.3 gives the
// inner plaintext with its content type still at the end.
func (k *recordKeys) open(dst, hdr, frag []byte) ([]byte, error) {
	var nonce [12]byte
	var aad []byte
	overhead := k.aead.Overhead()
	switch {
	case k.tls13:
		copy(nonce[:], k.iv)
		xorSeq(&nonce, k.seq)
		aad = hdr
	case k.suite.aead == "chacha":
		copy(nonce[:], k.iv)
		xorSeq(&nonce, k.seq)
		aad = aad12(k.seq, hdr, len(frag)-overhead)
	default: // TLS 1.2 GCM: salt, then the record's explicit nonce
		if len(frag) < 8+overhead {
			return nil, fmt.Errorf("record of %d bytes is too short for AES-GCM", len(frag))
		}
		copy(nonce[:4], k.iv)
		copy(nonce[4:], frag[:8])
		frag = frag[8:]
		aad = aad12(k.seq, hdr, len(frag)-overhead)
	}
	if len(frag) < overhead {
		return nil, fmt.Errorf("record of %d bytes is shorter than its tag", len(frag))
	}
	out, err := k.aead.Open(dst, nonce[:], frag, aad)
	if err != nil {
		return nil, err
	}
	k.seq++
	return out, nil
}

func xorSeq(nonce *[12]byte, seq uint64) {
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	for i := range s {
		nonce[4+i] ^= s[i]
	}
}

// aad12 is TLS 1.2's additional data: seq, type, version, plaintext length.
func aad12(seq uint64, hdr []byte, n int) []byte {
	aad := binary.BigEndian.AppendUint64(make([]byte, 0, 13), seq)
	aad = append(aad, hdr[0], hdr[1], hdr[2])
	return binary.BigEndian.AppendUint16(aad, uint16(max(n, 0)))
}
