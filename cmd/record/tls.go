package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/capture"
)

// tlsFlags are record proxy's TLS flags.
type tlsFlags struct {
	cert, key, caCert, caKey string
	upstream, insecure       bool
	upstreamCA, upstreamName string
}

func (tf *tlsFlags) flags(f *pflag.FlagSet) {
	f.StringVar(&tf.cert, "tls-cert", "", "serve clients TLS with this certificate (PEM; with --tls-key)")
	f.StringVar(&tf.key, "tls-key", "", "the private key of --tls-cert (PEM)")
	f.StringVar(&tf.caCert, "ca-cert", "", "serve clients TLS with a certificate minted per server name by this CA (record ca writes one; with --ca-key)")
	f.StringVar(&tf.caKey, "ca-key", "", "the private key of --ca-cert (PEM)")
	f.BoolVar(&tf.upstream, "upstream-tls", false, "speak TLS to the upstream")
	f.StringVar(&tf.upstreamCA, "tls-ca", "", "verify the upstream's certificate against these roots (PEM; default: the system's)")
	f.BoolVar(&tf.insecure, "tls-insecure", false, "do not verify the upstream's certificate (said loudly at the start)")
	f.StringVar(&tf.upstreamName, "upstream-server-name", "", "the name to send the upstream (SNI) and verify its certificate for (default: the client's SNI, else --upstream's host)")
}

// proxyTLS is the proxy's TLS set-up; cfg nil for none.
type proxyTLS struct{ cfg *capture.ProxyTLS }

func (p proxyTLS) terminates() bool { return p.cfg != nil && (p.cfg.Cert != nil || p.cfg.CA != nil) }

// down and up describe each side for the start line.
func (p proxyTLS) down() string {
	switch {
	case p.cfg == nil || !p.terminates():
		return ""
	case p.cfg.Cert != nil:
		return "; TLS terminated with --tls-cert"
	}
	return "; TLS terminated with certificates minted by --ca-cert"
}

func (p proxyTLS) up() string {
	if p.cfg == nil || !p.cfg.Upstream {
		return ""
	}
	return " over TLS"
}

// config checks the flags and loads what they name.
func (tf *tlsFlags) config(upstream string, stderr io.Writer) (proxyTLS, error) {
	switch {
	case (tf.cert == "") != (tf.key == ""):
		return proxyTLS{}, usageError(errors.New("--tls-cert and --tls-key go together"))
	case (tf.caCert == "") != (tf.caKey == ""):
		return proxyTLS{}, usageError(errors.New("--ca-cert and --ca-key go together"))
	case tf.cert != "" && tf.caCert != "":
		return proxyTLS{}, usageError(errors.New("--tls-cert and --ca-cert: give one (a fixed certificate, or one minted per server name)"))
	case !tf.upstream && (tf.upstreamCA != "" || tf.insecure || tf.upstreamName != ""):
		return proxyTLS{}, usageError(errors.New("--tls-ca, --tls-insecure and --upstream-server-name are for the upstream's TLS: add --upstream-tls"))
	case tf.upstreamCA != "" && tf.insecure:
		return proxyTLS{}, usageError(errors.New("--tls-ca and --tls-insecure: give one"))
	}
	if tf.cert == "" && tf.caCert == "" && !tf.upstream {
		return proxyTLS{}, nil
	}
	host, _, err := net.SplitHostPort(upstream)
	if err != nil {
		return proxyTLS{}, usageError(fmt.Errorf("--upstream %q: %w", upstream, err))
	}
	cfg := &capture.ProxyTLS{DefaultName: host, Upstream: tf.upstream, Insecure: tf.insecure, ServerName: tf.upstreamName}
	if tf.cert != "" {
		pair, err := tls.LoadX509KeyPair(tf.cert, tf.key)
		if err != nil {
			return proxyTLS{}, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		cfg.Cert = &pair
	}
	if tf.caCert != "" {
		if cfg.CA, err = capture.LoadCA(tf.caCert, tf.caKey); err != nil {
			return proxyTLS{}, err
		}
	}
	if tf.upstreamCA != "" {
		pem, err := os.ReadFile(tf.upstreamCA)
		if err != nil {
			return proxyTLS{}, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.Roots = x509.NewCertPool()
		if !cfg.Roots.AppendCertsFromPEM(pem) {
			return proxyTLS{}, fmt.Errorf("--tls-ca %s: no PEM certificate in it", tf.upstreamCA)
		}
	}
	if tf.insecure {
		fmt.Fprintf(stderr, "record: WARNING: --tls-insecure: the upstream's certificate is NOT verified: anyone between the proxy and %s can read and change the traffic\n", upstream)
	}
	return proxyTLS{cfg}, nil
}

// caCmd is `record ca`: a CA for the proxy to mint certificates with.
func caCmd(stderr io.Writer) *cobra.Command {
	var certPath, keyPath string
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "write a CA certificate and key for record proxy --ca-cert/--ca-key (trust the certificate once)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			spki, err := capture.WriteCA(certPath, keyPath)
			if err != nil {
				return err
			}
			fmt.Fprintf(stderr, `record: wrote the CA certificate %[1]s and its key %[2]s (keep the key private: whoever has it can impersonate any server to a client that trusts the CA)
trust the certificate once in the client you record, e.g.:
  curl --cacert %[1]s ...;  python: ssl.create_default_context(cafile="%[1]s");  node: NODE_EXTRA_CA_CERTS=%[1]s
  chromium --ignore-certificate-errors-spki-list=%[3]s ...
  or its NSS store: certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n reprise -i %[1]s
then record through it: record proxy --ca-cert %[1]s --ca-key %[2]s --listen ... --upstream ... --out session.pcapng
`, certPath, keyPath, spki)
			return nil
		},
	}
	cmd.Flags().StringVar(&certPath, "cert", "reprise-ca.pem", "where to write the CA certificate (PEM)")
	cmd.Flags().StringVar(&keyPath, "key", "reprise-ca-key.pem", "where to write the CA private key (PEM, mode 0600)")
	return cmd
}
