package fleet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestClassifyTLS: each way a handshake fails has its reason, and its
// line says what the peer or the verification said. A remote alert is
// what crypto/tls returns for one: a net.OpError "remote error" around
// the alert's text.
func TestClassifyTLS(t *testing.T) {
	remote := func(alert string) error { return &net.OpError{Op: "remote error", Err: errors.New("tls: " + alert)} }
	for _, tc := range []struct {
		err        error
		want, line string
	}{
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, "tls_unknown_authority", "--tls-ca"},
		{x509.CertificateInvalidError{Reason: x509.Expired, Detail: "current time is after"}, "tls_bad_certificate", "expired"},
		{x509.HostnameError{Certificate: &x509.Certificate{}, Host: "example.com"}, "tls_bad_certificate", "--tls-server-name"},
		{tls.RecordHeaderError{RecordHeader: [5]byte{'H', 'T', 'T', 'P', '/'}}, "tls_required", `"HTTP/"`},
		{remote("bad certificate"), "tls_bad_certificate", `"bad certificate"`},
		{remote("certificate required"), "tls_bad_certificate", `"certificate required"`},
		{remote("protocol version not supported"), "tls_protocol_version", `"protocol version not supported"`},
		{remote("handshake failure"), "tls_error", `"handshake failure"`},
		{fmt.Errorf("read: %w", os.ErrDeadlineExceeded), "tls_handshake_timeout", "--login-timeout"},
		{context.DeadlineExceeded, "tls_handshake_timeout", "--login-timeout"},
		{io.EOF, "tls_handshake_closed", "TLS port"},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "tls_handshake_closed", "TLS port"},
		{errors.New("tls: server selected unsupported protocol version 301"), "tls_protocol_version", "301"},
	} {
		r := tlsFailure(tc.err)
		if r.String() != tc.want || !strings.Contains(r.Detail(), tc.line) || !r.Code().IsTLS() {
			t.Errorf("%v: %s %q, want %s with %q", tc.err, r, r.Detail(), tc.want, tc.line)
		}
	}
}

// TestLooksTLS: a TLS port's answer to a plaintext login (an alert or a
// handshake record) is told from a protocol's bytes.
func TestLooksTLS(t *testing.T) {
	for _, tc := range []struct {
		b    []byte
		want bool
	}{
		{[]byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46}, true},
		{[]byte{0x16, 0x03, 0x01, 0x00}, true},
		{[]byte{0x20, 0x02, 0x00, 0x00}, false}, // an MQTT CONNACK
		{[]byte("INFO {}"), false},
		{[]byte{0x15, 0x03}, false},
	} {
		if got := looksTLS(tc.b); got != tc.want {
			t.Errorf("looksTLS(% x) = %v", tc.b, got)
		}
	}
}

// TestTLSVersionFlag: --tls-min-version takes 1.2 and 1.3.
func TestTLSVersionFlag(t *testing.T) {
	var v TLSVersion
	for in, want := range map[string]uint16{"1.2": tls.VersionTLS12, "TLS1.3": tls.VersionTLS13, "tls1.2": tls.VersionTLS12} {
		if err := v.Set(in); err != nil || uint16(v) != want {
			t.Errorf("%q: %v %v", in, v, err)
		}
	}
	if err := v.Set("1.1"); err == nil {
		t.Error("1.1 accepted")
	}
}

// TestTLSValidate: --tls-* flags need --tls, and pairs go together.
func TestTLSValidate(t *testing.T) {
	for _, tc := range []struct {
		t    TLS
		want string
	}{
		{TLS{CAFile: "ca.pem"}, "without --tls"},
		{TLS{Enabled: true, CAFile: "ca.pem", Insecure: true}, "pick one"},
		{TLS{Enabled: true, CertFile: "c.pem"}, "go together"},
		{TLS{Enabled: true, Resume: true}, ""},
	} {
		err := tc.t.validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.t, err, tc.want)
		}
	}
}
