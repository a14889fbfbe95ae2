package uring

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pairs makes n loopback TCP connections and returns, for each, the
// writing end and a non-blocking descriptor of the reading end (a dup,
// closed at the test's end).
func pairs(t testing.TB, n int) (w []net.Conn, fds []int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		f, err := s.(*net.TCPConn).File()
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		fd, err := unix.Dup(int(f.Fd()))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(); unix.Close(fd) })
		w, fds = append(w, c), append(fds, int32(fd))
	}
	return w, fds
}

// newRing is New, or a skip where the kernel has no io_uring for us.
func newRing(t testing.TB, entries int) *Ring {
	t.Helper()
	r, err := New(entries)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no io_uring here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// bothWays runs test on a ring of entries, and on one that met a failure
// (plain: read(2) and write(2) from then on).
func bothWays(t *testing.T, entries int, test func(t *testing.T, r *Ring)) {
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "ring", true: "plain after a failure"}[plain], func(t *testing.T) {
			r := newRing(t, entries)
			r.plain = plain
			test(t, r)
		})
	}
}

func TestRecv(t *testing.T) {
	bothWays(t, 64, func(t *testing.T, r *Ring) {
		plain := r.plain
		w, fds := pairs(t, 40)
		// By connection: what it was sent, whether its peer then
		// closed, and what its read returns (a 4 KiB buffer).
		type conn struct {
			send  []byte
			close bool
			want  int32
		}
		cases := make([]conn, len(fds))
		for i := range cases {
			switch i % 4 {
			case 0: // nothing: EAGAIN
				cases[i] = conn{want: -int32(unix.EAGAIN)}
			case 1: // a few bytes
				cases[i] = conn{send: bytes.Repeat([]byte{byte(i)}, 1+i), want: int32(1 + i)}
			case 2: // more than the buffer: a full read
				cases[i] = conn{send: bytes.Repeat([]byte{byte(i)}, 5000), want: 4096}
			case 3: // the peer closed: end of stream
				cases[i] = conn{close: true}
			}
		}
		for i, c := range cases {
			if c.send != nil {
				if _, err := w[i].Write(c.send); err != nil {
					t.Fatal(err)
				}
			}
			if c.close {
				w[i].Close()
			}
		}
		waitReadable(t, fds)
		bufs := make([][]byte, len(fds))
		for i := range bufs {
			bufs[i] = make([]byte, 4096)
		}
		res := make([]int32, len(fds))
		if err := r.Recv(fds, bufs, res); err != nil {
			t.Fatal(err)
		}
		for i, c := range cases {
			if res[i] != c.want {
				t.Errorf("connection %d: read %d, want %d", i, res[i], c.want)
				continue
			}
			if c.want > 0 && !bytes.Equal(bufs[i][:c.want], c.send[:c.want]) {
				t.Errorf("connection %d: read other bytes than were sent", i)
			}
		}
		if plain != r.plain {
			t.Errorf("plain %v after a good batch, want %v", r.plain, plain)
		}
	})
}

// waitReadable waits until every descriptor that is to read something
// (all but those whose case wants EAGAIN) is readable: loopback sends
// arrive within the send, but a FIN's arrival is not promised by Close.
func waitReadable(t *testing.T, fds []int32) {
	t.Helper()
	pfds := make([]unix.PollFd, 0, len(fds))
	for i, fd := range fds {
		if i%4 != 0 {
			pfds = append(pfds, unix.PollFd{Fd: fd, Events: unix.POLLIN})
		}
	}
	for range 100 {
		ready := 0
		if _, err := unix.Poll(pfds, 10); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
		for _, p := range pfds {
			if p.Revents != 0 {
				ready++
			}
		}
		if ready == len(pfds) {
			return
		}
	}
	t.Fatal("connections not readable after 1 s")
}

func TestRecvBatchBounds(t *testing.T) {
	r := newRing(t, 4)
	_, fds := pairs(t, r.Entries()+1)
	bufs := make([][]byte, len(fds))
	for i := range bufs {
		bufs[i] = make([]byte, 16)
	}
	for _, tc := range []struct {
		name    string
		n, bufs int
	}{
		{"more reads than the ring holds", len(fds), len(fds)},
		{"fewer buffers than reads", 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := r.Recv(fds[:tc.n], bufs[:tc.bufs], make([]int32, tc.n)); err == nil {
				t.Fatal("no error")
			}
		})
	}
	if err := r.Recv(nil, nil, nil); err != nil {
		t.Fatalf("an empty batch: %v", err)
	}
}

func TestRecvBadDescriptor(t *testing.T) {
	// A closed descriptor fails its own read only (SUBMIT_ALL), and the
	// ring stays a ring.
	r := newRing(t, 8)
	w, fds := pairs(t, 2)
	if _, err := w[1].Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	bad, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	badFD := int32(bad.Fd())
	bad.Close()
	batch := []int32{badFD, fds[1]}
	res := make([]int32, 2)
	waitOne(t, fds[1])
	if err := r.Recv(batch, [][]byte{make([]byte, 8), make([]byte, 8)}, res); err != nil {
		t.Fatal(err)
	}
	if res[0] != -int32(unix.EBADF) || res[1] != 1 || r.plain {
		t.Fatalf("results %v, plain %v; want [-EBADF 1], a ring", res, r.plain)
	}
}

func waitOne(t *testing.T, fd int32) {
	t.Helper()
	p := []unix.PollFd{{Fd: fd, Events: unix.POLLIN}}
	if n, err := unix.Poll(p, 1000); err != nil || n != 1 {
		t.Fatalf("not readable: %d %v", n, err)
	}
}

// BenchmarkRecv reads 64 sockets holding 3 KB each, as one batch through
// the ring and as 64 read(2) calls.
func BenchmarkRecv(b *testing.B) {
	for _, plain := range []bool{false, true} {
		name := map[bool]string{false: "ring", true: "read"}[plain]
		b.Run(name, func(b *testing.B) {
			r := newRing(b, 64)
			r.plain = plain
			w, fds := pairs(b, 64)
			msg := make([]byte, 3000)
			bufs := make([][]byte, len(fds))
			for i := range bufs {
				bufs[i] = make([]byte, 16<<10)
			}
			res := make([]int32, len(fds))
			for b.Loop() {
				b.StopTimer()
				for _, c := range w {
					c.Write(msg)
				}
				b.StartTimer()
				if err := r.Recv(fds, bufs, res); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(fds)), "ns/read")
		})
	}
}

func TestSend(t *testing.T) {
	bothWays(t, 16, func(t *testing.T, r *Ring) {
		// The reading ends' descriptors are written to here; their
		// peers (w) read.
		peers, fds := pairs(t, 3)
		const ok, reset, full = 0, 1, 2
		if err := peers[reset].(*net.TCPConn).SetLinger(0); err != nil {
			t.Fatal(err)
		}
		peers[reset].Close() // a reset, at once on loopback
		if err := unix.SetsockoptInt(int(fds[full]), unix.SOL_SOCKET, unix.SO_SNDBUF, 4096); err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, 64<<10)
		for {
			if _, err := unix.Write(int(fds[full]), chunk); err == unix.EAGAIN {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		waitOne(t, fds[reset]) // the reset arrived: readable (an error)
		msg := []byte("hello, batch")
		bufs := [][]byte{msg, msg, msg}
		res := make([]int32, 3)
		if err := r.Send(fds, bufs, res); err != nil {
			t.Fatal(err)
		}
		if res[ok] != int32(len(msg)) {
			t.Errorf("a writable socket took %d bytes, want %d", res[ok], len(msg))
		}
		if e := unix.Errno(-res[reset]); res[reset] >= 0 || (e != unix.ECONNRESET && e != unix.EPIPE) {
			t.Errorf("a reset connection: %d, want -ECONNRESET or -EPIPE", res[reset])
		}
		if res[full] != -int32(unix.EAGAIN) {
			t.Errorf("a full socket: %d, want -EAGAIN", res[full])
		}
		got := make([]byte, len(msg))
		peers[ok].SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(peers[ok], got); err != nil || !bytes.Equal(got, msg) {
			t.Errorf("the peer read %q (%v), want %q", got, err, msg)
		}
	})
}
