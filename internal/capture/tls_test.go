package capture

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// tlsGreeting is what the test server sends first, one TLS record each.
var tlsGreeting = [][]byte{[]byte("hello from the server"), bytes.Repeat([]byte("S"), 3000), []byte("ready")}

// tlsMessages are what a test client sends, one TLS record each: small,
// a record over one TCP segment, and binary.
func tlsMessages() [][]byte {
	return [][]byte{
		[]byte("first message"),
		bytes.Repeat([]byte{0xAB, 0x00, 0xCD}, 7000),
		[]byte("{\"op\":\"move\",\"x\":1}"),
		{0, 1, 2, 3, 4, 5, 6, 7},
		[]byte("last"),
	}
}

// testCert is a self-signed ECDSA certificate for 127.0.0.1 and localhost.
func testCert(t testing.TB) tls.Certificate {
	t.Helper()
	return testCertUntil(t, time.Now().Add(time.Hour))
}

// testCertUntil is testCert valid until notAfter.
func testCertUntil(t testing.TB, notAfter time.Time) tls.Certificate {
	t.Helper()
	return testproc.SelfSigned(t, notAfter)
}

// greetingServer is a TLS server on 127.0.0.1 that sends tlsGreeting on
// each connection, then reads until the client closes.
func greetingServer(t testing.TB) string {
	t.Helper()
	return greetingServerWith(t, testCert(t))
}

// greetingServerWith is greetingServer with its certificate given.
func greetingServerWith(t testing.TB, cert tls.Certificate) string {
	t.Helper()
	return testproc.ServeTLS(t, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"reprise-test"}}, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		for _, g := range tlsGreeting {
			if _, err := c.Write(g); err != nil {
				return
			}
		}
		_, _ = io.Copy(io.Discard, c)
	})
}

// recordThrough runs a passthrough recording proxy (what `record proxy`
// does without TLS termination: the capture holds the ciphertext) in front
// of upstream while client runs against the proxy's address, and returns
// the capture's path.
func recordThrough(t testing.TB, upstream, name string, client func(addr string) error) string {
	t.Helper()
	path, _ := runProxy(t, upstream, name, nil, client)
	return path
}

// runProxy runs a recording proxy (terminating TLS with ptls, or
// passing it through when nil) in front of upstream while client runs
// against the proxy's address, and returns the capture's path (name, in
// a temporary directory) and the proxy's counts.
func runProxy(t testing.TB, upstream, name string, ptls *ProxyTLS, client func(addr string) error) (string, ProxyStats) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	w, err := Create(path, layers.LinkTypeEthernet, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(ProxyConfig{Listen: "127.0.0.1:0", Upstream: upstream, Writer: w, TLS: ptls})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	cerr := client(p.Addr().String())
	// The client may return before the proxy has read its last bytes, and
	// the server's FIN follows the client's: stopping now would cut them
	// from the capture. Every client here has had an answer through the
	// proxy, so its connection is tracked: wait until all have ended.
	waitProxyIdle(t, p)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if cerr != nil {
		t.Fatal(cerr)
	}
	return path, p.Stats()
}

// waitProxyIdle waits until every connection p accepted has ended both
// ways (both pumps done and the sockets untracked).
func waitProxyIdle(t testing.TB, p *Proxy) {
	t.Helper()
	deadline := time.Now().Add(testproc.Patience(t))
	for {
		p.mu.Lock()
		open := len(p.conns)
		p.mu.Unlock()
		if open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the proxy still has %d sockets open", open)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// dialTestTLS connects over TLS as the test servers expect (name
// reprise.test, protocol reprise-test, their certificate unchecked) with
// cfg's versions and suites, writing the secrets to keylog; the
// connection ends 10 s on at the latest.
func dialTestTLS(addr string, cfg *tls.Config, keylog io.Writer) (*tls.Conn, error) {
	cfg = cfg.Clone()
	cfg.KeyLogWriter, cfg.InsecureSkipVerify, cfg.ServerName = keylog, true, "reprise.test"
	cfg.NextProtos = []string{"reprise-test"}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, nil
}

// goTLSClient connects with Go's crypto/tls, writes its secrets to
// keylog, reads the greeting and sends tlsMessages, one record each.
func goTLSClient(cfg *tls.Config, keylog io.Writer) func(string) error {
	return func(addr string) error {
		c, err := dialTestTLS(addr, cfg, keylog)
		if err != nil {
			return err
		}
		defer c.Close()
		want := len(bytes.Join(tlsGreeting, nil))
		if _, err := io.ReadFull(c, make([]byte, want)); err != nil {
			return fmt.Errorf("read greeting: %w", err)
		}
		for _, m := range tlsMessages() {
			if _, err := c.Write(m); err != nil {
				return err
			}
		}
		return c.CloseWrite()
	}
}

// checkDecrypted reads the capture with the key log and compares the TLS
// flow's records, both ways, with what client and server sent.
func checkDecrypted(t *testing.T, path string, keys *KeyLog, version, cipher string) {
	t.Helper()
	c, err := ReadFile(path, Options{KeyLog: keys})
	if err != nil {
		t.Fatal(err)
	}
	f := onlyFlow(t, c)
	if f.TLS == nil {
		t.Fatalf("flow not seen as TLS; notes %q", f.Notes)
	}
	if f.TLS.Plaintext != PlaintextKeyLog || f.TLS.Version != version || f.TLS.Cipher != cipher || f.TLS.SNI != "reprise.test" || f.TLS.ALPN != "reprise-test" {
		t.Fatalf("TLS info %+v, want %s %s decrypted; notes %q", *f.TLS, version, cipher, f.Notes)
	}
	sameMessages(t, "client", f.ClientFrames, tlsMessages())
	sameMessages(t, "server", f.ServerFrames, tlsGreeting)
}

// sameMessages checks that the decrypted records, one frame each, are
// the messages sent: a message over one record's 16 KiB (or cut smaller
// by the sender's record sizing) spans several records, but no record
// holds bytes of two messages.
func sameMessages(t *testing.T, what string, got []Frame, want [][]byte) {
	t.Helper()
	i := 0
	for k, m := range want {
		var b []byte
		for len(b) < len(m) && i < len(got) {
			b = append(b, got[i].Bytes...)
			i++
		}
		if !bytes.Equal(b, m) {
			t.Fatalf("%s message %d: records hold %d bytes %.40q, want %d bytes %.40q", what, k, len(b), b, len(m), m)
		}
	}
	if i != len(got) {
		t.Fatalf("%s: %d records after the %d messages", what, len(got)-i, len(want))
	}
}

func TestTLSKeyLogGo(t *testing.T) {
	srv := greetingServer(t)
	cases := []struct {
		name, version, cipher string
		cfg                   *tls.Config
	}{
		{"tls13", "TLS 1.3", "TLS_AES_128_GCM_SHA256", &tls.Config{MinVersion: tls.VersionTLS13}},
		{"tls12-aes128", "TLS 1.2", "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}},
		{"tls12-aes256", "TLS 1.2", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384}}},
		{"tls12-chacha", "TLS 1.2", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var kl bytes.Buffer
			path := recordThrough(t, srv, tc.name+".pcapng", goTLSClient(tc.cfg, &kl))
			keys, err := ParseKeyLog(bytes.NewReader(kl.Bytes()))
			if err != nil {
				t.Fatal(err)
			}
			checkDecrypted(t, path, keys, tc.version, tc.cipher)

			// Without keys the flow is named, and holds no frames.
			c := readPath(t, path)
			f := onlyFlow(t, c)
			if f.TLS == nil || f.TLS.Plaintext != "" || f.ClientCount != 0 || f.TLS.Version != tc.version || f.TLS.SNI != "reprise.test" {
				t.Fatalf("without keys: %+v, %d client frames", f.TLS, f.ClientCount)
			}
			if err := c.Undecrypted(-1); err == nil || !strings.Contains(err.Error(), "flow 0 is "+tc.version+" (SNI reprise.test") {
				t.Fatalf("Undecrypted: %v", err)
			}
		})
	}
}

// pythonTLSClient is pythonClient's script: Python's ssl (OpenSSL) with
// keylog_filename, the TLS version and cipher pinned.
const pythonTLSClient = `
import socket, ssl, sys
addr, keylog, version, ciphers, greeting = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
ctx.keylog_filename = keylog
v = ssl.TLSVersion.TLSv1_3 if version == "1.3" else ssl.TLSVersion.TLSv1_2
ctx.minimum_version = ctx.maximum_version = v
if ciphers != "-":
    ctx.set_ciphers(ciphers)
ctx.set_alpn_protocols(["reprise-test"])
host, port = addr.rsplit(":", 1)
with socket.create_connection((host, int(port)), timeout=10) as raw:
    with ctx.wrap_socket(raw, server_hostname="reprise.test") as s:
        got = b""
        while len(got) < greeting:
            chunk = s.recv(65536)
            if not chunk:
                sys.exit("greeting cut short")
            got += chunk
        for m in sys.stdin.buffer.read().split(b"\n--\n"):
            s.sendall(bytes.fromhex(m.decode()))
`

func TestTLSKeyLogPython(t *testing.T) {
	testproc.NeedTool(t, "python3", "python3")
	srv := greetingServer(t)
	cases := []struct {
		name, version, ciphers, suites13, cipher string
	}{
		{"tls13-aes256", "1.3", "-", "TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"},
		{"tls13-chacha", "1.3", "-", "TLS_CHACHA20_POLY1305_SHA256", "TLS_CHACHA20_POLY1305_SHA256"},
		{"tls12-aes256", "1.2", "ECDHE-ECDSA-AES256-GCM-SHA384", "", "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"},
		{"tls12-chacha", "1.2", "ECDHE-ECDSA-CHACHA20-POLY1305", "", "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"},
	}
	var hexed []string
	for _, m := range tlsMessages() {
		hexed = append(hexed, fmt.Sprintf("%x", m))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			keylog := filepath.Join(dir, "keys.log")
			env := os.Environ()
			if tc.suites13 != "" {
				// Python's ssl has no call for TLS 1.3 suites: OpenSSL's
				// configuration file sets them.
				conf := filepath.Join(dir, "openssl.cnf")
				cnf := "openssl_conf = c\n[c]\nssl_conf = s\n[s]\nsystem_default = d\n[d]\nCiphersuites = " + tc.suites13 + "\n"
				if err := os.WriteFile(conf, []byte(cnf), 0o644); err != nil {
					t.Fatal(err)
				}
				env = append(env, "OPENSSL_CONF="+conf)
			}
			path := recordThrough(t, srv, tc.name+".pcap", func(addr string) error {
				cmd := exec.Command("python3", "-c", pythonTLSClient, addr, keylog, tc.version, tc.ciphers, fmt.Sprint(len(bytes.Join(tlsGreeting, nil))))
				cmd.Env = env
				cmd.Stdin = strings.NewReader(strings.Join(hexed, "\n--\n"))
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("python client: %v: %s", err, out)
				}
				return nil
			})
			keys, err := ReadKeyLog(keylog)
			if err != nil {
				t.Fatal(err)
			}
			checkDecrypted(t, path, keys, "TLS "+tc.version, tc.cipher)
		})
	}
}

var updateTLS = flag.Bool("update-tls", false, "rewrite testdata/tls: reprise sessions over TLS with their key logs")

// tlsTestdata are the captures in testdata/tls: a reprise session over
// TLS through a recording proxy, with the client's key log beside each.
var tlsTestdata = []struct {
	name string
	cfg  *tls.Config
}{
	{"go-tls13.pcapng", &tls.Config{MinVersion: tls.VersionTLS13}},
	{"go-tls12.pcap", &tls.Config{MaxVersion: tls.VersionTLS12, CipherSuites: []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}}},
}

// sessionServer is a TLS server that plays sessionFrames' server side to
// each client: joined after the join, the rest after the client's frames.
func sessionServer(t testing.TB) string {
	t.Helper()
	return testproc.ServeTLS(t, &tls.Config{Certificates: []tls.Certificate{testCert(t)}, NextProtos: []string{"reprise-test"}}, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		client, server := sessionFrames()
		if _, err := io.ReadFull(c, make([]byte, len(client[0]))); err != nil {
			return
		}
		for _, f := range server {
			if _, err := c.Write(f); err != nil {
				return
			}
		}
		_, _ = io.Copy(io.Discard, c)
	})
}

// sessionClient plays sessionFrames' client side over TLS.
func sessionClient(cfg *tls.Config, keylog io.Writer) func(string) error {
	return func(addr string) error {
		c, err := dialTestTLS(addr, cfg, keylog)
		if err != nil {
			return err
		}
		defer c.Close()
		client, server := sessionFrames()
		if _, err := c.Write(client[0]); err != nil {
			return err
		}
		if _, err := io.ReadFull(c, make([]byte, len(bytes.Join(server, nil)))); err != nil {
			return err
		}
		for _, f := range client[1:] {
			if _, err := c.Write(f); err != nil {
				return err
			}
		}
		return c.CloseWrite()
	}
}

func TestTLSTestdata(t *testing.T) {
	for _, tc := range tlsTestdata {
		path := filepath.Join("testdata", "tls", tc.name)
		keys := strings.TrimSuffix(path, filepath.Ext(path)) + ".keys"
		if *updateTLS {
			var kl bytes.Buffer
			tmp := recordThrough(t, sessionServer(t), tc.name, sessionClient(tc.cfg, &kl))
			data, err := os.ReadFile(tmp)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(keys, kl.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Run(tc.name, func(t *testing.T) {
			k, err := ReadKeyLog(keys)
			if err != nil {
				t.Fatal(err)
			}
			c, err := ReadFile(path, rep(Options{KeyLog: k}))
			if err != nil {
				t.Fatal(err)
			}
			f := onlyFlow(t, c)
			if f.TLS == nil || f.TLS.Plaintext != PlaintextKeyLog {
				t.Fatalf("TLS %+v; notes %q", f.TLS, f.Notes)
			}
			client, server := sessionFrames()
			equalFrames(t, "client", f.ClientFrames, client)
			equalFrames(t, "server", f.ServerFrames, server)
			if ok, why := Inspection.Usable(f); !ok {
				t.Fatalf("decrypted flow not usable: %s", why)
			}
		})
	}
}

func TestParseKeyLog(t *testing.T) {
	random := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name, log, err string
		conns          int
	}{
		{"tls13 and comments", "# a comment\n\nCLIENT_TRAFFIC_SECRET_0 " + random + " " + strings.Repeat("01", 32) + "\nSERVER_TRAFFIC_SECRET_0 " + random + " " + strings.Repeat("02", 32) + "\nEXPORTER_SECRET " + random + " " + strings.Repeat("03", 32) + "\n", "", 1},
		{"tls12", "CLIENT_RANDOM " + random + " " + strings.Repeat("04", 48) + "\r\n", "", 1},
		{"empty", "# nothing\n", "no TLS secrets in it", 0},
		{"two fields", "CLIENT_RANDOM " + random + "\n", "line 1: want LABEL CLIENT_RANDOM SECRET, got 2 fields", 0},
		{"short random", "CLIENT_RANDOM abcd " + strings.Repeat("04", 48) + "\n", "line 1: CLIENT_RANDOM: client random \"abcd\" is not 64 hex digits", 0},
		{"bad hex secret", "CLIENT_TRAFFIC_SECRET_0 " + random + " zz" + strings.Repeat("0", 62) + "\n", "line 1: CLIENT_TRAFFIC_SECRET_0: secret is not 64 to 128 hex digits", 0},
		{"master of 32 bytes", "CLIENT_RANDOM " + random + " " + strings.Repeat("04", 32) + "\n", "master secret of 32 bytes, want 48", 0},
		{"unknown label", "HELLO " + random + " " + strings.Repeat("04", 32) + "\n", "line 1: unknown label \"HELLO\"", 0},
		{"binary", strings.Repeat("\x00", 2000), "line 1: longer than 1024 bytes: not a key log", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := ParseKeyLog(strings.NewReader(tc.log))
			if tc.err != "" {
				if err == nil || err.Error() != tc.err && !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || k.Len() != tc.conns {
				t.Fatalf("%d connections, error %v; want %d", k.Len(), err, tc.conns)
			}
		})
	}
}

// TestInjectSecrets: a pcapng given a decryption secrets block opens
// decrypted with no key log; a block whose key log is bad is a warning.
func TestInjectSecrets(t *testing.T) {
	data, err := os.ReadFile("testdata/tls/go-tls13.pcapng")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := os.ReadFile("testdata/tls/go-tls13.keys")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, keys, plaintext, warning string
	}{
		{"key log", string(keys), PlaintextKeyLog, ""},
		{"bad key log", "CLIENT_RANDOM nothing here\n", "", "TLS key log line 1: CLIENT_RANDOM: client random"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dsb.pcapng")
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := InjectSecrets(path, []byte(tc.keys)); err != nil {
				t.Fatal(err)
			}
			c := readPath(t, path)
			f := onlyFlow(t, c)
			if f.TLS == nil || f.TLS.Plaintext != tc.plaintext {
				t.Fatalf("TLS %+v", f.TLS)
			}
			if tc.warning != "" && !strings.Contains(strings.Join(c.Warnings, "\n"), tc.warning) {
				t.Fatalf("warnings %q, want %q", c.Warnings, tc.warning)
			}
		})
	}
	if err := InjectSecrets("testdata/tls/go-tls12.pcap", keys); err == nil || !strings.Contains(err.Error(), "not a pcapng file") {
		t.Fatalf("a pcap: %v", err)
	}
}

// opensslClient runs `openssl s_client` through addr with input on its
// stdin: lines are sent as typed, and a line "k" or "K" is its command
// for a TLS 1.3 key update (K asks the server to update too), "R" for a
// TLS 1.2 renegotiation.
func opensslClient(t *testing.T, keylog, input string, args ...string) func(string) error {
	bin := testproc.NeedTool(t, "openssl", "openssl")
	return func(addr string) error {
		all := append([]string{"s_client", "-connect", addr, "-servername", "reprise.test", "-keylogfile", keylog}, args...)
		cmd := exec.Command(bin, all...)
		// An OS pipe: a write after s_client exits fails instead of
		// waiting for a reader.
		pw, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		var out testproc.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return err
		}
		// One line at a time, once the handshake is over (s_client has
		// printed its summary), so each is its own record and the
		// commands come between them.
		for end := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "Verify return code"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				return fmt.Errorf("openssl s_client: no handshake:\n%s", out.String())
			}
		}
		for _, line := range strings.SplitAfter(input, "\n") {
			time.Sleep(300 * time.Millisecond)
			if _, err := io.WriteString(pw, line); err != nil {
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
		pw.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("openssl s_client did not exit:\n%s", out.String())
		}
		return nil
	}
}

// TestTLSKeyUpdateOpenSSL: OpenSSL's key updates, its own and one it asks
// of the server, are followed: the client's plaintext reads on across
// them. A TLS 1.2 renegotiation it starts is refused with one line.
func TestTLSKeyUpdateOpenSSL(t *testing.T) {
	srv := greetingServer(t)
	dir := t.TempDir()
	keylog := filepath.Join(dir, "keys.log")
	input := "first line\nk\nsecond line\nK\nthird line\n"
	path := recordThrough(t, srv, "keyupdate.pcap", opensslClient(t, keylog, input, "-tls1_3"))
	keys, err := ReadKeyLog(keylog)
	if err != nil {
		t.Fatal(err)
	}
	c, err := ReadFile(path, Options{KeyLog: keys})
	if err != nil {
		t.Fatal(err)
	}
	f := onlyFlow(t, c)
	if f.TLS == nil || f.TLS.Plaintext != PlaintextKeyLog || f.TLS.Problem != "" {
		t.Fatalf("TLS %+v; notes %q", f.TLS, f.Notes)
	}
	if got := string(bytes.Join(frameBytes(f.ClientFrames), nil)); got != "first line\nsecond line\nthird line\n" {
		t.Fatalf("client plaintext %q; notes %q", got, f.Notes)
	}

	keylog12 := filepath.Join(dir, "keys12.log")
	path = recordThrough(t, srv, "reneg.pcap", opensslClient(t, keylog12, "before\nR\nafter\n", "-tls1_2"))
	keys, err = ReadKeyLog(keylog12)
	if err != nil {
		t.Fatal(err)
	}
	c, err = ReadFile(path, Options{KeyLog: keys})
	if err != nil {
		t.Fatal(err)
	}
	f = onlyFlow(t, c)
	if f.TLS == nil || !strings.Contains(f.TLS.Problem, "renegotiation (a ClientHello after the handshake): not supported") {
		t.Fatalf("TLS %+v; notes %q", f.TLS, f.Notes)
	}
	if got := string(bytes.Join(frameBytes(f.ClientFrames), nil)); got != "before\n" {
		t.Fatalf("client plaintext before the renegotiation %q", got)
	}
	if err := c.Undecrypted(-1); err == nil || !strings.Contains(err.Error(), "cannot be read: renegotiation") {
		t.Fatalf("Undecrypted: %v", err)
	}
}

// TestEditcapSecrets: the secrets block Wireshark's editcap writes
// (--inject-secrets) is read as ours is.
func TestEditcapSecrets(t *testing.T) {
	editcap := testproc.NeedTool(t, "editcap", "tshark")
	out := filepath.Join(t.TempDir(), "editcap.pcapng")
	if b, err := exec.Command(editcap, "--inject-secrets", "tls,testdata/tls/go-tls12.keys", "testdata/tls/go-tls12.pcap", out).CombinedOutput(); err != nil {
		t.Fatalf("editcap: %v\n%s", err, b)
	}
	c := readPath(t, out)
	f := onlyFlow(t, c)
	client, _ := sessionFrames()
	if f.TLS == nil || f.TLS.Plaintext != PlaintextKeyLog {
		t.Fatalf("TLS %+v", f.TLS)
	}
	equalFrames(t, "client", f.ClientFrames, client)
}
