package fleet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/uring"
)

// openFDs counts the process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// detach takes conn's socket out of the runtime's netpoller as
// client.handOver does: a duplicate descriptor, and conn closed.
func detach(t testing.TB, conn net.Conn, rc syscall.RawConn) *rawFD {
	t.Helper()
	nfd, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		t.Fatal(err, derr)
	}
	conn.Close()
	return &rawFD{fd: nfd}
}

// pollPeer is one socket read by a poller in TestPoller: the bytes its
// handle saw, and a handle that says stop once stopAt bytes came.
type pollPeer struct {
	snd    net.Conn
	r      *streamReader
	got    []byte
	stopAt int
	e      *polled
	why    chan error
}

func newPollPeer(t *testing.T, p *poller, stopAt int) *pollPeer {
	snd, conn, rc := tcpPair(t)
	pp := &pollPeer{snd: snd, stopAt: stopAt, why: make(chan error, 1)}
	pp.r = newStreamReader(conn, rc, func(b []byte) bool {
		pp.got = append(pp.got, b...)
		return pp.stopAt == 0 || len(pp.got) < pp.stopAt
	})
	fd := detach(t, conn, rc)
	pp.r.polled = true
	pp.e = &polled{r: pp.r, fd: fd, ended: func(why error) {
		fd.close()
		pp.why <- why
	}}
	p.post(pp.e, postAdd, time.Time{})
	return pp
}

// TestPoller: one poller reads many sockets it owns (out of the
// runtime's netpoller) edge-triggered, each to the byte and in order
// whatever the sizes and timing of the writes (bytes that come while it
// reads another socket, or while it is about to park, wake it again),
// and ends each once: EOF when its peer closed, nil when its handle said
// stop, errDisconnected when asked (postEnd), the deadline when a drain
// (postDrain) outlives it, EOF when the peer closes during a drain.
// Every slot is free and every descriptor closed after.
func TestPoller(t *testing.T) { forSyscallModes(t, testPoller) }

func testPoller(t *testing.T, plain bool) {
	fds := openFDs(t)
	p, stop := startPoller(t, plain)

	const peers = 12
	var pp []*pollPeer
	for i := range peers {
		stopAt := 0
		if i == 0 {
			stopAt = 50000 // peer 0's handle says stop there (of 100,000 bytes)
		}
		pp = append(pp, newPollPeer(t, p, stopAt))
	}
	want := make([][]byte, peers)
	rng := rand.New(rand.NewPCG(34, 1))
	// Rounds of writes of 1 byte to 40 KiB (past a read buffer's 16 KiB,
	// so a socket needs several reads and turns), with pauses that let
	// the poller park between them.
	for round := range 60 {
		for i, x := range pp {
			if i == 0 || rng.IntN(3) == 0 {
				continue
			}
			n := 1 + rng.IntN(40<<10)
			if rng.IntN(4) != 0 {
				n = 1 + rng.IntN(64)
			}
			b := make([]byte, n)
			for k := range b {
				b[k] = byte(round*31 + i + k)
			}
			want[i] = append(want[i], b...)
			if _, err := x.snd.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		if round%10 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	checkEnd := func(x *pollPeer, want error) {
		t.Helper()
		select {
		case err := <-x.why:
			if !errors.Is(err, want) {
				t.Errorf("ended with %v, want %v", err, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the poller never ended the socket")
		}
	}
	// Peer 0's handle stops half-way through its bytes; peer 1's sender
	// closes; peer 2 is disconnected; peer 3 drains past its deadline;
	// peer 4 drains until its sender closes.
	for k := range 10 {
		b := bytes.Repeat([]byte{byte(k)}, 10000)
		want[0] = append(want[0], b...)
		pp[0].snd.Write(b)
	}
	checkEnd(pp[0], nil)
	if len(pp[0].got) < pp[0].stopAt || !bytes.Equal(pp[0].got, want[0][:len(pp[0].got)]) {
		t.Errorf("peer 0 got %d bytes, want at least %d of its %d", len(pp[0].got), pp[0].stopAt, len(want[0]))
	}
	pp[1].snd.Close()
	checkEnd(pp[1], io.EOF)
	p.post(pp[2].e, postEnd, time.Time{})
	checkEnd(pp[2], errDisconnected)
	p.post(pp[3].e, postDrain, time.Now().Add(50*time.Millisecond))
	checkEnd(pp[3], os.ErrDeadlineExceeded)
	p.post(pp[4].e, postDrain, time.Now().Add(time.Hour))
	pp[4].snd.Write([]byte("last"))
	want[4] = append(want[4], "last"...)
	pp[4].snd.Close()
	checkEnd(pp[4], io.EOF)
	// A second end of an ended client is ignored.
	p.post(pp[2].e, postEnd, time.Time{})
	for i := 1; i < 5; i++ {
		if i != 1 && i != 4 {
			continue
		}
		if !bytes.Equal(pp[i].got, want[i]) {
			t.Errorf("peer %d got %d bytes, want %d (or different ones)", i, len(pp[i].got), len(want[i]))
		}
	}
	// The others: every byte, in order, and nothing more; then each
	// ends with EOF once its sender closes.
	for i := 5; i < peers; i++ {
		pp[i].snd.Close()
		checkEnd(pp[i], io.EOF)
		if !bytes.Equal(pp[i].got, want[i]) {
			t.Errorf("peer %d got %d bytes, want %d (or different ones)", i, len(pp[i].got), len(want[i]))
		}
	}
	for _, x := range pp {
		x.snd.Close()
	}
	stop()
	if n := p.handed.Load(); n != peers {
		t.Errorf("%d sockets handed over, want %d", n, peers)
	}
	if len(p.free) != peers {
		t.Errorf("%d free slots after every socket ended, want %d", len(p.free), peers)
	}
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open after, %d before", n, fds)
	}
}

// forSyscallModes runs test with the two ways the pollers read and the
// schedulers write: a batch of sockets in one io_uring call (skipped
// where the kernel has none), and a system call each (plain).
func forSyscallModes(t *testing.T, test func(t *testing.T, plain bool)) {
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "io_uring", true: "plain"}[plain], func(t *testing.T) {
			if !plain {
				skipWithoutRing(t)
			}
			test(t, plain)
		})
	}
}

// skipWithoutRing skips a test of the io_uring reads where the kernel
// has none for this process.
func skipWithoutRing(t *testing.T) {
	t.Helper()
	r, err := uring.New(1)
	if err != nil {
		t.Skipf("no io_uring here: %v", err)
	}
	r.Close()
}

// startPoller runs a new poller (reading with read(2) when plain) until
// stop, which returns once its loop has; the test's end stops it too if
// the test did not.
func startPoller(t *testing.T, plain bool) (p *poller, stop func()) {
	t.Helper()
	p, why, err := newPoller(plain)
	if err != nil {
		t.Fatal(err)
	}
	if (p.ring == nil) != plain {
		t.Fatalf("a poller with plain %v has a ring %v (%v)", plain, p.ring != nil, why)
	}
	done := make(chan struct{})
	go func() { p.run(); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { p.stop(); <-done }) }
	t.Cleanup(stop)
	return p, stop
}

// TestPollerRefused: a descriptor epoll cannot watch (a regular file) is
// ended at once with the error, and closed.
func TestPollerRefused(t *testing.T) { forSyscallModes(t, testPollerRefused) }

func testPollerRefused(t *testing.T, plain bool) {
	fds := openFDs(t)
	p, stop := startPoller(t, plain)
	f, err := os.Open("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	nfd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	fd := &rawFD{fd: nfd}
	why := make(chan error, 1)
	r := newStreamReader(nil, nil, func([]byte) bool { return true })
	p.post(&polled{r: r, fd: fd, ended: func(err error) { fd.close(); why <- err }}, postAdd, time.Time{})
	if err := <-why; !errors.Is(err, unix.EPERM) {
		t.Errorf("a regular file: %v, want EPERM", err)
	}
	stop()
	if n := openFDs(t); n != fds {
		t.Errorf("%d descriptors open after, %d before", n, fds)
	}
}

// TestRawFDClose: the descriptor closes after the last reference, never
// under one, and refuses new ones once closing.
func TestRawFDClose(t *testing.T) {
	nfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	fd := &rawFD{fd: nfd}
	open := func() bool { _, err := unix.FcntlInt(uintptr(nfd), unix.F_GETFD, 0); return err == nil }
	if !fd.acquire() {
		t.Fatal("refused before close")
	}
	fd.close()
	if !open() {
		t.Fatal("closed under a reference")
	}
	if err := fd.Control(func(uintptr) {}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Control while closing: %v", err)
	}
	fd.release()
	if open() {
		t.Error("still open after the last reference")
	}
}

// TestFleetPolled: a fleet's logged-in TCP clients are owned by their
// schedulers' pollers, with no goroutine of their own while they play,
// every delivery counted and none lost; they leave through their
// pollers, and every descriptor is closed after the run.
func TestFleetPolled(t *testing.T) { forSyscallModes(t, testFleetPolled) }

func testFleetPolled(t *testing.T, plain bool) {
	// The fleet's own goroutines are two a core (a scheduler and its
	// poller) and a few more; n is well past them on any core count.
	n := int64(24 + 4*runtime.GOMAXPROCS(0))
	c := testConfig(t)
	c.Clients = int(n)
	c.Loop = "100ms,300ms"
	c.Duration = 0 // until the goroutines are counted
	c.PlainSyscalls = plain
	fds := openFDs(t)
	goroutines := runtime.NumGoroutine()
	f, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var s Summary
	ran := make(chan error, 1)
	go func() {
		var err error
		s, err = f.Run(ctx)
		ran <- err
	}()
	// Every client handed over and no goroutine per client: the count
	// is a fixed few (schedulers, pollers, the fleet's own) however many
	// clients play.
	var more int
	for tick := time.NewTicker(10 * time.Millisecond); ; <-tick.C {
		// The logins' count (atomic, after the pollers were made) orders
		// the read of the schedulers' pollers after their start.
		if more = runtime.NumGoroutine() - goroutines; f.stats.loggedIn.Load() == n && pollerHanded(f) == n && more < int(n/2) {
			break
		}
		select {
		case err := <-ran:
			t.Fatalf("the run ended (%v) before the pollers held every client with few goroutines: %d goroutines more", err, more)
		default:
		}
	}
	t.Logf("%d clients, %d goroutines more than before the run (GOMAXPROCS %d)", n, more, runtime.GOMAXPROCS(0))
	time.Sleep(700 * time.Millisecond) // a few loops of the script
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	if s.ClientsPolled != n {
		t.Errorf("summary: %d clients polled, want %d", s.ClientsPolled, n)
	}
	for _, sh := range f.scheds {
		if (sh.poll.ring == nil) != plain || (sh.ring == nil) != plain {
			t.Errorf("plain system calls %v, and a poller's ring %v, its scheduler's %v", plain, sh.poll.ring != nil, sh.ring != nil)
		}
	}
	// None lost, and every delivery owed received. A few more may come:
	// casts sent while a receiver's join confirmation was on its way,
	// before its window opened (deliveries.go); the goroutine path gets
	// them too (17 and 3 of 66,000 at 32 clients before the pollers).
	if d := s.Deliveries; s.LoginsSucceeded != n || s.MessagesSent == 0 || d.Received < d.Expected || d.Lost != 0 || d.Expected == 0 {
		t.Errorf("logins %d, deliveries %+v for %d sent", s.LoginsSucceeded, d, s.MessagesSent)
	}
	// More would be a leak; fewer, an earlier test's descriptor closed
	// meanwhile (an idle keep-alive connection).
	if after := openFDs(t); after > fds {
		t.Errorf("%d descriptors open after the run, %d before", after, fds)
	}
}

// pollerHanded is how many clients f's pollers were handed, -1 when a
// scheduler had none.
func pollerHanded(f *Fleet) int64 {
	var n int64
	for _, sh := range f.scheds {
		if sh.poll == nil {
			return -1
		}
		n += sh.poll.handed.Load()
	}
	return n
}

// BenchmarkReadPath is the user-space and runtime cost of the reads
// themselves: each round writes one 1 KiB chunk to each of 64 sockets
// and waits until all of it was read, by a goroutine per socket parked
// in the runtime's netpoller, or by one poller. Under cachegrind
// (instructions per round, load-independent) it shows the park and wake
// a read costs a goroutine.
func BenchmarkReadPath(b *testing.B) {
	const socks, chunk = 64, 1 << 10
	for _, mode := range []string{"goroutines", "poller"} {
		b.Run(mode, func(b *testing.B) {
			var got atomic.Int64
			var want atomic.Int64
			round := make(chan struct{}, 1)
			handle := func(p []byte) bool {
				if got.Add(int64(len(p))) == want.Load() {
					round <- struct{}{}
				}
				return true
			}
			var p *poller
			if mode == "poller" {
				var err error
				if p, _, err = newPoller(false); err != nil {
					b.Fatal(err)
				}
				go p.run()
				defer p.stop()
			}
			var snds []net.Conn
			var wg sync.WaitGroup
			for range socks {
				snd, conn, rc := tcpPair(b)
				snds = append(snds, snd)
				r := newStreamReader(conn, rc, handle)
				if p != nil {
					r.polled = true
					fd := detach(b, conn, rc)
					wg.Add(1)
					p.post(&polled{r: r, fd: fd, ended: func(error) { fd.close(); wg.Done() }}, postAdd, time.Time{})
				} else {
					wg.Go(func() { r.run() })
				}
			}
			buf := make([]byte, chunk)
			b.ResetTimer()
			for i := range b.N {
				want.Store(int64(i+1) * socks * chunk)
				for _, s := range snds {
					s.Write(buf)
				}
				<-round
			}
			b.StopTimer()
			for _, s := range snds {
				s.Close()
			}
			wg.Wait()
		})
	}
}
