package capture

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// TLS record content types.
const (
	recordCCS       = 20
	recordAlert     = 21
	recordHandshake = 22
	recordAppData   = 23
	recordHeartbeat = 24
)

// Handshake message types reprise acts on.
const (
	hsHelloRequest        = 0
	hsClientHello         = 1
	hsServerHello         = 2
	hsEncryptedExtensions = 8
	hsKeyUpdate           = 24
)

const (
	recordHeader = 5
	// maxRecord is the largest record body TLS allows (2^14 plus the
	// expansion TLS 1.2 permits); a longer one means this is not TLS.
	maxRecord = 1<<14 + 2048
	// maxHandshake caps a plaintext handshake message reprise reads
	// (ClientHello, ServerHello); larger ones (certificate chains) are
	// skipped without being held.
	maxHandshake = 64 << 10
	// maxBlindHandshake is how many encrypted TLS 1.3 handshake records a
	// direction may send before its first application record when the
	// key log has no handshake secret to tell them by.
	maxBlindHandshake = 32
	// tlsConnCost is what a TLS connection's state costs beyond its
	// stream: two record buffers and the AEADs.
	tlsConnCost = 2*maxRecord + 4<<10
)

// looksLikeClientHello says a stream's first bytes are a TLS record
// carrying a ClientHello.
func looksLikeClientHello(b []byte) bool {
	return len(b) >= 6 && b[0] == recordHandshake && b[1] == 3 && b[2] <= 4 &&
		int(binary.BigEndian.Uint16(b[3:5])) <= maxRecord && b[5] == hsClientHello
}

// looksLikeTLSRecord says a stream caught midway starts with an
// application data record, as TLS sends once its handshake is over.
func looksLikeTLSRecord(b []byte) bool {
	return len(b) >= recordHeader && b[0] == recordAppData && b[1] == 3 && b[2] >= 1 && b[2] <= 3 &&
		int(binary.BigEndian.Uint16(b[3:5])) <= maxRecord
}

// tlsConn reads one TCP connection as TLS: it parses both directions'
// records, reads the hellos, and with the connection's secrets from a
// key log decrypts the application data, which it hands to the stream's
// halves as if it had been the stream's bytes.
type tlsConn struct {
	keys   *KeyLog
	client int // the half that sent the ClientHello
	half   [2]tlsHalf
	out    func(i int, data []byte, t time.Time, pkt int)
	note   func(string)
	info   TLSInfo
	ch     *clientHello
	sh     *serverHello
	suite  suite
	// failed stops decryption: the flow keeps what it had, its TLSInfo
	// says why.
	failed bool
	// midway: the capture began after the handshake.
	midway bool
	// hrr: the server asked for another ClientHello.
	hrr   bool
	names [2]string
}

// tlsHalf is one direction's records.
type tlsHalf struct {
	buf []byte // bytes of the record in progress
	hs  []byte // plaintext handshake bytes not yet a whole message
	// hsSkip is the rest of a plaintext handshake message too long to
	// hold, skipped as it comes.
	hsSkip int
	// keys decrypt this direction once it encrypts: TLS 1.2 after its
	// ChangeCipherSpec, TLS 1.3 after the ServerHello.
	keys       *recordKeys
	encrypted  bool
	app        bool // TLS 1.3: the handshake records are behind
	hsKeys     *recordKeys
	blind      int // TLS 1.3 handshake records skipped without their key
	records    int
	plain      int64 // application bytes handed on
	finished12 bool  // TLS 1.2: the encrypted Finished was read
}

func newTLSConn(client int, keys *KeyLog, names [2]string, out func(int, []byte, time.Time, int), note func(string)) *tlsConn {
	return &tlsConn{keys: keys, client: client, out: out, note: note, names: names, info: TLSInfo{Version: "TLS"}}
}

// fail stops decryption with a reason, kept in the flow's TLSInfo and
// notes.
func (c *tlsConn) fail(i int, pkt int, format string, args ...any) {
	if c.failed {
		return
	}
	c.failed = true
	msg := fmt.Sprintf(format, args...)
	if c.info.Problem == "" {
		c.info.Problem = msg
	}
	c.info.Plaintext = ""
	c.note(fmt.Sprintf("packet %d: %s: TLS: %s", pkt, c.names[i], msg))
}

// feed takes stream bytes of half i, brought by packet pkt at t.
func (c *tlsConn) feed(i int, data []byte, t time.Time, pkt int) {
	if c.failed {
		return
	}
	h := &c.half[i]
	h.buf = append(h.buf, data...)
	c.drain(i, t, pkt)
	// A ServerHello read just now may let the client's records waiting
	// for it go on.
	if !c.failed && len(c.half[1-i].buf) >= recordHeader {
		c.drain(1-i, t, pkt)
	}
	if c.failed {
		// Nothing more is read: let the buffers go.
		c.half[0].buf, c.half[1].buf, c.half[0].hs, c.half[1].hs = nil, nil, nil, nil
	}
}

// drain handles half i's whole records.
func (c *tlsConn) drain(i int, t time.Time, pkt int) {
	h := &c.half[i]
	for !c.failed && len(h.buf) >= recordHeader {
		typ, n := h.buf[0], int(binary.BigEndian.Uint16(h.buf[3:5]))
		if h.buf[1] != 3 || n > maxRecord || typ < recordCCS || typ > recordHeartbeat {
			c.fail(i, pkt, "record %d is not a TLS record (header % x): the rest of the stream is left out", h.records+1, h.buf[:recordHeader])
			return
		}
		if len(h.buf) < recordHeader+n {
			return
		}
		if !c.record(i, h.buf[:recordHeader], h.buf[recordHeader:recordHeader+n], t, pkt) || c.failed {
			return // waits for the other direction (the ServerHello), or gave up
		}
		h.records++
		h.buf = h.buf[recordHeader+n:]
	}
	if len(h.buf) == 0 {
		h.buf = nil
	}
}

// record handles one whole record; false means it must wait for the
// other direction and is left in the buffer.
func (c *tlsConn) record(i int, hdr, body []byte, t time.Time, pkt int) bool {
	h := &c.half[i]
	typ := hdr[0]
	if typ == recordCCS {
		if c.sh != nil && c.sh.version != versionTLS13 {
			if h.keys == nil && c.info.Plaintext != "" {
				c.keys12()
			}
			h.encrypted = true
		}
		return true
	}
	if c.midway {
		return true // no handshake: nothing to read the records with
	}
	if i == c.client && c.ch != nil && c.sh == nil && !(typ == recordHandshake && c.hrr) {
		// What the client sends after its hello depends on the server's
		// answer: wait for the ServerHello.
		if len(h.buf) > 4*maxRecord {
			c.fail(i, pkt, "the client sent %d bytes after its ClientHello with no ServerHello (0-RTT early data is not supported)", len(h.buf))
			return true
		}
		return false
	}
	if c.ch == nil && i != c.client {
		// The server answers a ClientHello: its bytes wait for it (a
		// capture may hand them on first when packets were reordered).
		if len(h.buf) > 4*maxRecord {
			c.fail(i, pkt, "the server sent %d bytes before the client's ClientHello was whole", len(h.buf))
			return true
		}
		return false
	}
	if !h.encrypted && (typ != recordAppData || c.sh == nil) {
		switch typ {
		case recordHandshake:
			c.handshake(i, body, pkt)
		case recordAlert:
			c.alert(i, body, pkt)
		case recordAppData:
			c.fail(i, pkt, "application data before the handshake")
		}
		return true
	}
	if h.keys == nil {
		// No secret for this connection (its TLSInfo says so): count
		// the record, hand on nothing.
		return true
	}
	if c.sh.version == versionTLS13 {
		c.record13(i, hdr, body, t, pkt)
	} else {
		c.record12(i, hdr, body, t, pkt)
	}
	return true
}

func (c *tlsConn) alert(i int, body []byte, pkt int) {
	if len(body) < 2 {
		return
	}
	level := "warning"
	if body[0] == 2 {
		level = "fatal"
	}
	if body[1] == 0 {
		return // close_notify: the normal end
	}
	c.note(fmt.Sprintf("packet %d: %s: TLS alert: %s %s", pkt, c.names[i], level, alertName(body[1])))
}

func alertName(d byte) string {
	names := map[byte]string{10: "unexpected_message", 20: "bad_record_mac", 22: "record_overflow", 40: "handshake_failure",
		42: "bad_certificate", 43: "unsupported_certificate", 44: "certificate_revoked", 45: "certificate_expired",
		46: "certificate_unknown", 47: "illegal_parameter", 48: "unknown_ca", 50: "decode_error", 51: "decrypt_error",
		70: "protocol_version", 71: "insufficient_security", 80: "internal_error", 86: "inappropriate_fallback",
		90: "user_canceled", 100: "no_renegotiation", 109: "missing_extension", 110: "unsupported_extension",
		112: "unrecognized_name", 116: "certificate_required", 120: "no_application_protocol"}
	if n, ok := names[d]; ok {
		return n
	}
	return fmt.Sprintf("alert %d", d)
}

// handshake reads plaintext handshake messages: the hellos matter, the
// rest (certificates, key exchange) is skipped.
func (c *tlsConn) handshake(i int, body []byte, pkt int) {
	h := &c.half[i]
	for len(body) > 0 {
		if h.hsSkip > 0 {
			n := min(h.hsSkip, len(body))
			h.hsSkip -= n
			body = body[n:]
			continue
		}
		h.hs = append(h.hs, body...)
		body = nil
		for len(h.hs) >= 4 {
			n := int(h.hs[1])<<16 | int(h.hs[2])<<8 | int(h.hs[3])
			if n > maxHandshake && len(h.hs) < 4+n {
				h.hsSkip = n - (len(h.hs) - 4)
				h.hs = nil
				break
			}
			if len(h.hs) < 4+n {
				break
			}
			c.message(i, h.hs[0], h.hs[4:4+n], pkt)
			if c.failed {
				return
			}
			h.hs = h.hs[4+n:]
		}
		if len(h.hs) == 0 {
			h.hs = nil
		}
	}
}

func (c *tlsConn) message(i int, typ byte, body []byte, pkt int) {
	switch {
	case typ == hsClientHello && i == c.client && c.ch == nil:
		ch, err := parseClientHello(body)
		if err != nil {
			c.fail(i, pkt, "%v", err)
			return
		}
		c.ch = &ch
		c.info.SNI = ch.sni
	case typ == hsServerHello && i != c.client && c.ch != nil && c.sh == nil:
		sh, err := parseServerHello(body)
		if err != nil {
			c.fail(i, pkt, "%v", err)
			return
		}
		if sh.random == helloRetryRandom {
			c.hrr = true
			return // HelloRetryRequest: the client's second hello, then the real ServerHello
		}
		c.sh = &sh
		c.info.Version = VersionName(sh.version)
		c.info.ALPN = sh.alpn
		c.info.Cipher = suiteName(sh.suite)
		c.keysFor(i, pkt)
	}
}

// keysFor finds the connection's secrets once the ServerHello named its
// version and cipher suite.
func (c *tlsConn) keysFor(i int, pkt int) {
	if c.keys.Len() == 0 {
		return // no key log: the flow is named, not decrypted
	}
	s, ok := suites[c.sh.suite]
	switch {
	case c.sh.version < versionTLS12:
		c.fail(i, pkt, "%s: reprise decrypts TLS 1.2 and 1.3 only", c.info.Version)
		return
	case !ok:
		c.fail(i, pkt, "%s is not an AEAD suite reprise decrypts (AES-GCM, ChaCha20-Poly1305)", c.info.Cipher)
		return
	case s.tls13 != (c.sh.version == versionTLS13):
		c.fail(i, pkt, "%s under %s", c.info.Cipher, c.info.Version)
		return
	}
	c.suite = s
	sec := c.keys.lookup(c.ch.random)
	cl, sv := &c.half[c.client], &c.half[1-c.client]
	if c.sh.version == versionTLS13 {
		if sec == nil || sec.clientApp0 == nil || sec.serverApp0 == nil {
			c.fail(i, pkt, "the key log has no CLIENT_TRAFFIC_SECRET_0 and SERVER_TRAFFIC_SECRET_0 for client random %x", c.ch.random[:8])
			return
		}
		var err error
		if cl.keys, err = keys13(s, sec.clientApp0); err == nil {
			sv.keys, err = keys13(s, sec.serverApp0)
		}
		if err == nil && sec.clientHS != nil && sec.serverHS != nil {
			if cl.hsKeys, err = keys13(s, sec.clientHS); err == nil {
				sv.hsKeys, err = keys13(s, sec.serverHS)
			}
		}
		if err != nil {
			c.fail(i, pkt, "deriving keys: %v", err)
			return
		}
		cl.encrypted, sv.encrypted = true, true
		c.info.Plaintext = PlaintextKeyLog
		return
	}
	if sec == nil || sec.master == nil {
		c.fail(i, pkt, "the key log has no CLIENT_RANDOM line for client random %x", c.ch.random[:8])
		return
	}
	c.info.Plaintext = PlaintextKeyLog
}

// keys12 derives the TLS 1.2 record keys (at the first ChangeCipherSpec).
func (c *tlsConn) keys12() {
	sec := c.keys.lookup(c.ch.random)
	ck, sk, err := keys12(c.suite, sec.master, c.ch.random, c.sh.random)
	if err != nil {
		c.fail(c.client, 0, "deriving keys: %v", err)
		return
	}
	c.half[c.client].keys, c.half[1-c.client].keys = ck, sk
}

// record13 decrypts a TLS 1.3 record. Before its first application
// record a direction sends its encrypted handshake: with the handshake
// secret those records are told by their key, without it by their
// failing to open under the application key.
func (c *tlsConn) record13(i int, hdr, body []byte, t time.Time, pkt int) {
	h := &c.half[i]
	if hdr[0] != recordAppData {
		if hdr[0] == recordAlert && !h.app {
			c.alert(i, body, pkt) // a plaintext alert during the handshake
		}
		return
	}
	if !h.app {
		if h.hsKeys != nil {
			if plain, err := h.hsKeys.open(nil, hdr, body); err == nil {
				c.handshake13(plain)
				return // an encrypted handshake record
			}
		}
	}
	plain, err := h.keys.open(nil, hdr, body)
	switch {
	case err != nil && !h.app:
		h.blind++
		if h.hsKeys != nil || h.blind > maxBlindHandshake {
			c.fail(i, pkt, "record %d does not decrypt with the key log's secrets for this connection (a wrong or mixed-up key log?)", h.records+1)
		}
		return // an encrypted handshake record, told by its not opening
	case err != nil:
		c.fail(i, pkt, "record %d does not decrypt (sequence %d): wrong key, or bytes missing from the capture", h.records+1, h.keys.seq)
		return
	}
	h.app = true
	// The inner type is the last non-zero byte; zeros after it are padding.
	n := len(plain)
	for n > 0 && plain[n-1] == 0 {
		n--
	}
	if n == 0 {
		c.fail(i, pkt, "record %d has no content type", h.records+1)
		return
	}
	inner, content := plain[n-1], plain[:n-1]
	switch inner {
	case recordAppData:
		c.emit(i, content, t, pkt)
	case recordAlert:
		c.alert(i, content, pkt)
	case recordHandshake:
		c.post13(i, content, pkt)
	}
}

// handshake13 reads the server's EncryptedExtensions for the ALPN
// protocol chosen (TLS 1.3 sends it encrypted).
func (c *tlsConn) handshake13(plain []byte) {
	n := len(plain)
	for n > 0 && plain[n-1] == 0 {
		n--
	}
	if n == 0 || plain[n-1] != recordHandshake {
		return
	}
	msgs := plain[:n-1]
	for len(msgs) >= 4 {
		l := int(msgs[1])<<16 | int(msgs[2])<<8 | int(msgs[3])
		if len(msgs) < 4+l {
			return
		}
		if msgs[0] == hsEncryptedExtensions {
			if alpn, ok := parseEncryptedExtensions(msgs[4 : 4+l]); ok {
				c.info.ALPN = alpn
			}
		}
		msgs = msgs[4+l:]
	}
}

// post13 handles TLS 1.3 post-handshake messages: tickets are skipped,
// a KeyUpdate moves this direction to its next secret.
func (c *tlsConn) post13(i int, msgs []byte, pkt int) {
	h := &c.half[i]
	for len(msgs) >= 4 {
		n := int(msgs[1])<<16 | int(msgs[2])<<8 | int(msgs[3])
		if len(msgs) < 4+n {
			return
		}
		if msgs[0] == hsKeyUpdate {
			k, err := h.keys.update()
			if err != nil {
				c.fail(i, pkt, "key update: %v", err)
				return
			}
			h.keys = k
		}
		msgs = msgs[4+n:]
	}
}

// record12 decrypts a TLS 1.2 record after this direction's
// ChangeCipherSpec: its Finished first, then application data; a
// handshake after the Finished is a renegotiation, which reprise refuses.
func (c *tlsConn) record12(i int, hdr, body []byte, t time.Time, pkt int) {
	h := &c.half[i]
	plain, err := h.keys.open(nil, hdr, body)
	if err != nil {
		c.fail(i, pkt, "record %d does not decrypt (sequence %d): the key log's master secret does not fit this connection, or bytes are missing", h.records+1, h.keys.seq)
		return
	}
	switch hdr[0] {
	case recordAppData:
		c.emit(i, plain, t, pkt)
	case recordAlert:
		c.alert(i, plain, pkt)
	case recordHandshake:
		if !h.finished12 {
			h.finished12 = true
			return
		}
		what := "a handshake message"
		if len(plain) > 0 && plain[0] == hsHelloRequest {
			what = "a HelloRequest"
		} else if len(plain) > 0 && plain[0] == hsClientHello {
			what = "a ClientHello"
		}
		c.fail(i, pkt, "renegotiation (%s after the handshake): not supported; the flow ends here", what)
	}
}

func (c *tlsConn) emit(i int, data []byte, t time.Time, pkt int) {
	if len(data) == 0 {
		return
	}
	c.half[i].plain += int64(len(data))
	c.out(i, data, t, pkt)
}

// end is called when the connection's bytes are all in: a record left
// half-read is noted.
func (c *tlsConn) end() {
	if c.failed {
		return
	}
	for i := range c.half {
		if n := len(c.half[i].buf); n > 0 && c.info.Plaintext != "" {
			c.note(fmt.Sprintf("%s: TLS: stream ends inside a record (%d bytes held): left out", c.names[i], n))
		}
	}
}

// result is the flow's TLSInfo once the connection ended.
func (c *tlsConn) result() *TLSInfo {
	info := c.info
	if info.ALPN == "" && c.ch != nil && len(c.ch.alpn) > 0 {
		// TLS 1.3 sends the server's choice encrypted: without the
		// handshake secret, say what the client offered.
		info.ALPN = strings.Join(c.ch.alpn, ",") + " (offered)"
	}
	if !c.failed && info.Plaintext == "" && info.Problem == "" {
		switch {
		case c.ch == nil:
			info.Problem = "the handshake is not in the capture"
		case c.keys.Len() == 0:
			info.Problem = "no key log"
		case c.sh == nil:
			info.Problem = "no ServerHello in the capture"
		}
	}
	return &info
}
