package relay

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestUDPSockReadTimesOutAndWakes: a relay UDP socket's waiting read ends
// with a timeout error after its read timeout (the worker's sweep tick),
// and at once when the socket is woken for shutdown (however long the
// timeout); datagrams sent to it are read.
func TestUDPSockReadTimesOutAndWakes(t *testing.T) {
	socks, err := listenUDP(mustUDPAddr(t, "127.0.0.1:0"), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	sk := socks[0]
	defer sk.Close()
	r, err := newUDPReader(sk, 4, 2048)
	if err != nil {
		t.Fatal(err)
	}

	snd, err := net.DialUDP("udp", nil, sk.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	for _, m := range []string{"one", "two"} {
		if _, err := snd.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sk.setReadTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 2 {
		n, err := r.read()
		if err != nil {
			t.Fatalf("read after %d datagrams: %v", got, err)
		}
		got += n
	}
	if n, err := r.poll(); n != 0 || err != nil {
		t.Fatalf("poll of an empty socket: %d, %v", n, err)
	}

	if err := sk.setReadTimeout(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, err = r.read()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read of an empty socket with a timeout: %v, want a timeout", err)
	}

	if err := sk.setReadTimeout(time.Hour); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.read(); done <- err }()
	time.Sleep(20 * time.Millisecond) // most likely waiting by now; if not, it returns at once anyway
	sk.wake()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a woken read still waits")
	}
	if err := sk.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.read(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed socket: %v", err)
	}
}
