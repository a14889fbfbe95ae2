package auth

import (
	"errors"
	"testing"
	"time"
)

func TestVerify(t *testing.T) {
	secret := []byte("s3cret")
	now := time.Unix(1_700_000_000, 0)
	good := Sign(secret, "alice", now.Add(time.Hour))
	forged := append([]byte(nil), good...)
	forged[20] ^= 1
	tests := []struct {
		name  string
		user  string
		token []byte
		want  error
	}{
		{"valid", "alice", good, nil},
		{"missing", "alice", nil, ErrMissing},
		{"other user", "bob", good, ErrInvalid},
		{"forged mac", "alice", forged, ErrInvalid},
		{"short", "alice", good[:10], ErrInvalid},
		{"expired", "alice", Sign(secret, "alice", now.Add(-time.Second)), ErrExpired},
		{"other secret", "alice", Sign([]byte("x"), "alice", now.Add(time.Hour)), ErrInvalid},
		{"expiry 2^64-1", "alice", SignUntil(secret, "alice", 1<<64-1), nil},
		{"expiry 2^63", "alice", SignUntil(secret, "alice", 1<<63), nil},
		{"expiry 0", "alice", SignUntil(secret, "alice", 0), ErrExpired},
		{"expiry now", "alice", SignUntil(secret, "alice", uint64(now.Unix())), ErrExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := Verify(secret, tt.user, tt.token, now); !errors.Is(err, tt.want) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
		})
	}
}
