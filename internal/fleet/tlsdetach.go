package fleet

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"

	"github.com/reprise-harness/reprise/internal/tlsrec"
)

// A logged-in TLS 1.3 client drops its tls.Conn: crypto/tls keeps about
// 9 KiB per connection (buffers sized by the handshake, the parsed
// certificates, both directions' state), and reads every record through
// two copies (its raw input buffer, then the caller's). Once the login is
// done, a client needs no more than the two directions' AEADs and
// sequence numbers: the handshake's traffic secrets come from its key log
// (a KeyLogWriter of the client's own, never written anywhere), and
// tlsrec seals and opens the records, in place in the reader's lent
// buffer. This is the detach.
//
// The sequence numbers are what the tls.Conn used: the wire counts the
// records it wrote since the handshake (the client's next one), and the
// last record the server sent is kept whole, so the detach tries which
// sequence number opens it (a few at most, once per client). The detach
// only happens where nothing is lost: between records (no partial record
// inside the tls.Conn), with TLS 1.3 and a suite tlsrec knows, and
// without --tls-resume (tickets go to crypto/tls's session cache). A last
// record that opens under neither the application key nor the handshake
// key (a key update during the login), or anything else unusual, keeps
// the tls.Conn for good: it works as before, only costs more.

// tlsSock is a TLS client's net.Conn: the tls.Conn's reads and writes
// through the login, the socket's deadlines and addresses; once detached,
// the tls.Conn is dropped and Close is the socket's.
type tlsSock struct {
	*net.TCPConn
	tc atomic.Pointer[tls.Conn]
}

var errDetached = errors.New("tls: the connection's records moved to the fleet's record layer")

func (s *tlsSock) Read(b []byte) (int, error) {
	if tc := s.tc.Load(); tc != nil {
		return tc.Read(b)
	}
	return 0, errDetached
}

func (s *tlsSock) Write(b []byte) (int, error) {
	if tc := s.tc.Load(); tc != nil {
		return tc.Write(b)
	}
	return 0, errDetached
}

func (s *tlsSock) Close() error {
	if tc := s.tc.Load(); tc != nil {
		return tc.Close()
	}
	return s.TCPConn.Close()
}

// keySink keeps a handshake's TLS 1.3 secrets (crypto/tls's key log
// lines: "LABEL client_random secret").
type keySink struct {
	serverHS, clientApp, serverApp []byte
}

func (k *keySink) Write(line []byte) (int, error) {
	f := bytes.Fields(line)
	if len(f) == 3 {
		secret := make([]byte, hex.DecodedLen(len(f[2])))
		if _, err := hex.Decode(secret, f[2]); err == nil {
			switch string(f[0]) {
			case "SERVER_HANDSHAKE_TRAFFIC_SECRET":
				k.serverHS = secret
			case "CLIENT_TRAFFIC_SECRET_0":
				k.clientApp = secret
			case "SERVER_TRAFFIC_SECRET_0":
				k.serverApp = secret
			}
		}
	}
	return len(line), nil
}

// recTracker follows the record boundaries of what the server sent (the
// bytes the tls.Conn read) and of what the client wrote since the
// handshake, keeping the server's last record whole: what the detach
// needs to know the sequence numbers.
type recTracker struct {
	keys keySink
	hdr  [tlsrec.HeaderLen]byte
	hdrN int
	left int // body bytes the current record still waits for
	read int // whole records read
	last []byte
	// A record (rdOdd, the reader's) or a write (wrOdd) the detach
	// cannot follow: no detach. wrote counts the records written since
	// the handshake (counting); the write side is under the wire's mu.
	rdOdd, wrOdd bool
	wrote        int
	counting     bool
	// tries counts the detach's chances (reads ending between records);
	// the tracking stops after maxDetachTries.
	tries int
}

// maxDetachTries bounds how long a client tracks records for a detach
// that keeps not happening (a server whose reads never end between
// records): the tracking copies each record.
const maxDetachTries = 64

func (t *recTracker) aligned() bool { return t.hdrN == 0 && t.left == 0 }

// sawRead follows bytes the tls.Conn read.
func (t *recTracker) sawRead(p []byte) {
	for len(p) > 0 && !t.rdOdd {
		if t.left == 0 {
			if t.hdrN == 0 {
				t.last = t.last[:0]
			}
			k := copy(t.hdr[t.hdrN:], p)
			t.hdrN += k
			t.last = append(t.last, p[:k]...)
			p = p[k:]
			if t.hdrN < tlsrec.HeaderLen {
				return
			}
			t.hdrN = 0
			t.left = int(binary.BigEndian.Uint16(t.hdr[3:]))
			if t.left > tlsrec.MaxRecord {
				t.rdOdd = true
				return
			}
			if t.left == 0 {
				t.read++
			}
			continue
		}
		k := min(len(p), t.left)
		t.last = append(t.last, p[:k]...)
		t.left -= k
		p = p[k:]
		if t.left == 0 {
			t.read++
		}
	}
}

// sawWrite counts the records of a write after the handshake (crypto/tls
// writes whole records).
func (t *recTracker) sawWrite(b []byte) {
	for len(b) > 0 {
		if len(b) < tlsrec.HeaderLen {
			t.wrOdd = true
			return
		}
		n := tlsrec.HeaderLen + int(binary.BigEndian.Uint16(b[3:]))
		if n > len(b) {
			t.wrOdd = true
			return
		}
		t.wrote++
		b = b[n:]
	}
}

// tlsRecords is a detached client's record layer: the server's direction
// (the reader's) and the client's (under wmu), and a record a read cut
// short (the reader's).
type tlsRecords struct {
	rd, wr *tlsrec.Half
	part   []byte
}

// maybeDetach drops the tls.Conn of a logged-in client whose reads ended
// between records, when the secrets and sequence numbers are known (the
// reader's, after a read the tls.Conn opened all of).
func (c *client) maybeDetach() {
	w := c.wire
	t := w.rt
	if t == nil || !c.joined.Load() {
		return
	}
	if t.rdOdd || t.tries >= maxDetachTries {
		w.mu.Lock()
		w.rt = nil
		w.mu.Unlock()
		return
	}
	if !t.aligned() || len(t.last) == 0 {
		t.tries++
		return
	}
	r, ok := c.detachRecords(t)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.rt = nil // one try with the keys: it works now, or never will
	if !ok || t.wrOdd || len(w.out) > 0 {
		return
	}
	r.wr.SetSeq(uint64(t.wrote))
	c.recs = r
	c.sock.tc.Store(nil)
	c.tls = nil
	w.out = nil
	c.f.hs.detached.Add(1)
}

// detachRecords builds both directions from the key log and finds the
// server's sequence number from its last record.
func (c *client) detachRecords(t *recTracker) (*tlsRecords, bool) {
	st := c.tls.ConnectionState()
	suite, ok := tlsrec.Suite13(st.CipherSuite)
	k := &t.keys
	if st.Version != tls.VersionTLS13 || !ok || k.clientApp == nil || k.serverApp == nil || k.serverHS == nil {
		return nil, false
	}
	rd, err := tlsrec.NewHalf(suite, k.serverApp)
	if err != nil {
		return nil, false
	}
	wr, err := tlsrec.NewHalf(suite, k.clientApp)
	if err != nil {
		return nil, false
	}
	scratch := make([]byte, len(t.last))
	// The last record is an application-key one at a sequence number
	// below the records read (the handshake's came first), or, when the
	// server sent none since its Finished, a handshake-key one.
	for s := t.read - 1; s >= 0 && s >= t.read-32; s-- {
		if typ, plain, ok := rd.Try(scratch, t.last, uint64(s)); ok {
			if typ == tlsrec.TypeHandshake && hasKeyUpdate(plain) {
				return nil, false
			}
			rd.SetSeq(uint64(s) + 1)
			return &tlsRecords{rd: rd, wr: wr}, true
		}
	}
	hs, err := tlsrec.NewHalf(suite, k.serverHS)
	if err != nil {
		return nil, false
	}
	for s := range min(t.read, 8) {
		if _, _, ok := hs.Try(scratch, t.last, uint64(s)); ok {
			return &tlsRecords{rd: rd, wr: wr}, true
		}
	}
	return nil, false
}

// hasKeyUpdate says whether handshake messages hold a KeyUpdate (or are
// cut, which the detach cannot follow either).
func hasKeyUpdate(b []byte) bool {
	for len(b) > 0 {
		if len(b) < 4 {
			return true
		}
		n := 4 + int(b[1])<<16 | int(b[2])<<8 | int(b[3])
		if b[0] == msgKeyUpdate || n > len(b) {
			return true
		}
		b = b[n:]
	}
	return false
}

const (
	msgNewSessionTicket = 4
	msgKeyUpdate        = 24
)

// openRecords opens a detached client's records from b (what a raw read
// got) in place and hands the plaintext to take in one piece, as
// openTLS does. A record cut by the read waits in part.
func (c *client) openRecords(b []byte, take func([]byte) bool) bool {
	r := c.recs
	if len(r.part) > 0 {
		n := c.completePart(b)
		if !c.sizeOK(r.part) {
			return false
		}
		b = b[n:]
		if len(r.part) >= tlsrec.HeaderLen && len(r.part) == tlsrec.HeaderLen+int(binary.BigEndian.Uint16(r.part[3:])) {
			plain, ok := c.openOne(r.part)
			r.part = r.part[:0]
			if cap(r.part) > readBuf {
				r.part = nil // a large record's buffer is not kept
			}
			if !ok || len(plain) > 0 && !take(plain) {
				return false
			}
		}
	}
	w, i := 0, 0
	for len(b)-i >= tlsrec.HeaderLen {
		if !c.sizeOK(b[i:]) {
			if w > 0 {
				take(b[:w])
			}
			return false
		}
		n := tlsrec.HeaderLen + int(binary.BigEndian.Uint16(b[i+3:]))
		if n > len(b)-i {
			break
		}
		plain, ok := c.openOne(b[i : i+n])
		if !ok {
			if w > 0 {
				take(b[:w])
			}
			return false
		}
		// The plaintext moves down next to the earlier records': one
		// take for the whole read.
		w += copy(b[w:], plain)
		i += n
	}
	if i < len(b) {
		r.part = append(r.part, b[i:]...)
	}
	if w > 0 {
		return take(b[:w])
	}
	return true
}

// sizeOK says whether the record starting rec (its header, when there)
// is one TLS allows; false ends the reads (c.tlsErr says why) before
// its bytes are waited for.
func (c *client) sizeOK(rec []byte) bool {
	if len(rec) < tlsrec.HeaderLen {
		return true
	}
	if n := int(binary.BigEndian.Uint16(rec[3:])); n > tlsrec.MaxRecord {
		c.tlsErr = fmt.Errorf("tls: record of %d bytes: larger than TLS allows", n)
		return false
	}
	return true
}

// completePart moves bytes of b into the cut record until it is whole,
// and says how many it took.
func (c *client) completePart(b []byte) int {
	r := c.recs
	took := 0
	if len(r.part) < tlsrec.HeaderLen {
		k := min(tlsrec.HeaderLen-len(r.part), len(b))
		r.part = append(r.part, b[:k]...)
		took = k
		if len(r.part) < tlsrec.HeaderLen {
			return took
		}
	}
	need := tlsrec.HeaderLen + int(binary.BigEndian.Uint16(r.part[3:])) - len(r.part)
	k := min(need, len(b)-took)
	r.part = append(r.part, b[took:took+k]...)
	return took + k
}

// openOne opens one whole record and returns its application data (none
// for a handshake message); false ends the reads (c.tlsErr says why).
func (c *client) openOne(rec []byte) ([]byte, bool) {
	typ, plain, err := c.recs.rd.Open(rec)
	if err != nil {
		c.tlsErr = &net.OpError{Op: "local error", Net: "tcp", Err: fmt.Errorf("tls: %w", err)}
		return nil, false
	}
	switch typ {
	case tlsrec.TypeApplicationData:
		return plain, true
	case tlsrec.TypeAlert:
		if len(plain) == 2 && plain[1] == 0 { // close_notify
			c.tlsErr = io.EOF
		} else {
			c.tlsErr = &net.OpError{Op: "remote error", Net: "tcp", Err: alertError(plain)}
		}
		return nil, false
	case tlsrec.TypeHandshake:
		return nil, c.postHandshake(plain)
	}
	c.tlsErr = fmt.Errorf("tls: record of inner type %d after the handshake", typ)
	return nil, false
}

// postHandshake takes the server's messages after the handshake: tickets
// are dropped (no resumption once detached), a KeyUpdate moves the
// server's direction on and, when the server asks, the client's too.
func (c *client) postHandshake(b []byte) bool {
	for len(b) > 0 {
		if len(b) < 4 {
			c.tlsErr = errors.New("tls: a handshake message split across records after the handshake: not supported")
			return false
		}
		n := 4 + (int(b[1])<<16 | int(b[2])<<8 | int(b[3]))
		if n > len(b) {
			c.tlsErr = errors.New("tls: a handshake message split across records after the handshake: not supported")
			return false
		}
		switch b[0] {
		case msgNewSessionTicket:
		case msgKeyUpdate:
			if err := c.recs.rd.Update(); err != nil {
				c.tlsErr = fmt.Errorf("tls: key update: %w", err)
				return false
			}
			if n == 5 && b[4] == 1 && !c.answerKeyUpdate() {
				return false
			}
		default:
			c.tlsErr = fmt.Errorf("tls: handshake message %d after the handshake: not supported", b[0])
			return false
		}
		b = b[n:]
	}
	return true
}

// answerKeyUpdate sends the client's KeyUpdate (update_not_requested)
// under its current key, then moves to the next one (RFC 8446 §4.6.3),
// in order with the scheduler's writes.
func (c *client) answerKeyUpdate() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.dead.Load() {
		return true
	}
	b := c.recs.wr.Seal(nil, tlsrec.TypeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 0})
	if err := c.recs.wr.Update(); err != nil {
		c.tlsErr = fmt.Errorf("tls: key update: %w", err)
		return false
	}
	if why := c.writeLocked(b); why != DisconnectNone {
		c.tlsErr = fmt.Errorf("tls: answering the server's key update: %s", disconnectBy(why))
		return false
	}
	return true
}

// closeNotify appends a detached client's close_notify alert.
func (r *tlsRecords) closeNotify(dst []byte) []byte {
	return r.wr.Seal(dst, tlsrec.TypeAlert, []byte{1, 0})
}

// alertError is an alert's text as crypto/tls says it ("tls: " and the
// alert's name where it is one the fleet tells apart).
func alertError(a []byte) error {
	if len(a) != 2 {
		return errors.New("tls: malformed alert")
	}
	names := map[byte]string{
		10: "unexpected message", 20: "bad record MAC", 40: "handshake failure", 42: "bad certificate",
		45: "certificate expired", 46: "certificate unknown", 47: "illegal parameter", 49: "access denied",
		50: "error decoding message", 51: "error decrypting message", 70: "protocol version not supported",
		80: "internal error", 90: "user canceled", 116: "certificate required",
	}
	if s, ok := names[a[1]]; ok {
		return errors.New("tls: " + s)
	}
	return fmt.Errorf("tls: alert(%d)", a[1])
}
