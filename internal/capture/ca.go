package capture

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"
)

// CA is the recording proxy's own certificate authority: the user trusts
// its certificate once (`record ca`), and the proxy mints a leaf for each
// server name its clients ask for, so it can terminate their TLS.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	mu   sync.Mutex
	// leaves are the certificates minted so far, by server name; at most
	// maxLeaves (then the cache starts over).
	leaves map[string]*tls.Certificate
}

const (
	// caValidity is how long a CA from WriteCA is valid.
	caValidity = 365 * 24 * time.Hour
	// leafValidity is how long a minted leaf is valid (browsers refuse
	// leaves valid for over 398 days; a day is plenty for a recording).
	leafValidity = 7 * 24 * time.Hour
	// maxLeaves bounds the minted certificates kept.
	maxLeaves = 1024
)

// WriteCA creates a CA key and certificate and writes them, PEM, to
// certPath and keyPath (the key readable by its owner only). It returns
// the certificate's SPKI hash in base64, which Chromium's
// --ignore-certificate-errors-spki-list takes.
func WriteCA(certPath, keyPath string) (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "reprise record proxy CA (" + host + ")", Organization: []string{"reprise"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", err
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", kder, 0o600); err != nil {
		return "", err
	}
	if err := writePEM(certPath, "CERTIFICATE", der, 0o644); err != nil {
		return "", err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", err
	}
	return SPKIHash(cert), nil
}

// SPKIHash is the base64 SHA-256 of a certificate's public key info.
func SPKIHash(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	err = pem.Encode(f, &pem.Block{Type: typ, Bytes: der})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func randomSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// LoadCA reads a CA certificate and key (PEM) written by WriteCA or any
// other CA whose key is ECDSA, RSA or Ed25519.
func LoadCA(certPath, keyPath string) (*CA, error) {
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("load CA: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("load CA %s: %w", certPath, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("load CA %s: the certificate is not a CA (give `record ca`'s, or use --tls-cert/--tls-key for a server certificate)", certPath)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, fmt.Errorf("load CA %s: expired on %s: make a new one with record ca", certPath, cert.NotAfter.Format(time.DateOnly))
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("load CA %s: the key is not ECDSA (record ca writes one)", keyPath)
	}
	return &CA{cert: cert, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// Leaf returns a certificate for name (a DNS name or an IP address),
// signed by the CA, minting it on first use.
func (ca *CA) Leaf(name string) (*tls.Certificate, error) {
	if name == "" {
		return nil, errors.New("no server name to mint a certificate for")
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c := ca.leaves[name]; c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"reprise record proxy"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("mint a certificate for %s: %w", name, err)
	}
	leaf := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves)
	}
	ca.leaves[name] = leaf
	return leaf, nil
}
