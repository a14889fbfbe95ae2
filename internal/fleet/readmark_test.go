package fleet

import (
	"io"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// TestReadMarks: a client is caught up in a read epoch only once its
// reader has read its socket to the end since the epoch began, or when
// its reader is parked with nothing waiting: never while bytes wait
// unread behind a reader that has not run (a starved fleet's), nor while
// a reader is between a read and its count (it has taken the bytes out
// of the socket, so the socket alone would say empty). A reader whose
// reads ended is caught up for good.
func TestReadMarks(t *testing.T) {
	snd, conn, rc := tcpPair(t)
	var epoch atomic.Int64
	c := &client{conn: conn, raw: rc}
	entered, release := make(chan struct{}), make(chan struct{})
	var hold atomic.Bool
	var got []byte
	r := newStreamReader(conn, rc, func(b []byte) bool {
		if hold.Load() {
			entered <- struct{}{}
			<-release
		}
		got = append(got, b...)
		return true
	})
	r.marker = readMarker{mark: &c.readMark, epoch: &epoch}
	// The test is the poller: run returns once a read emptied the
	// socket.
	r.polled = true
	defer r.release()

	send := func(s string) {
		t.Helper()
		if _, err := snd.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
		waitInq(t, c, len(s))
	}
	read := func() {
		t.Helper()
		if err := r.run(); err != errYield {
			t.Fatalf("run: %v, want the socket emptied", err)
		}
	}

	send("abc")
	read()
	e1 := epoch.Add(1) // the drain's quiet begins
	if !c.caughtUp(e1) {
		t.Fatal("a reader parked with its socket empty is not caught up")
	}
	send("def")
	if c.caughtUp(e1) {
		t.Fatal("a reader that has not read the bytes waiting in its socket is caught up")
	}
	read()
	if !c.caughtUp(e1) {
		t.Fatal("a reader that read its socket to the end in the epoch is not caught up")
	}

	// Between the read and its count: the socket is empty, the reader
	// not done.
	e2 := epoch.Add(1)
	hold.Store(true)
	ran := make(chan error, 1)
	send("ghi")
	go func() { ran <- r.run() }()
	<-entered
	if n := inq(t, c); n != 0 {
		t.Fatalf("%d bytes still in the socket with the reader handling its read", n)
	}
	if c.caughtUp(e2) {
		t.Fatal("a reader still handling what it read is caught up")
	}
	close(release)
	if err := <-ran; err != errYield {
		t.Fatalf("run: %v", err)
	}
	hold.Store(false)
	if !c.caughtUp(e2) {
		t.Fatal("a reader done with its read is not caught up")
	}
	if string(got) != "abcdefghi" {
		t.Fatalf("read %q", got)
	}

	// The peer closed: nothing more can come.
	snd.Close()
	if err := r.run(); err != io.EOF {
		t.Fatalf("run after the close: %v, want EOF", err)
	}
	if !c.caughtUp(epoch.Add(1)) {
		t.Fatal("a reader whose reads ended is not caught up")
	}
}

// TestReadMarkAtHandover: a goroutine reader that hands its client to
// the poller right after the read that emptied its socket (the login
// just ended) leaves the client caught up, not "reading" until the
// server next sends (the drain waited 22 s on one socket.io client for
// its server's keepalive).
func TestReadMarkAtHandover(t *testing.T) {
	snd, conn, rc := tcpPair(t)
	var epoch atomic.Int64
	c := &client{conn: conn, raw: rc}
	r := newStreamReader(conn, rc, func([]byte) bool { return true })
	r.marker = readMarker{mark: &c.readMark, epoch: &epoch}
	r.canYield = func() bool { return true }
	defer r.release()
	if !r.inq {
		t.Skip("no TCP_INQ: a goroutine reader cannot tell its socket is empty")
	}
	if _, err := snd.Write([]byte("joined")); err != nil {
		t.Fatal(err)
	}
	waitInq(t, c, len("joined"))
	e := epoch.Add(1)
	if err := r.run(); err != errYield {
		t.Fatalf("run: %v, want the handover", err)
	}
	r.handedOver() // as client.handOver does, once c.raw is the poller's
	if !c.caughtUp(e) {
		t.Fatalf("a client handed over with its socket empty is not caught up (mark %d)", c.readMark.Load())
	}
}

// inq is how many bytes c's socket holds unread.
func inq(t *testing.T, c *client) int {
	t.Helper()
	var n int
	var err error
	if cerr := c.raw.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); cerr != nil || err != nil {
		t.Fatal(cerr, err)
	}
	return n
}

// waitInq waits until c's socket holds n bytes (loopback delivers a
// write at once, but the test does not count on it), as long as the test
// may.
func waitInq(t *testing.T, c *client, n int) {
	t.Helper()
	for end := time.Now().Add(testproc.Patience(t)); inq(t, c) < n; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the socket holds %d bytes, want %d", inq(t, c), n)
		}
	}
}
