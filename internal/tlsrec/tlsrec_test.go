package tlsrec

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// keyLog keeps a handshake's secrets by label.
type keyLog struct {
	mu      sync.Mutex
	secrets map[string][]byte
}

func (k *keyLog) Write(line []byte) (int, error) {
	f := strings.Fields(string(line))
	if len(f) == 3 {
		b, err := hex.DecodeString(f[2])
		if err != nil {
			return 0, err
		}
		k.mu.Lock()
		k.secrets[f[0]] = b
		k.mu.Unlock()
	}
	return len(line), nil
}

// readRecord reads one whole record from r.
func readRecord(t *testing.T, r io.Reader) []byte {
	t.Helper()
	hdr := make([]byte, HeaderLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, HeaderLen+int(binary.BigEndian.Uint16(hdr[3:])))
	copy(rec, hdr)
	if _, err := io.ReadFull(r, rec[HeaderLen:]); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestAgainstCryptoTLS: after a real crypto/tls handshake over loopback,
// the client's records are sealed and opened here from the logged
// secrets, and the server (crypto/tls) reads and writes them as its
// peer's: application data both ways, a record larger than one
// record's plaintext, the server's tickets, a KeyUpdate each way (the
// server's through crypto/tls, requested by the client's).
func TestAgainstCryptoTLS(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cert := testproc.SelfSigned(t, time.Now().Add(time.Hour))
	srvErr := make(chan error, 1)
	got := make(chan []byte, 1)
	big := bytes.Repeat([]byte("0123456789abcdef"), 2000) // 32000 bytes: two records
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srvErr <- err
			return
		}
		defer c.Close()
		s := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{cert}})
		if _, err := s.Write([]byte("hello from the server")); err != nil {
			srvErr <- err
			return
		}
		buf := make([]byte, len(big)+100)
		n, err := io.ReadFull(s, buf[:len("ping")+len(big)+len("pong")])
		if err != nil {
			srvErr <- err
			return
		}
		got <- buf[:n]
		// The client's KeyUpdate asked for the server's: this write
		// goes out under the server's next key.
		_, err = s.Write([]byte("after the update"))
		srvErr <- err
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	kl := &keyLog{secrets: map[string][]byte{}}
	cl := tls.Client(raw, &tls.Config{InsecureSkipVerify: true, KeyLogWriter: kl, MinVersion: tls.VersionTLS13}) //nolint:gosec // a test's self-signed server
	if err := cl.Handshake(); err != nil {
		t.Fatal(err)
	}
	suite, ok := Suite13(cl.ConnectionState().CipherSuite)
	if !ok {
		t.Fatalf("suite %x", cl.ConnectionState().CipherSuite)
	}
	rd, err := NewHalf(suite, kl.secrets["SERVER_TRAFFIC_SECRET_0"])
	if err != nil {
		t.Fatal(err)
	}
	wr, err := NewHalf(suite, kl.secrets["CLIENT_TRAFFIC_SECRET_0"])
	if err != nil {
		t.Fatal(err)
	}
	// The server's first records: tickets (handshake), then the data.
	var data []byte
	for len(data) == 0 {
		typ, plain, err := rd.Open(readRecord(t, raw))
		if err != nil {
			t.Fatal(err)
		}
		switch typ {
		case TypeHandshake:
			if plain[0] != 4 {
				t.Fatalf("handshake message %d, want a NewSessionTicket", plain[0])
			}
		case TypeApplicationData:
			data = append(data, plain...)
		default:
			t.Fatalf("record type %d", typ)
		}
	}
	if string(data) != "hello from the server" {
		t.Fatalf("opened %q", data)
	}
	// A wrong sequence number does not open, and Try leaves the record.
	other, err := NewHalf(suite, kl.secrets["CLIENT_TRAFFIC_SECRET_0"])
	if err != nil {
		t.Fatal(err)
	}
	rec := other.Seal(nil, TypeApplicationData, []byte("x"))
	keep := bytes.Clone(rec)
	scratch := make([]byte, len(rec))
	if _, _, ok := other.Try(scratch, rec, 5); ok || !bytes.Equal(rec, keep) {
		t.Fatalf("Try at a wrong seq: opened %v, record kept %v", ok, bytes.Equal(rec, keep))
	}

	out := wr.Seal(nil, TypeApplicationData, []byte("ping"))
	out = wr.Seal(out, TypeApplicationData, big)
	// KeyUpdate, update_requested.
	out = wr.Seal(out, TypeHandshake, []byte{24, 0, 0, 1, 1})
	if err := wr.Update(); err != nil {
		t.Fatal(err)
	}
	out = wr.Seal(out, TypeApplicationData, []byte("pong"))
	if _, err := raw.Write(out); err != nil {
		t.Fatal(err)
	}
	// The server may be done (srvErr nil) by the time this looks.
	var b []byte
	srvDone := false
	select {
	case b = <-got:
	case err := <-srvErr:
		if err != nil {
			t.Fatalf("the server: %v", err)
		}
		srvDone = true
		b = <-got
	}
	if string(b) != "ping"+string(big)+"pong" {
		t.Fatalf("the server read %d bytes, want %d", len(b), 8+len(big))
	}
	// The server answers with its KeyUpdate, then writes under its new key.
	typ, plain, err := rd.Open(readRecord(t, raw))
	if err != nil || typ != TypeHandshake || plain[0] != 24 {
		t.Fatalf("want the server's KeyUpdate: type %d %x %v", typ, plain, err)
	}
	if err := rd.Update(); err != nil {
		t.Fatal(err)
	}
	typ, plain, err = rd.Open(readRecord(t, raw))
	if err != nil || typ != TypeApplicationData || string(plain) != "after the update" {
		t.Fatalf("after the update: type %d %q %v", typ, plain, err)
	}
	if !srvDone {
		if err := <-srvErr; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRoundTrip: each TLS 1.3 suite opens what it sealed, at the right
// sequence number only; a changed byte does not open; padding is taken
// off.
func TestRoundTrip(t *testing.T) {
	for _, id := range []uint16{0x1301, 0x1302, 0x1303} {
		s, ok := Suite13(id)
		if !ok {
			t.Fatal(id)
		}
		secret := bytes.Repeat([]byte{byte(id)}, s.hash().Size())
		a, err := NewHalf(s, secret)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := NewHalf(s, secret)
		recs := a.Seal(nil, TypeApplicationData, []byte("one"))
		recs = a.Seal(recs, TypeApplicationData, []byte("two"))
		first := HeaderLen + int(binary.BigEndian.Uint16(recs[3:]))
		if _, _, ok := b.Try(make([]byte, first), recs[first:], 0); ok {
			t.Fatalf("%x: the second record opened at seq 0", id)
		}
		for _, want := range []string{"one", "two"} {
			n := HeaderLen + int(binary.BigEndian.Uint16(recs[3:]))
			typ, plain, err := b.Open(recs[:n])
			if err != nil || typ != TypeApplicationData || string(plain) != want {
				t.Fatalf("%x: %d %q %v", id, typ, plain, err)
			}
			recs = recs[n:]
		}
		bad := a.Seal(nil, TypeApplicationData, []byte("three"))
		bad[len(bad)-1] ^= 1
		if _, _, err := b.Open(bad); err != ErrOpen {
			t.Fatalf("%x: a changed byte: %v", id, err)
		}
		if b.Seq() != 2 {
			t.Fatalf("%x: seq %d after a failed open, want 2", id, b.Seq())
		}
		// A record with padding after its content type.
		// (sealed as content type 0 after it: zeros are padding).
		padded := a.Seal(nil, 0, []byte{1, 0, TypeAlert, 0, 0})
		b.SetSeq(3)
		typ, plain, err := b.Open(padded)
		if err != nil || typ != TypeAlert || !bytes.Equal(plain, []byte{1, 0}) {
			t.Fatalf("%x: padded: %d %x %v", id, typ, plain, err)
		}
	}
	if _, ok := Suite13(0xC02F); ok {
		t.Fatal("a TLS 1.2 suite taken")
	}
}
