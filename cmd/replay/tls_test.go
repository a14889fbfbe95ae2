package main

// TLS replay against real servers: a test CA made here with crypto/x509
// signs the servers' certificates, and the fleet connects with --tls
// --tls-ca (or a wss:// target). Bad input (an unknown CA, an expired
// certificate, a port that is not TLS) fails with one line and a
// non-zero exit.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// testPKI are PEM files made for one test: a CA, a server certificate
// it signs for 127.0.0.1 and localhost, an expired one, and another CA
// that signed nothing here.
type testPKI struct {
	ca, cert, key, expiredCert, expiredKey, otherCA string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		// World-readable, in a readable directory (below): mosquitto
		// started as root reads them as the user mosquitto. Test keys.
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	keyDER := func(k *ecdsa.PrivateKey) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	mkCA := func(name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, k, der
	}
	leaf := func(ca *x509.Certificate, caKey *ecdsa.PrivateKey, serial int64, notAfter time.Time) ([]byte, []byte) {
		k := newKey()
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "localhost"},
			NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter,
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, keyDER(k)
	}
	ca, caKey, caDER := mkCA("reprise test CA")
	_, _, otherDER := mkCA("someone else's CA")
	var p testPKI
	p.ca = write("ca.pem", "CERTIFICATE", caDER)
	p.otherCA = write("other-ca.pem", "CERTIFICATE", otherDER)
	der, key := leaf(ca, caKey, 2, time.Now().Add(24*time.Hour))
	p.cert, p.key = write("server.pem", "CERTIFICATE", der), write("server-key.pem", "PRIVATE KEY", key)
	der, key = leaf(ca, caKey, 3, time.Now().Add(-time.Hour))
	p.expiredCert, p.expiredKey = write("expired.pem", "CERTIFICATE", der), write("expired-key.pem", "PRIVATE KEY", key)
	return p
}

// startMosquittoTLS starts mosquitto with a plaintext listener (for the
// recording and the $SYS monitor), a TLS listener and a TLS listener
// whose certificate expired.
func startMosquittoTLS(t *testing.T, pki testPKI) (plain, tlsPort, expired int) {
	t.Helper()
	bin := needTool(t, "mosquitto")
	plain, tlsPort, expired = freePort(t), freePort(t), freePort(t)
	conf := fmt.Sprintf(`per_listener_settings true
listener %d 127.0.0.1
allow_anonymous true
max_connections -1
listener %d 127.0.0.1
allow_anonymous true
max_connections -1
certfile %s
keyfile %s
listener %d 127.0.0.1
allow_anonymous true
certfile %s
keyfile %s
sys_interval 1
persistence false
`, plain, tlsPort, pki.cert, pki.key, expired, pki.expiredCert, pki.expiredKey)
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	p := testproc.Start(t, bin, "-c", path)
	p.StopSignal = os.Interrupt
	for _, port := range []int{plain, tlsPort, expired} {
		waitListening(t, fmt.Sprintf("127.0.0.1:%d", port))
	}
	return plain, tlsPort, expired
}

// TestTLSMosquitto records paho-mqtt's session (through the plaintext
// record proxy), replays it over TLS to mosquitto's TLS listener as 200
// clients with 20 senders, and checks mosquitto's own $SYS counts
// against the fleet's; then the failures: another CA, an expired
// certificate, TLS to a plaintext port and plaintext to a TLS port.
func TestTLSMosquitto(t *testing.T) {
	pki := newTestPKI(t)
	plain, tlsPort, expired := startMosquittoTLS(t, pki)
	py := python(t)
	mon := startSysMonitor(t, plain)
	capPath := recordThrough(t, fmt.Sprintf("127.0.0.1:%d", plain), py, filepath.Join("testdata", "mqttclient.py"), "LISTEN_PORT", "tcp", "20")
	target := fmt.Sprintf("127.0.0.1:%d", tlsPort)

	recv0, sent0, own0 := mon.settled(t)
	mon.resetPeak()
	res := replay(t, "--profile", "mqtt", "--capture", capPath, "--target", target, "--tls", "--tls-ca", pki.ca,
		"--clients", "200", "--senders", "20", "--room-size", "20", "--loop", "#2,#22", "--speed", "0.5", "--login-interval", "10ms", "--duration", "6s",
		"--drain-deliveries", "30s")
	mustOK(t, res)
	s := res.sum
	if s.LoginsSucceeded != 200 || len(s.LoginsFailed) != 0 || s.MessagesSent == 0 {
		t.Fatalf("logins %d failed %v sent %d\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.MessagesSent, res.stdout, res.stderr)
	}
	if s.TLS == nil || s.TLS.Handshakes != 200 || s.TLS.Version != "TLS 1.3" || s.TLS.Resumption != "off" || s.TLS.HandshakeMS.P50 <= 0 {
		t.Fatalf("tls summary %+v", s.TLS)
	}
	recv1, sent1, own1 := mon.settled(t)
	brokerRecv := recv1 - recv0
	brokerSent := sent1 - sent0 - float64(own1-own0)
	if peak := mon.peakConnected(); peak < 200 {
		t.Errorf("mosquitto saw at most %v clients connected at once, want 200", peak)
	}
	if !within(brokerRecv, float64(s.MessagesSent), 1) || !within(brokerSent, float64(s.MessagesReceived), 1) {
		t.Errorf("mosquitto received %v sent %v PUBLISH; the fleet sent %d received %d (want within 1%%)", brokerRecv, brokerSent, s.MessagesSent, s.MessagesReceived)
	}
	t.Logf("tls: fleet sent %d received %d; mosquitto received %v sent %v; handshake p50 %.2f ms p99 %.2f ms, %.0f/s",
		s.MessagesSent, s.MessagesReceived, brokerRecv, brokerSent, s.TLS.HandshakeMS.P50, s.TLS.HandshakeMS.P99, s.TLS.RatePerS)

	t.Run("resume", func(t *testing.T) {
		res := replay(t, "--profile", "mqtt", "--capture", capPath, "--target", "mqtts://"+target, "--tls-ca", pki.ca, "--tls-resume",
			"--clients", "20", "--receive-only", "--login-interval", "20ms", "--duration", "1s")
		mustOK(t, res)
		if tl := res.sum.TLS; tl == nil || tl.Resumption != "tickets" || tl.Resumed == 0 || res.sum.LoginsSucceeded != 20 {
			t.Fatalf("resumed: %+v, logins %d\n%s", tl, res.sum.LoginsSucceeded, res.stderr)
		}
	})

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown authority", []string{"--target", target, "--tls", "--tls-ca", pki.otherCA}, "tls_unknown_authority"},
		{"expired", []string{"--target", fmt.Sprintf("127.0.0.1:%d", expired), "--tls", "--tls-ca", pki.ca}, "tls_bad_certificate"},
		{"not tls", []string{"--target", fmt.Sprintf("127.0.0.1:%d", plain), "--tls", "--tls-ca", pki.ca}, "tls_handshake_closed"},
		{"tls port", []string{"--target", target}, "tls_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--profile", "mqtt", "--capture", capPath, "--clients", "3", "--login-interval", "10ms", "--duration", "2s", "--login-timeout", "3s"}, tc.args...)
			res := replay(t, args...)
			lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
			last := lines[len(lines)-1]
			if res.code == 0 || !strings.Contains(last, tc.want) {
				t.Fatalf("exit %d, last line %q, want %q\n%s%s", res.code, last, tc.want, res.stdout, res.stderr)
			}
			t.Logf("%s: %s", tc.name, last)
		})
	}
}
