package fleet

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/reprise-harness/reprise/internal/tlsrec"
)

// detachedPair is a detached client's record layer and the server's
// sealing side, from one made-up traffic secret (TLS_AES_128_GCM_SHA256).
func detachedPair(t testing.TB) (*client, *tlsrec.Half) {
	t.Helper()
	s, _ := tlsrec.Suite13(0x1301)
	secret := bytes.Repeat([]byte{7}, 32)
	rd, err := tlsrec.NewHalf(s, secret)
	if err != nil {
		t.Fatal(err)
	}
	wr, _ := tlsrec.NewHalf(s, bytes.Repeat([]byte{9}, 32))
	srv, _ := tlsrec.NewHalf(s, secret)
	c := &client{recs: &tlsRecords{rd: rd, wr: wr}}
	c.dead.Store(true) // a requested key update is not answered (no socket)
	return c, srv
}

// feed hands the stream to the client's record layer in chunks cut at
// cuts (copies: records open in place) and returns the plaintext taken.
func feed(c *client, stream []byte, cuts ...int) ([]byte, bool) {
	var got []byte
	take := func(b []byte) bool { got = append(got, b...); return true }
	prev := 0
	for _, at := range append(cuts, len(stream)) {
		at = min(max(at, prev), len(stream))
		if !c.openRecords(bytes.Clone(stream[prev:at]), take) {
			return got, false
		}
		prev = at
	}
	return got, true
}

// TestOpenRecordsSplits: a detached client's reads give the server's
// plaintext exactly, wherever the reads cut the records (inside a
// header, inside a body, between records), across tickets and a key
// update; close_notify ends the reads as EOF, another alert as the
// peer's remote error.
func TestOpenRecordsSplits(t *testing.T) {
	_, srv := detachedPair(t)
	var stream, want []byte
	stream = srv.Seal(stream, tlsrec.TypeApplicationData, []byte("first message"))
	stream = srv.Seal(stream, tlsrec.TypeHandshake, []byte{msgNewSessionTicket, 0, 0, 2, 0xaa, 0xbb})
	big := bytes.Repeat([]byte("0123456789"), 2000)
	stream = srv.Seal(stream, tlsrec.TypeApplicationData, big)
	stream = srv.Seal(stream, tlsrec.TypeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 1})
	if err := srv.Update(); err != nil {
		t.Fatal(err)
	}
	stream = srv.Seal(stream, tlsrec.TypeApplicationData, []byte("after the update"))
	want = append(append([]byte("first message"), big...), "after the update"...)
	for at := 0; at <= len(stream); at += 1 + at/50 {
		c, _ := detachedPair(t)
		got, ok := feed(c, stream, at, at+3)
		if !ok || !bytes.Equal(got, want) {
			t.Fatalf("cut at %d: ok %v, got %d bytes, want %d (%v)", at, ok, len(got), len(want), c.tlsErr)
		}
	}

	for _, tc := range []struct {
		alert []byte
		eof   bool
		line  string
	}{
		{[]byte{1, 0}, true, ""},
		{[]byte{2, 40}, false, "handshake failure"},
	} {
		c, srv := detachedPair(t)
		s := srv.Seal(nil, tlsrec.TypeApplicationData, []byte("bye"))
		s = srv.Seal(s, tlsrec.TypeAlert, tc.alert)
		got, ok := feed(c, s)
		if ok || string(got) != "bye" {
			t.Fatalf("alert %v: ok %v got %q", tc.alert, ok, got)
		}
		var op *net.OpError
		switch {
		case tc.eof && c.tlsErr != io.EOF:
			t.Fatalf("close_notify: %v", c.tlsErr)
		case !tc.eof && (!asOpError(c.tlsErr, &op) || op.Op != "remote error" || !bytes.Contains([]byte(op.Err.Error()), []byte(tc.line))):
			t.Fatalf("alert %v: %v", tc.alert, c.tlsErr)
		}
	}

	// A changed byte ends the reads with the record's error.
	c, srv := detachedPair(t)
	s := srv.Seal(nil, tlsrec.TypeApplicationData, []byte("x"))
	s[len(s)-1] ^= 1
	if _, ok := feed(c, s); ok || c.tlsErr == nil {
		t.Fatalf("a changed byte: ok %v err %v", ok, c.tlsErr)
	}
}

func asOpError(err error, op **net.OpError) bool {
	o, ok := err.(*net.OpError)
	*op = o
	return ok
}

// FuzzOpenRecords: whatever a server sends, in whatever pieces, a
// detached client's reader neither panics nor hands on more bytes than
// it was given, and stops at the first record it cannot take.
func FuzzOpenRecords(f *testing.F) {
	_, srv := detachedPair(f)
	s := srv.Seal(nil, tlsrec.TypeApplicationData, []byte("hello"))
	s = srv.Seal(s, tlsrec.TypeHandshake, []byte{msgKeyUpdate, 0, 0, 1, 1})
	f.Add(s, uint16(3), uint16(20))
	f.Add(s[:len(s)-4], uint16(0), uint16(0))
	f.Add([]byte{23, 3, 3, 0, 0}, uint16(1), uint16(2))
	f.Add([]byte{23, 3, 3, 0xff, 0xff, 1, 2}, uint16(5), uint16(6))
	f.Fuzz(func(t *testing.T, stream []byte, a, b uint16) {
		c, _ := detachedPair(t)
		got, ok := feed(c, stream, int(a), int(a)+int(b))
		if len(got) > len(stream) {
			t.Fatalf("%d bytes taken from %d", len(got), len(stream))
		}
		if !ok && c.tlsErr == nil {
			t.Fatal("stopped without a reason")
		}
		if len(c.recs.part) > tlsrec.HeaderLen+tlsrec.MaxRecord {
			t.Fatalf("holds %d bytes of a cut record", len(c.recs.part))
		}
	})
}
