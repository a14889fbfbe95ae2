// Package auth signs and checks join tokens: a user id and an expiry under an
// HMAC-SHA256 of a shared secret, so only holders of the relay's
// --auth-secret can join as a given user. The layout is in docs/protocol.md.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"time"
)

// TokenSize is the size of a token: an 8-byte expiry and a 32-byte MAC.
const TokenSize = 8 + sha256.Size

// Errors Verify returns.
var (
	ErrMissing = errors.New("auth: no token")
	ErrInvalid = errors.New("auth: token invalid")
	ErrExpired = errors.New("auth: token expired")
)

// domain separates these MACs from any other use of the same secret.
const domain = "reprise-join-v1\x00"

// Sign returns a token letting user join until expiry.
func Sign(secret []byte, user string, expiry time.Time) []byte {
	return SignUntil(secret, user, uint64(max(expiry.Unix(), 0)))
}

// SignUntil returns a token letting user join until expiry, Unix seconds
// as the token carries them: any u64 (2^64−1 is "never").
func SignUntil(secret []byte, user string, expiry uint64) []byte {
	tok := binary.BigEndian.AppendUint64(make([]byte, 0, TokenSize), expiry)
	return append(tok, mac(secret, user, tok[:8])...)
}

// Verify checks that tok was signed with secret for user and has not
// expired at now.
func Verify(secret []byte, user string, tok []byte, now time.Time) error {
	if len(tok) == 0 {
		return ErrMissing
	}
	if len(tok) != TokenSize {
		return ErrInvalid
	}
	if !hmac.Equal(tok[8:], mac(secret, user, tok[:8])) {
		return ErrInvalid
	}
	// The expiry is a u64 (docs/protocol.md): compared as one, so one at
	// or past 2^63 is far in the future, not a negative time long gone.
	if uint64(max(now.Unix(), 0)) >= binary.BigEndian.Uint64(tok) {
		return ErrExpired
	}
	return nil
}

func mac(secret []byte, user string, expiry []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(domain))
	h.Write([]byte{byte(len(user))})
	h.Write([]byte(user))
	h.Write(expiry)
	return h.Sum(nil)
}
