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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/reprise-harness/reprise/internal/tlsrec"
)

// The fleet's TLS: every stream transport (TCP framings, WebSocket) can
// run over TLS. The tls.Config is built once per fleet (New) and shared;
// the handshake runs in the client's login goroutine, never on a scheduler.
//
// A logged-in client's writes stay non-blocking (send.go): its tls.Conn
// writes records into a tlsWire, which hands the ciphertext to the
// scheduler's raw write and send backlog instead of to a blocking socket
// write. During the login (handshake, upgrade, first steps) the wire
// writes through to the socket, as a plain connection does. Reads go
// through the tls.Conn.

// TLS is how the fleet speaks TLS (--tls and the flags beside it). The
// zero value is plaintext.
type TLS struct {
	// Enabled turns TLS on: at connect, or where the profile upgrades in
	// band (a login step's starttls: NATS).
	Enabled bool
	// CAFile holds PEM roots to verify the server with; empty: the
	// system's. Insecure skips verification (said at start).
	CAFile   string
	Insecure bool
	// ServerName is the SNI and the name verified; empty: the target's
	// host.
	ServerName string
	// CertFile and KeyFile are a client certificate and its key (PEM).
	CertFile, KeyFile string
	// MinVersion is the lowest version offered; 0: crypto/tls's (1.2).
	MinVersion TLSVersion
	// ALPN are the protocols offered, in order (the recording's, or
	// --tls-alpn); none: no ALPN extension.
	ALPN []string
	// Resume offers session resumption (tickets, through a session cache
	// shared by the fleet): a reconnect storm with and without it costs a
	// server very differently.
	Resume bool
}

// TLSVersion is a TLS protocol version as a flag: "1.2" or "1.3".
type TLSVersion uint16

// Set parses "1.2" or "1.3" (also "tls1.2", "TLS1.3").
func (v *TLSVersion) Set(s string) error {
	switch strings.TrimPrefix(strings.ToLower(s), "tls") {
	case "1.2":
		*v = tls.VersionTLS12
	case "1.3":
		*v = tls.VersionTLS13
	case "", "0":
		*v = 0
	default:
		return fmt.Errorf("%q: 1.2 or 1.3", s)
	}
	return nil
}

func (v *TLSVersion) String() string {
	if v == nil || *v == 0 {
		return ""
	}
	return tls.VersionName(uint16(*v))
}

// Type names the flag's value in the usage.
func (v *TLSVersion) Type() string { return "version" }

// validate checks the options' combinations (no file read).
func (t *TLS) validate() error {
	on := t.CAFile != "" || t.Insecure || t.ServerName != "" || t.CertFile != "" || t.KeyFile != "" || t.MinVersion != 0 || len(t.ALPN) > 0 || t.Resume
	switch {
	case on && !t.Enabled:
		return badf("--tls-* flags without --tls (or a wss://, mqtts://, tls:// target): give --tls")
	case t.Insecure && t.CAFile != "":
		return badf("--tls-insecure with --tls-ca: pick one (verify against the CA, or not at all)")
	case (t.CertFile == "") != (t.KeyFile == ""):
		return badf("--tls-cert and --tls-key go together")
	}
	return nil
}

// config builds the fleet's one tls.Config for target (host:port): its
// roots, client certificate and session cache.
func (t *TLS) config(target string, clients int) (*tls.Config, error) {
	name := t.ServerName
	if name == "" {
		host, _, err := net.SplitHostPort(target)
		if err != nil {
			return nil, badf("--target %q: %v", target, err)
		}
		name = host
	}
	c := &tls.Config{
		ServerName:         name,
		InsecureSkipVerify: t.Insecure,
		MinVersion:         uint16(t.MinVersion),
		NextProtos:         t.ALPN,
	}
	if c.MinVersion == 0 {
		c.MinVersion = tls.VersionTLS12
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, badf("--tls-ca: %v", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, badf("--tls-ca %s: no PEM certificate in it", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, badf("--tls-cert/--tls-key: %v", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	if t.Resume {
		// One entry per server name is all a fleet of one target uses;
		// the capacity is for the rare target that hands out tickets per
		// client and reads them back.
		c.ClientSessionCache = tls.NewLRUClientSessionCache(min(clients, 1024))
	} else {
		c.SessionTicketsDisabled = true
	}
	return c, nil
}

// tlsWire is what a client's tls.Conn writes to: the socket itself during
// the login, the client's pending ciphertext once it is on a scheduler
// (buffered), which the scheduler then writes without blocking. Reads and
// everything else are the socket's.
type tlsWire struct {
	*net.TCPConn
	mu       sync.Mutex
	buffered bool
	out      []byte
	// Once feeding (the reader's, after the login's blocking reads), the
	// tls.Conn reads in: the bytes the client's raw reader got, then
	// errWouldBlock, which tls takes as temporary (it keeps a partial
	// record for the next feed).
	feeding bool
	in      []byte
	// rt follows the records for the detach (tlsdetach.go); nil once
	// detached or given up (the reader's, and the writers' under mu).
	rt *recTracker
}

// Read reads the socket, or once feeding what was fed.
func (w *tlsWire) Read(b []byte) (int, error) {
	if !w.feeding {
		n, err := w.TCPConn.Read(b)
		if w.rt != nil {
			w.rt.sawRead(b[:n])
		}
		return n, err
	}
	if len(w.in) == 0 {
		return 0, errWouldBlock
	}
	n := copy(b, w.in)
	if w.rt != nil {
		w.rt.sawRead(b[:n])
	}
	w.in = w.in[n:]
	return n, nil
}

// errWouldBlock ends a fed read: a temporary net.Error, so the tls.Conn
// keeps its state and reads on at the next feed.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "tls: fed bytes read" }
func (wouldBlock) Timeout() bool   { return false }
func (wouldBlock) Temporary() bool { return true }

// openTLS opens the records in b (ciphertext a raw read got; nil to open
// what the tls.Conn holds already) and hands the plaintext to take in
// one piece per buffer, as a plain connection's read would: one consume
// for many records. false stops the reader: take said so, or the
// connection failed (c.tlsErr).
func (c *client) openTLS(b []byte, take func([]byte) bool) bool {
	if c.recs != nil {
		return c.openRecords(b, take)
	}
	c.wire.in = b
	pb := getReadBuf(max(len(b), readBuf))
	defer putReadBuf(pb)
	buf, n := *pb, 0
	for {
		m, err := c.tls.Read(buf[n:])
		n += m
		if n == len(buf) || (err != nil && n > 0) {
			if !take(buf[:n]) {
				return false
			}
			n = 0
		}
		switch {
		case err == errWouldBlock:
			if n > 0 && !take(buf[:n]) {
				return false
			}
			c.maybeDetach()
			return true
		case err != nil:
			c.tlsErr = err
			return false
		}
	}
}

// tlsEnded is the reason a TLS connection's reads stopped when the
// stream reader returned without an error: the one openTLS met, if any.
func (c *client) tlsEnded(reason Disconnect, res chan<- LoginResult) Disconnect {
	if err := c.tlsErr; err != nil {
		c.tlsErr = nil
		var op *net.OpError
		if !c.joined.Load() && !c.stopping.Load() && errors.As(err, &op) && op.Op == "remote error" {
			// TLS 1.3 tells a refused client certificate after the
			// client's handshake: at its first read.
			c.loginFailed(tlsFailure(err), res)
			return Disconnect{}
		}
		return c.readEnded(err, res)
	}
	return reason
}

// Write writes through to the socket, or keeps b for take once buffered.
func (w *tlsWire) Write(b []byte) (int, error) {
	w.mu.Lock()
	if w.rt != nil && w.rt.counting {
		w.rt.sawWrite(b)
	}
	if !w.buffered {
		w.mu.Unlock()
		return w.TCPConn.Write(b)
	}
	w.out = append(w.out, b...)
	w.mu.Unlock()
	return len(b), nil
}

// buffer makes later writes wait in the wire for take.
func (w *tlsWire) buffer() {
	w.mu.Lock()
	w.buffered = true
	w.mu.Unlock()
}

// take appends the ciphertext written since the last take to dst.
func (w *tlsWire) take(dst []byte) []byte {
	w.mu.Lock()
	dst = append(dst, w.out...)
	w.out = w.out[:0]
	if cap(w.out) > maxReadBuf { // a burst's buffer is not kept
		w.out = nil
	}
	w.mu.Unlock()
	return dst
}

// seal encrypts plain (a logged-in client's frames) and appends the
// records to dst; the caller holds wmu, so records leave in the order
// they were sealed.
func (c *client) seal(dst, plain []byte) []byte {
	if c.recs != nil {
		return c.recs.wr.Seal(dst, tlsrec.TypeApplicationData, plain)
	}
	if len(plain) == 0 {
		return c.wire.take(dst)
	}
	// The wire never fails a buffered write, and the handshake is done:
	// an error here is the connection's sticky one (the reader sees it).
	c.tls.Write(plain)
	return c.wire.take(dst)
}

// startTLS runs the TLS handshake on the client's TCP connection (at
// connect, or in band where the profile upgrades), timed into the
// handshake histogram; the connection then reads and writes through TLS.
func (c *client) startTLS(ctx context.Context, deadline time.Time) error {
	tcp, ok := c.conn.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("tls over %T", c.conn)
	}
	c.wire = &tlsWire{TCPConn: tcp}
	cfg := c.f.tlsCfg
	if c.f.detachTLS {
		// The client's own key log: the secrets its detach needs.
		c.wire.rt = &recTracker{}
		cfg = cfg.Clone()
		cfg.KeyLogWriter = &c.wire.rt.keys
	}
	tc := tls.Client(c.wire, cfg)
	c.conn.SetDeadline(deadline)
	start := time.Now()
	hctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return err
	}
	c.f.hs.record(time.Since(start), tc.ConnectionState())
	if rt := c.wire.rt; rt != nil {
		c.wire.mu.Lock()
		rt.counting = true // the client's records from now on are under its application key
		c.wire.mu.Unlock()
	}
	c.sock = &tlsSock{TCPConn: tcp}
	c.sock.tc.Store(tc)
	c.tls, c.conn, c.tlsOn = tc, c.sock, true
	return nil
}

// handshakes are the fleet's TLS handshake figures: a histogram of their
// durations (µs), how many resumed a session, and the peak rate over one
// second windows (the tick's).
type handshakes struct {
	mu      sync.Mutex
	h       *hdrhistogram.Histogram
	full    int64
	resumed int64
	version uint16
	alpn    string
	first   time.Time
	last    time.Time
	// window counts handshakes since the tick's last look; peak is the
	// highest per-second count seen.
	window atomic.Int64
	peak   atomic.Int64
	// detached counts clients that dropped their tls.Conn (tlsdetach.go).
	detached atomic.Int64
}

func newHandshakes() *handshakes { return &handshakes{h: newHist()} }

func (s *handshakes) record(d time.Duration, st tls.ConnectionState) {
	now := time.Now()
	s.mu.Lock()
	s.h.RecordValue(clampHist(d.Microseconds()))
	if st.DidResume {
		s.resumed++
	} else {
		s.full++
	}
	s.version, s.alpn = st.Version, st.NegotiatedProtocol
	if s.first.IsZero() {
		s.first = now
	}
	s.last = now
	s.mu.Unlock()
	s.window.Add(1)
}

// tick folds the last second's handshakes into the peak rate.
func (s *handshakes) tick(dt time.Duration) {
	n := s.window.Swap(0)
	if dt <= 0 || n == 0 {
		return
	}
	rate := int64(float64(n) / dt.Seconds())
	for {
		p := s.peak.Load()
		if rate <= p || s.peak.CompareAndSwap(p, rate) {
			return
		}
	}
}

// TLSSummary is how the fleet spoke TLS: what was negotiated, the
// handshakes' times and the rate the server sustained.
type TLSSummary struct {
	// Version and ALPN are the last handshake's (every client speaks to
	// one target with one config).
	Version string `json:"version"`
	ALPN    string `json:"alpn,omitempty"`
	// Resumption is "tickets" (--tls-resume) or "off".
	Resumption string `json:"resumption"`
	// Handshakes completed: full ones and resumed ones.
	Handshakes int64 `json:"handshakes"`
	Resumed    int64 `json:"resumed"`
	// Detached clients sealed and opened their records themselves once
	// logged in, without crypto/tls's connection state (TLS 1.3, no
	// --tls-resume): the fleet's cheaper path.
	Detached int64 `json:"record_layer,omitempty"`
	// HandshakeMS are the handshakes' durations (TCP connect excluded,
	// login excluded).
	HandshakeMS Quantiles `json:"handshake_ms"`
	// RatePerS is the handshakes per second from the first to the last;
	// PeakPerS the most in one second (the server sustained both).
	RatePerS float64 `json:"handshakes_per_s"`
	PeakPerS int64   `json:"handshakes_per_s_peak"`
	// HandshakeUS is the histogram, lossless (HdrHistogram V2, base64),
	// for merging shards.
	HandshakeUS string `json:"handshake_us"`
}

// summary is the TLS part of the fleet's summary, nil without TLS.
func (s *handshakes) summary(t *TLS) (*TLSSummary, error) {
	if s == nil {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	enc, err := s.h.EncodeV2()
	if err != nil {
		return nil, fmt.Errorf("encode handshake histogram: %w", err)
	}
	q := quantilesMS(s.h, 50, 90, 99, 100)
	out := &TLSSummary{
		ALPN:        s.alpn,
		Resumption:  "off",
		Handshakes:  s.full + s.resumed,
		Resumed:     s.resumed,
		Detached:    s.detached.Load(),
		HandshakeMS: Quantiles{P50: q[0], P90: &q[1], P99: q[2], Max: &q[3], none: s.h.TotalCount() == 0},
		PeakPerS:    s.peak.Load(),
		HandshakeUS: string(enc),
	}
	if s.version != 0 {
		out.Version = tls.VersionName(s.version)
	}
	if t.Resume {
		out.Resumption = "tickets"
	}
	if span := s.last.Sub(s.first); span > 0 && out.Handshakes > 1 {
		out.RatePerS = float64(out.Handshakes-1) / span.Seconds()
	}
	return out, nil
}

// line is the summary's row.
func (t *TLSSummary) line() string {
	hs := "none"
	if !t.HandshakeMS.None() {
		hs = fmt.Sprintf("p50 %.3f ms, p99 %.3f ms", t.HandshakeMS.P50, t.HandshakeMS.P99)
	}
	return fmt.Sprintf("%s%s, resumption %s: %d handshakes (%d resumed), %s, %.0f/s (peak %d/s)",
		t.Version, alpnPart(t.ALPN), t.Resumption, t.Handshakes, t.Resumed, hs, t.RatePerS, t.PeakPerS)
}

func alpnPart(a string) string {
	if a == "" {
		return ""
	}
	return " ALPN " + a
}

// tlsFailure names a failed handshake: its reason, and the one line that
// says what the peer or the verification said.
func tlsFailure(err error) LoginResult {
	code, detail := classifyTLS(err)
	return LoginResult{code: code, detail: detail}
}

func classifyTLS(err error) (LoginCode, string) {
	var (
		unknown  x509.UnknownAuthorityError
		invalid  x509.CertificateInvalidError
		hostname x509.HostnameError
		verify   *tls.CertificateVerificationError
		header   tls.RecordHeaderError
		op       *net.OpError
	)
	switch {
	case errors.As(err, &unknown):
		return LoginTLSUnknownAuthority, "the server's certificate is signed by an authority not trusted (" + unknown.Error() + "): give its CA with --tls-ca"
	case errors.As(err, &invalid):
		return LoginTLSBadCertificate, "the server's certificate is not valid: " + invalid.Error()
	case errors.As(err, &hostname):
		return LoginTLSBadCertificate, "the server's certificate does not name the host: " + hostname.Error() + " (--tls-server-name sets the name checked)"
	case errors.As(err, &verify):
		return LoginTLSBadCertificate, "the server's certificate failed verification: " + verify.Error()
	case errors.As(err, &header):
		return LoginTLSRequired, fmt.Sprintf("the server answered the TLS ClientHello with %s, not a TLS record: the target does not speak TLS (drop --tls, or use its TLS port)", quoteBytes(header.RecordHeader[:]))
	case errors.As(err, &op) && op.Op == "remote error":
		alert := op.Err.Error()
		return alertCode(alert), "the server refused the handshake with the alert \"" + strings.TrimPrefix(alert, "tls: ") + "\""
	case isTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return LoginTLSHandshakeTimeout, "the TLS handshake did not finish within --login-timeout"
	case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return LoginTLSClosed, "the server closed the connection during the TLS handshake without an alert (is the target a TLS port?)"
	case strings.Contains(err.Error(), "protocol version"):
		return LoginTLSProtocolVersion, err.Error()
	}
	return LoginTLSError, err.Error()
}

// alertCode is the reason of a TLS alert the server sent (RFC 8446 §6).
func alertCode(alert string) LoginCode {
	switch strings.TrimPrefix(alert, "tls: ") {
	case "bad certificate", "unsupported certificate", "certificate revoked", "certificate expired",
		"certificate unknown", "unknown certificate authority", "certificate required", "access denied":
		return LoginTLSBadCertificate
	case "protocol version not supported", "inappropriate fallback":
		return LoginTLSProtocolVersion
	}
	return LoginTLSError
}

// looksTLS says whether b starts like a TLS record (handshake or alert, a
// 3.x version): what a TLS port answers a plaintext login with.
func looksTLS(b []byte) bool {
	return len(b) >= 3 && (b[0] == 0x15 || b[0] == 0x16) && b[1] == 3 && b[2] <= 4
}

// setupTLS builds the fleet's TLS config once (New), and says at the
// start what must not pass unnoticed.
func (f *Fleet) setupTLS() error {
	t := &f.cfg.TLS
	if !t.Enabled {
		return nil
	}
	if f.udp {
		return badf("--tls over udp: TLS runs over the stream transports (tcp, websocket); DTLS is not supported")
	}
	cfg, err := t.config(f.cfg.Target, f.cfg.Shard.Clients(f.cfg.Clients))
	if err != nil {
		return err
	}
	f.tlsCfg, f.hs = cfg, newHandshakes()
	// Tickets go to crypto/tls's session cache, which a detached client
	// no longer feeds.
	f.detachTLS = !t.Resume
	if t.Insecure {
		f.warn("WARNING: --tls-insecure: the server's certificate is NOT verified; anyone between the fleet and %s can read and change this run's traffic", f.cfg.Target)
	}
	return nil
}

// tlsFailed says a TLS failure once per reason, with its line: the peer's
// alert or what the verification found.
func (f *Fleet) tlsFailed(r LoginResult) {
	if _, said := f.tlsWarned.LoadOrStore(r.code, struct{}{}); !said {
		f.warn("WARNING: login failed %s: %s", r, r.detail)
	}
}

// sealedEnds moves a turn's frame end offsets from its plaintext (pt
// bytes) to its records (ct bytes), in proportion: they only count the
// frames a partial write left waiting.
func sealedEnds(ends []int, pt, ct int) {
	if pt == 0 {
		return
	}
	for i, e := range ends {
		ends[i] = e * ct / pt
	}
}

// tlsAnswer says whether a plaintext login was answered with a TLS record
// (the target is a TLS port): the login then fails as tls_required.
//
// A plaintext login the server closed or reset without a word after the
// step where the profile starts TLS in band (NATS: its INFO said
// tls_required, and it then reads a handshake) fails as tls_required too.
func (c *client) tlsAnswer(reason LoginCode) (LoginResult, bool) {
	if c.tlsOn {
		return LoginResult{}, false
	}
	if c.plainPastTLS && (reason == LoginClosed || reason == LoginReset) {
		return LoginResult{code: LoginTLSRequired, detail: "the server closed the connection after the login step where the profile starts TLS in band (starttls): it wants TLS there; give --tls"}, true
	}
	if !looksTLS(c.first) {
		return LoginResult{}, false
	}
	return LoginResult{code: LoginTLSRequired, detail: fmt.Sprintf("the server answered the plaintext login with a TLS record (%s): the target speaks TLS; give --tls (or a wss://, mqtts://, tls:// target)", quoteBytes(c.first))}, true
}

// prom is the handshake histogram as Prometheus buckets, with the full
// and resumed counts.
func (s *handshakes) prom(bounds []float64) (b map[float64]uint64, n uint64, sum float64, full, resumed int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, n, sum = histBuckets(s.h, bounds)
	return b, n, sum, s.full, s.resumed
}

// speaksTLS says whether target completes a TLS handshake (unverified,
// bounded by 2 s): asked once, when a plaintext fleet's first login was
// reset or closed without a word, as a TLS port does to a plaintext
// client that OpenSSL serves.
func speaksTLS(ctx context.Context, target string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		return false
	}
	defer conn.Close()
	host, _, _ := net.SplitHostPort(target)
	tc := tls.Client(conn, &tls.Config{ServerName: host, InsecureSkipVerify: true}) //nolint:gosec // only asks whether it speaks TLS
	err = tc.HandshakeContext(ctx)
	var op *net.OpError
	return err == nil || errors.As(err, &op) && op.Op == "remote error"
}
