package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestProxyTLSWithCA: `record ca` writes a CA; a client that trusts it
// speaks TLS to `record proxy --ca-cert --ca-key`, which forwards the
// plaintext to the relay: the capture holds the frames the client sent,
// noted as TLS with the name the client asked for.
func TestProxyTLSWithCA(t *testing.T) {
	dir := t.TempDir()
	caCert, caKey := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	out, err := exec.Command(bins["record"], "ca", "--cert", caCert, "--key", caKey).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--ignore-certificate-errors-spki-list=") {
		t.Fatalf("record ca: %v\n%s", err, out)
	}
	if out, err := exec.Command(bins["record"], "ca", "--cert", caCert, "--key", caKey).CombinedOutput(); err == nil || !strings.Contains(string(out), "file exists") {
		t.Fatalf("record ca over an existing CA: %v\n%s", err, out)
	}
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(caCert)
	if err != nil || !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("CA certificate: %v", err)
	}
	relay := startRelay(t)
	capPath := filepath.Join(dir, "tls.pcapng")
	rec, listen := startProxy(t, "--upstream", relay, "--out", capPath, "--ca-cert", caCert, "--ca-key", caKey)
	rec.waitFor(t, "TLS terminated with certificates minted by --ca-cert")

	sent := [][]byte{wire.AppendJoin(nil, "lobby", "tls-user", nil, 0)}
	for i := range 5 {
		sent = append(sent, wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, Payload: []byte{byte(i)}}))
	}
	sent = append(sent, wire.AppendLeave(nil))
	c, err := tls.Dial("tcp", listen, &tls.Config{RootCAs: roots, ServerName: "vr.example"})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, f := range sent {
		if _, err := c.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, c)
	c.Close()
	// A plaintext client on the TLS port fails its handshake: counted.
	if _, err := exec.Command(bins["vrclient"], "--target", listen, "--user", "plain", "--room", "lobby", "--duration", "200ms").CombinedOutput(); err == nil {
		t.Log("the plaintext client exited 0")
	}
	if err := rec.stop(t, os.Interrupt); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, rec.out.String())
	}
	if !strings.Contains(rec.out.String(), "TLS handshakes failed") || !strings.Contains(rec.out.String(), "plaintext") {
		t.Errorf("the plaintext client's failure is not reported:\n%s", rec.out.String())
	}
	cp, err := capture.ReadFile(capPath, reprise(0))
	if err != nil {
		t.Fatal(err)
	}
	f := flowOf(t, cp, "tls-user")
	if f.TLS == nil || f.TLS.SNI != "vr.example" || f.TLS.Plaintext != capture.PlaintextProxy || f.TLS.Version != "TLS 1.3" {
		t.Fatalf("TLS %+v", f.TLS)
	}
	samePrefix(t, f, sent, true)
}

func TestProxyTLSErrors(t *testing.T) {
	dir := t.TempDir()
	notCA := filepath.Join(dir, "leaf.pem")
	if err := os.WriteFile(notCA, []byte("not pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "x.pcapng")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"cert without key", []string{"--tls-cert", notCA}, 2, "--tls-cert and --tls-key go together"},
		{"cert and ca", []string{"--tls-cert", notCA, "--tls-key", notCA, "--ca-cert", notCA, "--ca-key", notCA}, 2, "give one"},
		{"tls-ca without upstream-tls", []string{"--tls-ca", notCA}, 2, "add --upstream-tls"},
		{"bad CA files", []string{"--ca-cert", notCA, "--ca-key", notCA}, 1, "load CA: tls: failed to find any PEM data in certificate input"},
		{"bad roots", []string{"--upstream-tls", "--tls-ca", notCA}, 1, "no PEM certificate in it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bins["record"], append([]string{"proxy", "--listen", "127.0.0.1:0", "--out", out}, tc.args...)...)
			b, _ := cmd.CombinedOutput()
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if cmd.ProcessState.ExitCode() != tc.code || len(lines) != 1 || !strings.Contains(lines[0], tc.want) {
				t.Fatalf("exit %d, output %q; want %d and one line with %q", cmd.ProcessState.ExitCode(), b, tc.code, tc.want)
			}
		})
	}
}

// TestLiveTLSKeyLog: `record live --tls-keylog` of a TLS 1.3 client that
// writes a key log gives a pcapng that replay's reader and Wireshark both
// open decrypted, with no key log beside it.
func TestLiveTLSKeyLog(t *testing.T) {
	requireRoot(t)
	tshark := testproc.NeedTool(t, "tshark", "tshark")
	dir := t.TempDir()
	keyLog := filepath.Join(dir, "keys.log")
	out := filepath.Join(dir, "live-tls.pcapng")
	srv := tlsEchoServer(t)
	_, port, _ := net.SplitHostPort(srv)
	rec := start(t, "record", "live", "--iface", "lo", "--port", port, "--proto", "tcp", "--out", out, "--tls-keylog", keyLog)
	rec.waitFor(t, "capturing on lo")
	kl, err := os.Create(keyLog)
	if err != nil {
		t.Fatal(err)
	}
	sent := [][]byte{[]byte("hello over tls"), []byte("second message"), []byte("bye")}
	c, err := tls.Dial("tcp", srv, &tls.Config{InsecureSkipVerify: true, KeyLogWriter: kl, ServerName: "live.test", MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	for _, m := range sent {
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, len(m))); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	kl.Close()
	time.Sleep(200 * time.Millisecond)
	if err := rec.stop(t, os.Interrupt); err != nil {
		t.Fatalf("record live: %v\n%s", err, rec.out.String())
	}
	if !strings.Contains(rec.out.String(), "added the TLS secrets of 1 connections") {
		t.Fatalf("no secrets line:\n%s", rec.out.String())
	}
	cp, err := capture.ReadFile(out, capture.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Flows) != 1 {
		t.Fatalf("%d flows", len(cp.Flows))
	}
	f := cp.Flows[0]
	if f.TLS == nil || f.TLS.Plaintext != capture.PlaintextKeyLog || f.TLS.SNI != "live.test" {
		t.Fatalf("TLS %+v; notes %q", f.TLS, f.Notes)
	}
	for i, m := range sent {
		if i >= len(f.ClientFrames) || !bytes.Equal(f.ClientFrames[i].Bytes, m) || !bytes.Equal(f.ServerFrames[i].Bytes, m) {
			t.Fatalf("frame %d: want %q; client %d frames, server %d", i, m, len(f.ClientFrames), len(f.ServerFrames))
		}
	}
	// Wireshark reads the secrets from the file too.
	b, err := exec.Command(tshark, "-n", "-r", out, "-q", "-z", "follow,tls,ascii,0").CombinedOutput()
	if err != nil || !strings.Contains(string(b), "hello over tls") || !strings.Contains(string(b), "second message") {
		t.Fatalf("tshark does not decrypt it: %v\n%s", err, b)
	}
}

// tlsEchoServer echoes over TLS on 127.0.0.1.
func tlsEchoServer(t *testing.T) string {
	t.Helper()
	cert := testproc.SelfSigned(t, time.Now().Add(time.Hour), "live.test")
	return testproc.ServeTLS(t, &tls.Config{Certificates: []tls.Certificate{cert}}, func(c net.Conn) { _, _ = io.Copy(c, c) })
}

// TestLiveKeyLogNeedsPcapng: the secrets need a .pcapng, said before
// anything is captured.
func TestLiveKeyLogNeedsPcapng(t *testing.T) {
	cmd := exec.Command(bins["record"], "live", "--iface", "lo", "--out", filepath.Join(t.TempDir(), "x.pcap"), "--tls-keylog", "keys.log")
	b, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() == 0 || !strings.Contains(string(b), "is a .pcap, which has no room for decryption secrets: write a .pcapng") {
		t.Fatalf("exit %d:\n%s", cmd.ProcessState.ExitCode(), b)
	}
}
