package capture

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestProxyTerminatesTLS: a client that trusts the CA of WriteCA talks
// TLS to the proxy, which mints a certificate for its SNI and forwards
// the plaintext to the real relay: the capture holds the reprise frames
// the client sent, and its note says the flow was TLS.
func TestProxyTerminatesTLS(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	spki, err := WriteCA(certPath, keyPath)
	if err != nil || len(spki) != 44 {
		t.Fatalf("WriteCA: %q %v", spki, err)
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("CA key mode: %v %v", fi.Mode(), err)
	}
	ca, err := LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	pem, _ := os.ReadFile(certPath)
	roots.AppendCertsFromPEM(pem)
	addr, stop := startRelay(t)
	defer stop()
	sent, _ := sessionFrames()
	path, st := runProxy(t, addr, "tls.pcapng", &ProxyTLS{CA: ca, DefaultName: "127.0.0.1"}, func(a string) error {
		c, err := tls.Dial("tcp", a, &tls.Config{RootCAs: roots, ServerName: "relay.test", NextProtos: []string{"h2", "reprise"}})
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if got := c.ConnectionState().NegotiatedProtocol; got != "reprise" {
			t.Errorf("ALPN %q, want reprise (h2 is not recorded)", got)
		}
		for _, f := range sent {
			if _, err := c.Write(f); err != nil {
				return err
			}
		}
		if err := c.CloseWrite(); err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, c) // until the relay closes in turn
		return nil
	})
	if st.TCPConns != 1 || st.TLSFailures != 0 {
		t.Fatalf("stats %+v", st)
	}
	c := readPath(t, path)
	f := onlyFlow(t, c)
	want := TLSInfo{Version: "TLS 1.3", SNI: "relay.test", ALPN: "reprise", Cipher: "TLS_AES_128_GCM_SHA256", Plaintext: PlaintextProxy}
	if f.TLS == nil || *f.TLS != want {
		t.Fatalf("TLS %+v, want %+v", f.TLS, want)
	}
	equalFrames(t, "client", f.ClientFrames, sent)
	if len(f.ServerFrames) == 0 || kind(f.ServerFrames[0]) != 0x81 {
		t.Fatalf("server frames: %d, first %v", len(f.ServerFrames), f.ServerFrames)
	}
	if err := c.Undecrypted(-1); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := Inspection.Write(&out, c, -1, nil, false); err != nil || !strings.Contains(out.String(), "TLS 1.3 (SNI relay.test, ALPN reprise, TLS_AES_128_GCM_SHA256): terminated by record proxy") {
		t.Fatalf("summary %v:\n%s", err, out.String())
	}
}

// TestProxyUpstreamTLS: TLS on both sides, the upstream verified with
// its CA; without it the handshake fails and the proxy says what to do.
func TestProxyUpstreamTLS(t *testing.T) {
	upCert := testCert(t)
	srv := greetingServerWith(t, upCert)
	leaf, err := x509.ParseCertificate(upCert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(leaf)
	expiredCert := testCertUntil(t, time.Now().Add(-time.Minute))
	expired := greetingServerWith(t, expiredCert)
	expiredLeaf, err := x509.ParseCertificate(expiredCert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	expiredRoots := x509.NewCertPool()
	expiredRoots.AddCert(expiredLeaf)
	proxyCert := testCert(t)
	for _, tc := range []struct {
		name   string
		srv    string
		roots  *x509.CertPool
		failed string
	}{
		{"verified", srv, roots, ""},
		{"unknown authority", srv, x509.NewCertPool(), "certificate signed by unknown authority (give the upstream's CA with --tls-ca, or --tls-insecure)"},
		{"expired", expired, expiredRoots, "certificate has expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, st := runProxy(t, tc.srv, "tls.pcapng", &ProxyTLS{Cert: &proxyCert, Upstream: true, Roots: tc.roots, ServerName: "localhost"}, func(a string) error {
				err := goTLSClient(&tls.Config{}, io.Discard)(a)
				if tc.failed != "" {
					return nil // the proxy hangs up on it
				}
				return err
			})
			if tc.failed != "" {
				if st.TLSFailures != 1 || !strings.Contains(st.LastTLSError, tc.failed) {
					t.Fatalf("stats %+v, want the failure %q", st, tc.failed)
				}
				return
			}
			c, err := ReadFile(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			f := onlyFlow(t, c)
			if f.TLS == nil || f.TLS.ALPN != "reprise-test" || f.TLS.SNI != "reprise.test" {
				t.Fatalf("TLS %+v", f.TLS)
			}
			// The proxy's own writes cut the bytes as its reads came:
			// compare the streams.
			if got, want := bytes.Join(frameBytes(f.ClientFrames), nil), bytes.Join(tlsMessages(), nil); !bytes.Equal(got, want) {
				t.Fatalf("client bytes: %d, want %d", len(got), len(want))
			}
			if got, want := bytes.Join(frameBytes(f.ServerFrames), nil), bytes.Join(tlsGreeting, nil); !bytes.Equal(got, want) {
				t.Fatalf("server bytes: %d, want %d", len(got), len(want))
			}
		})
	}
}
