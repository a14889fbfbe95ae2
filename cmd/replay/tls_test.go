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
	"os/exec"
	"path/filepath"
	"strconv"
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
// recordTLSClient records a client program that speaks TLS (its CA in
// $MQTT_TLS_CA) through `record proxy` terminating TLS with the test's
// certificate and speaking TLS to upstream: the capture holds the
// plaintext, and notes the handshake (SNI, ALPN).
func recordTLSClient(t *testing.T, pki testPKI, upstream string, client ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "session.pcapng")
	p := testproc.Start(t, bins["record"], "proxy", "--listen", "127.0.0.1:0", "--upstream", upstream, "--out", out,
		"--tls-cert", pki.cert, "--tls-key", pki.key, "--upstream-tls", "--tls-ca", pki.ca)
	listen := proxyAddr(t, p, p.Stderr)
	args := append([]string{client[1], listen[strings.LastIndexByte(listen, ':')+1:]}, client[2:]...)
	cmd := exec.Command(client[0], args...)
	cmd.Env = append(os.Environ(), "MQTT_TLS_CA="+pki.ca)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("recorded client %v: %v\n%s", client, err, b)
	}
	if err := p.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, p.Stderr)
	}
	return out
}

func startMosquittoTLS(t *testing.T, pki testPKI) (b *mosquittoBroker, plain, tlsPort, expired int) {
	t.Helper()
	b, ports := startMosquittoConf(t, needTool(t, "mosquitto"), 3, func(p []int) string {
		return fmt.Sprintf(`per_listener_settings true
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
`, p[0], p[1], pki.cert, pki.key, p[2], pki.expiredCert, pki.expiredKey)
	})
	return b, ports[0], ports[1], ports[2]
}

// TestTLSMosquitto records paho-mqtt's session over TLS (through `record
// proxy` terminating it, to mosquitto's TLS listener), replays it over TLS to mosquitto's TLS listener as 200
// clients with 20 senders, and checks mosquitto's own $SYS counts
// against the fleet's; then the failures: another CA, an expired
// certificate, TLS to a plaintext port and plaintext to a TLS port.
func TestTLSMosquitto(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	broker, plain, tlsPort, expired := startMosquittoTLS(t, pki)
	py := python(t)
	mon := startSysMonitor(t, plain)
	target := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	capPath := recordTLSClient(t, pki, target, py, filepath.Join("testdata", "mqttclient.py"), "tcp", "20")
	if insp, _ := execReplay("inspect", capPath); !strings.Contains(insp, "ALPN mqtt") { // inspect without --profile finds no reprise frames: exit 1
		t.Fatalf("inspect does not name the recorded TLS flow's ALPN:\n%s", insp)
	}

	recv0, sent0, own0 := mon.settled(t)
	mark := broker.logMark()
	res := replay(t, "--profile", "mqtt", "--capture", capPath, "--target", target, "--tls", "--tls-ca", pki.ca,
		"--clients", "200", "--senders", "20", "--room-size", "20", "--loop", suggestedLoopOf(t, "mqtt", capPath), "--speed", "0.5", "--login-interval", "10ms", "--after-logins", "6s", "--login-timeout", "30s",
		"--drain-deliveries", "30s")
	mustOK(t, res)
	s := res.sum
	if s.LoginsSucceeded != 200 || len(s.LoginsFailed) != 0 || s.MessagesSent == 0 {
		t.Fatalf("logins %d failed %v sent %d\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.MessagesSent, res.stdout, res.stderr)
	}
	// Detached: clients whose records the fleet sealed and opened itself
	// once logged in (a client whose reads never ended between records
	// keeps its tls.Conn, so not all of them need to).
	if s.TLS == nil || s.TLS.Handshakes != 200 || s.TLS.Version != "TLS 1.3" || s.TLS.Resumption != "off" || s.TLS.HandshakeMS.P50 <= 0 || s.TLS.Detached == 0 {
		t.Fatalf("tls summary %+v", s.TLS)
	}
	// The recorded handshake offered ALPN mqtt: the fleet offers it too
	// (mosquitto, not configured for ALPN, picks none).
	if !strings.Contains(strings.Join(s.Notes, "\n"), "offering ALPN mqtt") {
		t.Errorf("no ALPN note: %q", s.Notes)
	}
	recv1, sent1, own1 := mon.settled(t)
	brokerRecv := recv1 - recv0
	brokerSent := sent1 - sent0 - float64(own1-own0)
	if peak := broker.peakSince(mark); peak < 200 {
		t.Errorf("mosquitto's log has at most %d clients connected at once, want 200", peak)
	}
	if !within(brokerRecv, float64(s.MessagesSent), 1) || !within(brokerSent, float64(s.MessagesReceived), 1) {
		t.Errorf("mosquitto received %v sent %v PUBLISH; the fleet sent %d received %d (want within 1%%)", brokerRecv, brokerSent, s.MessagesSent, s.MessagesReceived)
	}
	t.Logf("tls: fleet sent %d received %d; mosquitto received %v sent %v; handshake p50 %.2f ms p99 %.2f ms, %.0f/s",
		s.MessagesSent, s.MessagesReceived, brokerRecv, brokerSent, s.TLS.HandshakeMS.P50, s.TLS.HandshakeMS.P99, s.TLS.RatePerS)

	t.Run("resume", func(t *testing.T) {
		res := replay(t, "--profile", "mqtt", "--capture", capPath, "--target", "mqtts://"+target, "--tls-ca", pki.ca, "--tls-resume",
			"--clients", "20", "--receive-only", "--login-interval", "20ms", "--after-logins", "500ms")
		mustOK(t, res)
		if tl := res.sum.TLS; tl == nil || tl.Resumption != "tickets" || tl.Resumed == 0 || res.sum.LoginsSucceeded != 20 {
			t.Fatalf("resumed: %+v, logins %d\n%s", tl, res.sum.LoginsSucceeded, res.stderr)
		}
	})

	// OpenSSL serving TLS 1.2 at most, to a fleet that wants 1.3: the
	// server's protocol_version alert.
	ossl, ports := testproc.StartServer(t, 1, func(p []int) *exec.Cmd {
		return exec.Command(needTool(t, "openssl"), "s_server", "-accept", fmt.Sprintf("127.0.0.1:%d", p[0]), "-cert", pki.cert, "-key", pki.key, "-tls1_2", "-quiet")
	})
	tls12 := ports[0]
	t.Cleanup(func() { // s_server has no clean stop: any signal is a failed exit
		ossl.Cmd.Process.Kill()
		<-ossl.Done()
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"protocol version", []string{"--target", fmt.Sprintf("127.0.0.1:%d", tls12), "--tls", "--tls-ca", pki.ca, "--tls-min-version", "1.3"}, "tls_protocol_version"},
		{"unknown authority", []string{"--target", target, "--tls", "--tls-ca", pki.otherCA}, "tls_unknown_authority"},
		{"expired", []string{"--target", fmt.Sprintf("127.0.0.1:%d", expired), "--tls", "--tls-ca", pki.ca}, "tls_bad_certificate"},
		{"not tls", []string{"--target", fmt.Sprintf("127.0.0.1:%d", plain), "--tls", "--tls-ca", pki.ca}, "tls_handshake_closed"},
		{"tls port", []string{"--target", target}, "tls_required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--profile", "mqtt", "--capture", capPath, "--clients", "3", "--login-interval", "10ms", "--after-logins", "500ms", "--login-timeout", "3s"}, tc.args...)
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

// startNATSTLS starts nats-server with tls {}: it sends INFO in
// plaintext with tls_required, then wants the handshake on the same
// connection (the nats profile's starttls step).
func startNATSTLS(t *testing.T, bin string, pki testPKI) (port, mon int) {
	t.Helper()
	return startNATSConf(t, bin, fmt.Sprintf("tls {\n  cert_file: %q\n  key_file: %q\n  timeout: 5\n}\n", pki.cert, pki.key))
}

// TestTLSNATS records nats.go's session with a plaintext nats-server and
// replays it with the built-in nats profile to a nats-server with tls {}:
// each client reads INFO, upgrades in band, then logs in; nats-server's
// /varz counts equal the fleet's. Without --tls the server's refusal is
// counted by its reason.
func TestTLSNATS(t *testing.T) {
	t.Parallel()
	bin := needNATSServer(t)
	pki := newTestPKI(t)
	rec := benchBuild(t, "natsrec", "./cmd/natsrec")
	plain, _ := startNATS(t, bin, false)
	capPath := recordThrough(t, fmt.Sprintf("127.0.0.1:%d", plain), rec, "-port", "LISTEN_PORT", "-user", "rec-user-01", "-room", "lobby", "-n", "20")
	insp := inspectProfile(t, "nats", capPath)
	loop := suggestedLoop.FindStringSubmatch(insp)
	if loop == nil {
		t.Fatalf("inspect suggests no loop:\n%s", insp)
	}
	port, mon := startNATSTLS(t, bin, pki)
	target := fmt.Sprintf("127.0.0.1:%d", port)
	in0, out0 := natsVarz(t, mon)
	res := replay(t, "--profile", "nats", "--capture", capPath, "--target", target, "--tls", "--tls-ca", pki.ca,
		"--clients", "100", "--senders", "10", "--room-size", "50", "--speed", "0.5", "--loop", loop[1], "--login-interval", "10ms",
		"--login-timeout", "30s", "--after-logins", "3s", "--drain-deliveries", "30s")
	mustOK(t, res)
	s := res.sum
	in1, out1 := natsVarz(t, mon)
	if s.LoginsSucceeded != 100 || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 || s.MessagesSent == 0 {
		t.Fatalf("logins %d failed %v disconnects %v sent %d\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, s.MessagesSent, res.stdout, res.stderr)
	}
	if s.TLS == nil || s.TLS.Handshakes != 100 || s.TLS.Detached == 0 {
		t.Fatalf("tls summary %+v", s.TLS)
	}
	if !within(float64(in1-in0), float64(s.MessagesSent), 1) || !within(float64(out1-out0), float64(s.MessagesReceived), 1) {
		t.Errorf("nats-server in_msgs %d out_msgs %d; the fleet sent %d received %d (want within 1%%)", in1-in0, out1-out0, s.MessagesSent, s.MessagesReceived)
	}
	t.Logf("nats over tls: fleet sent %d received %d; nats-server in %d out %d; handshake p50 %.2f ms p99 %.2f ms",
		s.MessagesSent, s.MessagesReceived, in1-in0, out1-out0, s.TLS.HandshakeMS.P50, s.TLS.HandshakeMS.P99)

	t.Run("plaintext", func(t *testing.T) {
		res := replay(t, "--profile", "nats", "--capture", capPath, "--target", target,
			"--clients", "3", "--login-interval", "10ms", "--after-logins", "500ms")
		// nats-server's INFO said tls_required, and it reads a handshake
		// next: it closes on the plaintext CONNECT.
		lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
		if last := lines[len(lines)-1]; res.code == 0 || res.sum.LoginsSucceeded != 0 || !strings.Contains(last, "tls_required") || !strings.Contains(last, "give --tls") {
			t.Fatalf("exit %d, logins %d failed %v, last line %q\n%s", res.code, res.sum.LoginsSucceeded, res.sum.LoginsFailed, last, res.stderr)
		}
	})
}

// TestTLSWebSocket records a node ws client's session over ws:// and
// replays it as wss:// (the target's scheme turns TLS on) to the same
// room server's https listener: 100 clients, 10 senders, every
// connection over TLS, and the server's counts equal the fleet's
// exactly. wss:// to its plain http port fails as tls_required, quoting
// the HTTP answer.
func TestTLSWebSocket(t *testing.T) {
	t.Parallel()
	node := needTool(t, "node")
	pki := newTestPKI(t)
	plain, secure := startWSChat(t, node, "plain", &pki)
	capPath := recordThrough(t, fmt.Sprintf("127.0.0.1:%d", plain), node, filepath.Join(wsChatDir, "client.js"), "LISTEN_PORT", "rec-user-01", "lobby", "20")
	prof := filepath.Join(wsChatDir, "chat.yaml")
	loop := suggestedLoop.FindStringSubmatch(inspectProfile(t, prof, capPath))
	if loop == nil {
		t.Fatal("inspect suggests no loop")
	}
	var ok string
	if err := fetchText(fmt.Sprintf("http://127.0.0.1:%d/reset", plain), &ok); err != nil { // the recording's session
		t.Fatal(err)
	}
	res := replay(t, "--profile", prof, "--capture", capPath, "--target", fmt.Sprintf("wss://127.0.0.1:%d/chat", secure), "--tls-ca", pki.ca,
		"--clients", "100", "--senders", "10", "--room-size", "50", "--loop", loop[1],
		"--login-interval", "10ms", "--login-timeout", "30s", "--after-logins", "4s", "--drain-deliveries", "20s")
	mustOK(t, res)
	s, app := res.sum, wsChatSettled(t, plain)
	if s.LoginsSucceeded != 100 || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 || s.MessagesSent == 0 || s.MessagesReceived == 0 {
		t.Fatalf("logins %d failed %v disconnects %v sent %d received %d\n%s%s", s.LoginsSucceeded, s.LoginsFailed, s.Disconnects, s.MessagesSent, s.MessagesReceived, res.stdout, res.stderr)
	}
	if app.TLS != 100 || app.Joins != 100 || app.Users != 100 || app.Errors != 0 || s.TLS == nil || s.TLS.Handshakes != 100 || s.TLS.Detached == 0 {
		t.Errorf("the server saw %d TLS connections of %d joins (%d users, %d errors); fleet tls %+v", app.TLS, app.Joins, app.Users, app.Errors, s.TLS)
	}
	if app.Chats != s.MessagesSent || app.Delivered != s.MessagesReceived {
		t.Errorf("the server got %d chats and delivered %d; the fleet sent %d and received %d", app.Chats, app.Delivered, s.MessagesSent, s.MessagesReceived)
	}
	t.Logf("wss: sent %d received %d, server chats %d delivered %d; handshake p50 %.2f ms p99 %.2f ms; latency p50 %.2f ms",
		s.MessagesSent, s.MessagesReceived, app.Chats, app.Delivered, s.TLS.HandshakeMS.P50, s.TLS.HandshakeMS.P99, s.LatencyMS.P50)

	t.Run("not tls", func(t *testing.T) {
		res := replay(t, "--profile", prof, "--capture", capPath, "--target", fmt.Sprintf("wss://127.0.0.1:%d/chat", plain), "--tls-ca", pki.ca,
			"--clients", "3", "--login-interval", "10ms", "--after-logins", "500ms")
		lines := strings.Split(strings.TrimSpace(res.stderr), "\n")
		if last := lines[len(lines)-1]; res.code == 0 || !strings.Contains(last, "tls_required") || !strings.Contains(last, `"HTTP/`) {
			t.Fatalf("exit %d, last line %q\n%s", res.code, last, res.stderr)
		}
	})
}

// wsChatDir holds the node ws room chat (server.js) and its recorded
// client (client.js).
var wsChatDir = filepath.Join("testdata", "wschat")

// startWSChat starts wsChatDir's room chat under node, compression
// "deflate" or "plain", serving wss:// too with pki's server certificate
// when pki is not nil: its plain ws:// port and its wss:// port (0
// without pki).
func startWSChat(t *testing.T, node, compression string, pki *testPKI) (plain, secure int) {
	t.Helper()
	npmCIIn(t, wsChatDir)
	n := 1
	if pki != nil {
		n = 2
	}
	ports := startServer(t, n, func(p []int) *exec.Cmd {
		args := []string{filepath.Join(wsChatDir, "server.js"), strconv.Itoa(p[0]), compression}
		if pki != nil {
			args = append(args, strconv.Itoa(p[1]), pki.cert, pki.key)
		}
		return exec.Command(node, args...)
	})
	plain = ports[0]
	if pki != nil {
		secure = ports[1]
	}
	return plain, secure
}

// wsChatStats are the room chat's counters (GET /stats).
type wsChatStats struct {
	Connected int   `json:"connected"`
	Peak      int   `json:"peak"`
	TLS       int   `json:"tls"`
	Users     int   `json:"users"`
	Joins     int   `json:"joins"`
	Chats     int64 `json:"chats"`
	Delivered int64 `json:"delivered"`
	Deflated  int   `json:"deflated"`
	Refused   int   `json:"refused"`
	Errors    int   `json:"errors"`
	// cookie mode's (server.js cookie)
	Logins    int `json:"logins"`
	Me        int `json:"me"`
	Upgrades  int `json:"upgrades"`
	NoCookie  int `json:"no_cookie"`
	DupCookie int `json:"dup_cookie"`
	WrongUser int `json:"wrong_user"`
	HTTPConns int `json:"http_conns"`
}

// wsChatSettled waits until the server holds no connection and returns
// its counters.
func wsChatSettled(t *testing.T, port int) wsChatStats {
	t.Helper()
	var s wsChatStats
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		getJSON(t, fmt.Sprintf("http://127.0.0.1:%d/stats", port), &s)
		if s.Connected == 0 || time.Now().After(end) {
			return s
		}
	}
}

// TestTargetValue: --target takes host:port or a URL whose scheme says
// TLS, parsed when set.
func TestTargetValue(t *testing.T) {
	for _, tc := range []struct {
		in, addr string
		tls      bool
		err      string
	}{
		{"127.0.0.1:7400", "127.0.0.1:7400", false, ""},
		{"wss://127.0.0.1:8443/chat?room=a", "127.0.0.1:8443", true, ""},
		{"ws://localhost:8080/ws", "localhost:8080", false, ""},
		{"mqtts://broker.local", "broker.local:8883", true, ""},
		{"mqtt://[::1]:1883", "[::1]:1883", false, ""},
		{"tls://10.0.0.1:4443", "10.0.0.1:4443", true, ""},
		{"https://example.com", "example.com:443", true, ""},
		{"tls://10.0.0.1", "", false, "no port"},
		{"gopher://h:70", "", false, "want one of"},
		{"wss://:443/x", "", false, "no host"},
		{"127.0.0.1", "", false, "host:port"},
		{"off", "", false, ""},
	} {
		var addr string
		var tls bool
		err := targetValue{Addr: &addr, TLS: &tls}.Set(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || addr != tc.addr || tls != tc.tls {
			t.Errorf("%q: %q tls %v err %v, want %q tls %v", tc.in, addr, tls, err, tc.addr, tc.tls)
		}
	}
}
