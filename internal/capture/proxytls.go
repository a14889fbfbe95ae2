package capture

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// ProxyTLS makes the recording proxy speak TLS: it terminates the
// clients' TLS (with Cert, or a leaf the CA mints per server name), and
// with Upstream speaks TLS again to the upstream, so the capture holds
// the plaintext both ways. Either side may be TLS alone.
type ProxyTLS struct {
	// Cert serves every client (--tls-cert/--tls-key); else CA mints one
	// per server name the client asks for (its SNI, else DefaultName).
	Cert *tls.Certificate
	CA   *CA
	// DefaultName is the name minted for a client that sends no SNI
	// (one that dialled an IP address): the upstream's host by default.
	DefaultName string
	// Upstream: TLS to the upstream, verified against Roots (nil: the
	// system's) for ServerName (default: the client's SNI, else the
	// upstream's host), unless Insecure.
	Upstream   bool
	Roots      *x509.CertPool
	Insecure   bool
	ServerName string
	// HandshakeTimeout bounds each handshake (default 10 s).
	HandshakeTimeout time.Duration
}

// terminates says the proxy serves the clients TLS.
func (t *ProxyTLS) terminates() bool { return t != nil && (t.Cert != nil || t.CA != nil) }

// serverConfig is the clients' side: a certificate per server name, and
// of the protocols a client offers (ALPN) the first one the proxy can
// record as a byte stream: not HTTP/2 or 3, whose framing reprise does not
// replay.
func (t *ProxyTLS) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			cfg := &tls.Config{MinVersion: tls.VersionTLS12}
			for _, p := range hello.SupportedProtos {
				if p != "h2" && p != "h3" {
					cfg.NextProtos = []string{p}
					break
				}
			}
			if t.Cert != nil {
				cfg.Certificates = []tls.Certificate{*t.Cert}
				return cfg, nil
			}
			name := hello.ServerName
			if name == "" {
				name = t.DefaultName
			}
			leaf, err := t.CA.Leaf(name)
			if err != nil {
				return nil, err
			}
			cfg.Certificates = []tls.Certificate{*leaf}
			return cfg, nil
		},
	}
}

// handshakeTimeout is HandshakeTimeout or its default.
func (t *ProxyTLS) handshakeTimeout() time.Duration {
	if t.HandshakeTimeout > 0 {
		return t.HandshakeTimeout
	}
	return 10 * time.Second
}

// acceptTLS runs the handshake with a client and says what it was.
func (t *ProxyTLS) acceptTLS(ctx context.Context, c net.Conn) (*tls.Conn, *TLSInfo, error) {
	tc := tls.Server(c, t.serverConfig())
	hctx, cancel := context.WithTimeout(ctx, t.handshakeTimeout())
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return nil, nil, fmt.Errorf("TLS handshake with client %s: %w", c.RemoteAddr(), explainTLS(err, true))
	}
	st := tc.ConnectionState()
	return tc, &TLSInfo{Version: VersionName(st.Version), SNI: st.ServerName, ALPN: st.NegotiatedProtocol,
		Cipher: tls.CipherSuiteName(st.CipherSuite), Plaintext: PlaintextProxy}, nil
}

// dialTLS runs the handshake with the upstream over up, offering the
// protocol agreed with the client.
func (t *ProxyTLS) dialTLS(ctx context.Context, up net.Conn, host string, client *TLSInfo) (*tls.Conn, error) {
	cfg := &tls.Config{RootCAs: t.Roots, InsecureSkipVerify: t.Insecure, ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if cfg.ServerName == "" && client != nil {
		cfg.ServerName = client.SNI
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	if client != nil && client.ALPN != "" {
		cfg.NextProtos = []string{client.ALPN}
	}
	tc := tls.Client(up, cfg)
	hctx, cancel := context.WithTimeout(ctx, t.handshakeTimeout())
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return nil, fmt.Errorf("TLS handshake with upstream %s: %w", up.RemoteAddr(), explainTLS(err, false))
	}
	return tc, nil
}

// explainTLS adds what to do to the usual handshake failures.
func explainTLS(err error, client bool) error {
	var unknown x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var invalid x509.CertificateInvalidError
	var alert tls.AlertError
	switch {
	case errors.As(err, &unknown):
		return fmt.Errorf("%w (give the upstream's CA with --tls-ca, or --tls-insecure)", err)
	case errors.As(err, &hostErr):
		return fmt.Errorf("%w (--upstream-server-name sets the name to verify)", err)
	case errors.As(err, &invalid):
		return err
	case client && errors.As(err, &alert) && slices.Contains([]tls.AlertError{42, 46, 48}, alert):
		return fmt.Errorf("%w: the client does not trust the proxy's certificate (trust the CA of record ca)", err)
	case client && errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: the client sent no TLS handshake (is it speaking plaintext?)", err)
	}
	var rec tls.RecordHeaderError
	if errors.As(err, &rec) {
		if client {
			return fmt.Errorf("%w: the client speaks plaintext to a TLS port", err)
		}
		return fmt.Errorf("%w: the upstream does not speak TLS (drop --upstream-tls)", err)
	}
	return err
}
