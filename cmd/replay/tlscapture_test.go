package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tlsCapture is a reprise session recorded over TLS 1.3 (Go's
// crypto/tls, through a passthrough recording proxy), with its key log.
const (
	tlsCapture = "../../internal/capture/testdata/tls/go-tls13.pcapng"
	tlsKeys    = "../../internal/capture/testdata/tls/go-tls13.keys"
	tls12Keys  = "../../internal/capture/testdata/tls/go-tls12.keys"
)

// TestInspectTLS: a TLS flow is named, not read as frames, until a key
// log decrypts it; a key log that does not fit or does not parse is one
// line and a non-zero exit.
func TestInspectTLS(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.keys")
	if err := os.WriteFile(bad, []byte("CLIENT_RANDOM 0011 22\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		line string
		out  string
	}{
		{"no key log", nil, 1, "flow 0 is TLS 1.3 (SNI reprise.test, ALPN reprise-test (offered), TLS_AES_128_GCM_SHA256): give --tls-keylog, or record through `record proxy --tls-cert …`", "not decrypted: no key log"},
		{"key log", []string{"--tls-keylog", tlsKeys}, 0, "", "client: 12 frames, 990 bytes (join 1, leave 1, send 9, heartbeat 1)"},
		{"profile without key log", []string{"--profile", "mqtt"}, 1, "flow 0 is TLS 1.3 (SNI reprise.test", ""},
		{"profile with key log", []string{"--tls-keylog", tlsKeys, "--profile", "mqtt"}, 0, "", "client messages: 24"},
		{"no matching secret", []string{"--tls-keylog", tls12Keys}, 1, "cannot be read: the key log has no CLIENT_TRAFFIC_SECRET_0 and SERVER_TRAFFIC_SECRET_0 for client random", ""},
		{"malformed key log", []string{"--tls-keylog", bad}, 2, "line 1: CLIENT_RANDOM: client random \"0011\" is not 64 hex digits", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runReplay(t, append([]string{"inspect", tlsCapture}, tc.args...)...)
			if res.code != tc.code || (tc.line != "" && !strings.Contains(lastLine(res.stderr), tc.line)) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", res.code, res.stderr, tc.code, tc.line)
			}
			if strings.Count(strings.TrimSpace(res.stderr), "\n") > 0 {
				t.Errorf("more than one line on stderr:\n%s", res.stderr)
			}
			if !strings.Contains(res.stdout, tc.out) {
				t.Errorf("stdout lacks %q:\n%s", tc.out, res.stdout)
			}
		})
	}
}

// TestReplayTLSCapture: a session recorded over TLS, decrypted with its
// key log, is replayed like any capture; without the key log replay
// refuses with the line inspect gives.
func TestReplayTLSCapture(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	res := replay(t, "--capture", tlsCapture, "--target", r.TCP, "--clients", "4")
	if res.code == 0 || !strings.Contains(lastLine(res.stderr), "flow 0 is TLS 1.3 (SNI reprise.test") {
		t.Fatalf("without keys: exit %d, stderr %q", res.code, res.stderr)
	}
	res = replay(t, "--capture", tlsCapture, "--tls-keylog", tlsKeys, "--target", r.TCP, "--clients", "4",
		"--login-interval", "10ms", "--after-logins", "3s", "--heartbeat", "0")
	mustOK(t, res)
	s := res.sum
	if s.LoginsSucceeded != 4 || s.MessagesSent != 4*9 {
		t.Fatalf("logins %d, sent %d; want 4, 36\n%s", s.LoginsSucceeded, s.MessagesSent, res.stdout)
	}
	if got := relayMetric(t, r, "relay_delivered_messages_total"); got != float64(s.MessagesReceived) || got == 0 {
		t.Errorf("relay delivered %v, fleet received %d", got, s.MessagesReceived)
	}
}
