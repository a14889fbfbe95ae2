package fleet

import (
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestUDPReaderBatches: datagrams waiting on a connected socket come back
// in order, whole, several per read once the reader has grown its slots;
// a datagram that fills a slot grows the slots; a read deadline ends a
// read with a timeout, as on conn.Read.
func TestUDPReaderBatches(t *testing.T) {
	rcv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rcv.Close()
	snd, err := net.DialUDP("udp", nil, rcv.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	ur, err := newUDPReader(rcv)
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for round := range 8 {
		for i := range 20 {
			fmt.Fprintf(snd, "datagram %d-%d", round, i)
		}
		for got := 0; got < 20; {
			rcv.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := ur.read()
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			for i := range n {
				want := fmt.Sprintf("datagram %d-%d", round, got+i)
				if d := string(ur.datagram(i)); d != want {
					t.Fatalf("got %q, want %q", d, want)
				}
			}
			most = max(most, n)
			got += n
			ur.adapt(n)
		}
	}
	if most < 4 {
		t.Errorf("at most %d datagrams per read with 20 waiting: the reader did not grow", most)
	}
	big := make([]byte, readBuf)
	snd.Write(big)
	rcv.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := ur.read()
	if err != nil || n != 1 || len(ur.datagram(0)) != readBuf {
		t.Fatalf("a slot-sized datagram: n %d, err %v", n, err)
	}
	ur.adapt(n)
	if ur.size <= readBuf {
		t.Errorf("slots of %d bytes after a datagram filled one", ur.size)
	}
	rcv.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := ur.read(); !isTimeout(err) {
		t.Errorf("read past its deadline: %v, want a timeout", err)
	}
	// It waited on an empty socket: its slots went back to the pool.
	if ur.slots != nil {
		t.Errorf("the reader kept %d slots while it waited", len(ur.slots.bufs))
	}
}

// TestStreamReaderLends: a TCP reader returns what was written, in order
// across reads, grows its buffer when a read fills it, holds no buffer
// while it waits on an empty socket, and reports the peer's close as EOF.
func TestStreamReaderLends(t *testing.T) {
	snd, c, rc := tcpPair(t)
	want := make([]byte, 3*readBuf)
	for i := range want {
		want[i] = byte(i % 251)
	}
	var got []byte
	r := newStreamReader(c, rc, func(b []byte) bool {
		got = append(got, b...)
		return len(got) < len(want)
	})
	if _, err := snd.Write(want); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := r.run(); err != nil {
		t.Fatalf("after %d bytes: %v", len(got), err)
	}
	if string(got) != string(want) {
		t.Fatal("bytes differ from those written")
	}
	if r.size <= readBuf {
		t.Errorf("buffer of %d bytes after reads of %d waiting bytes", r.size, len(want))
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if err := r.run(); !isTimeout(err) {
		t.Errorf("read past its deadline: %v, want a timeout", err)
	}
	if r.buf != nil {
		t.Errorf("the reader kept a buffer of %d bytes while it waited", len(*r.buf))
	}
	snd.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := r.run(); err != io.EOF {
		t.Errorf("after the peer closed: %v, want EOF", err)
	}
	r.release()
}

// TestStreamReaderNoLostWakeup: bytes that arrive while the reader handles
// a short read, after that read and before it parks, wake it: it parks
// without reading the empty socket again, and must not sleep through
// them (here until the deadline).
func TestStreamReaderNoLostWakeup(t *testing.T) {
	snd, c, rc := tcpPair(t)
	const rounds = 200
	reads, got := 0, 0
	r := newStreamReader(c, rc, func(b []byte) bool {
		reads++
		got += len(b)
		if got < rounds*10 && got%10 == 0 {
			// The next bytes arrive between this read and the park.
			if _, err := snd.Write(make([]byte, 10)); err != nil {
				t.Error(err)
				return false
			}
		}
		return got < rounds*10
	})
	defer r.release()
	if _, err := snd.Write(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := r.run(); err != nil {
		t.Fatalf("after %d of %d bytes in %d reads: %v", got, rounds*10, reads, err)
	}
}

// TestStreamReaderDataThenFIN: the peer writes and closes before the
// reader looks; the read that returns the data leaves the FIN unread
// with its readiness already spent, so the reader must read again (the
// TCP_INQ hint says so) and end with EOF, not park for good.
func TestStreamReaderDataThenFIN(t *testing.T) {
	for _, n := range []int{10, readBuf - 1, readBuf, 3 * readBuf} {
		snd, c, rc := tcpPair(t)
		got := 0
		r := newStreamReader(c, rc, func(b []byte) bool { got += len(b); return true })
		if !r.inq {
			t.Log("no TCP_INQ here: the reader reads until EAGAIN")
		}
		snd.Write(make([]byte, n))
		snd.Close()
		time.Sleep(50 * time.Millisecond) // the FIN is in, its readiness seen by the poller
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		if err := r.run(); err != io.EOF || got != n {
			t.Errorf("%d bytes then FIN: %d bytes read, ended with %v, want EOF", n, got, err)
		}
		r.release()
		c.Close()
	}
}

// tcpPair is a loopback TCP connection: the sending end, the receiving
// end and its RawConn for a reader; all closed when the test ends.
func tcpPair(t testing.TB) (snd, c net.Conn, rc syscall.RawConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	snd, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { snd.Close() })
	c, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if rc, err = c.(*net.TCPConn).SyscallConn(); err != nil {
		t.Fatal(err)
	}
	return snd, c, rc
}
