package capture

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// KeyLog holds TLS secrets from an SSLKEYLOGFILE (RFC 9850's format, the
// one Chromium, Firefox, OpenSSL, NSS, node and Go's KeyLogWriter write),
// by the client random of the connection they belong to. A capture reader
// with a KeyLog decrypts the TLS flows it has secrets for.
type KeyLog struct {
	secrets map[[32]byte]*tlsSecrets
}

// tlsSecrets are one connection's secrets as a key log gives them.
type tlsSecrets struct {
	master     []byte // TLS 1.2: CLIENT_RANDOM
	clientHS   []byte // TLS 1.3: CLIENT_HANDSHAKE_TRAFFIC_SECRET
	serverHS   []byte // SERVER_HANDSHAKE_TRAFFIC_SECRET
	clientApp0 []byte // CLIENT_TRAFFIC_SECRET_0
	serverApp0 []byte // SERVER_TRAFFIC_SECRET_0
}

// maxKeyLogLine caps a key log line: a label, 64 hex digits of client
// random and at most 96 of secret (SHA-384), with room to spare.
const maxKeyLogLine = 1024

// maxKeyLogSecrets caps the connections one key log may describe, so a
// huge file is refused instead of filling memory.
const maxKeyLogSecrets = 1 << 20

// ReadKeyLog reads a key log file.
func ReadKeyLog(path string) (*KeyLog, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tls key log: %w", err)
	}
	defer f.Close()
	k, err := ParseKeyLog(f)
	if err != nil {
		return nil, fmt.Errorf("tls key log %s: %w", path, err)
	}
	return k, nil
}

// ParseKeyLog reads key log lines: "LABEL <client random hex> <secret
// hex>", with blank lines and # comments skipped. Labels it has no use
// for (exporter and early secrets) are skipped; a line that is not of
// this form is an error naming it, and so is a log with no secret at all.
func ParseKeyLog(r io.Reader) (*KeyLog, error) {
	k := &KeyLog{secrets: map[[32]byte]*tlsSecrets{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 512), maxKeyLogLine)
	n := 0
	for sc.Scan() {
		n++
		if err := k.addLine(sc.Bytes()); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes: not a key log", n+1, maxKeyLogLine)
		}
		return nil, err
	}
	if len(k.secrets) == 0 {
		return nil, errors.New("no TLS secrets in it (want lines such as CLIENT_RANDOM or CLIENT_TRAFFIC_SECRET_0)")
	}
	return k, nil
}

func (k *KeyLog) addLine(line []byte) error {
	line = bytes.TrimSpace(line)
	if len(line) == 0 || line[0] == '#' {
		return nil
	}
	f := strings.Fields(string(line))
	if len(f) != 3 {
		return fmt.Errorf("want LABEL CLIENT_RANDOM SECRET, got %d fields", len(f))
	}
	random, err := hex.DecodeString(f[1])
	if err != nil || len(random) != 32 {
		return fmt.Errorf("%s: client random %.20q is not 64 hex digits", f[0], f[1])
	}
	secret, err := hex.DecodeString(f[2])
	if err != nil || len(secret) < 32 || len(secret) > 64 {
		return fmt.Errorf("%s: secret is not 64 to 128 hex digits", f[0])
	}
	var slot *[]byte
	s := k.secrets[[32]byte(random)]
	if s == nil {
		s = &tlsSecrets{}
	}
	switch f[0] {
	case "CLIENT_RANDOM":
		if len(secret) != 48 {
			return fmt.Errorf("CLIENT_RANDOM: master secret of %d bytes, want 48", len(secret))
		}
		slot = &s.master
	case "CLIENT_HANDSHAKE_TRAFFIC_SECRET":
		slot = &s.clientHS
	case "SERVER_HANDSHAKE_TRAFFIC_SECRET":
		slot = &s.serverHS
	case "CLIENT_TRAFFIC_SECRET_0":
		slot = &s.clientApp0
	case "SERVER_TRAFFIC_SECRET_0":
		slot = &s.serverApp0
	case "EXPORTER_SECRET", "EARLY_EXPORTER_SECRET", "CLIENT_EARLY_TRAFFIC_SECRET", "EARLY_EXPORTER_MASTER_SECRET":
		return nil
	default:
		if strings.HasPrefix(f[0], "RSA") || strings.HasPrefix(f[0], "CLIENT_") || strings.HasPrefix(f[0], "SERVER_") {
			return nil // other NSS labels: nothing we decrypt with
		}
		return fmt.Errorf("unknown label %.40q", f[0])
	}
	if len(k.secrets) >= maxKeyLogSecrets && k.secrets[[32]byte(random)] == nil {
		return fmt.Errorf("more than %d connections: key log too large", maxKeyLogSecrets)
	}
	*slot = secret
	k.secrets[[32]byte(random)] = s
	return nil
}

// Len is the number of connections the key log has secrets for.
func (k *KeyLog) Len() int {
	if k == nil {
		return 0
	}
	return len(k.secrets)
}

// Merge adds o's secrets to k (k's own win).
func (k *KeyLog) Merge(o *KeyLog) {
	if o == nil {
		return
	}
	for r, s := range o.secrets {
		if k.secrets[r] == nil && len(k.secrets) < maxKeyLogSecrets {
			k.secrets[r] = s
		}
	}
}

func (k *KeyLog) lookup(random [32]byte) *tlsSecrets {
	if k == nil {
		return nil
	}
	return k.secrets[random]
}
