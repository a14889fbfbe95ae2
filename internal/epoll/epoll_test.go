package epoll

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestSet: a socket pair's end in the set raises one edge-triggered event
// per arrival with its id and generation, none once drained; Del stops
// them; Wake interrupts a blocked Wait from another goroutine; Close
// leaves no descriptor open.
func TestSet(t *testing.T) {
	before := openFDs(t)
	s, err := New(4)
	if err != nil {
		t.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[1])
	if err := s.Add(fds[0], unix.EPOLLIN|unix.EPOLLRDHUP, 7, 3); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Poll(); n != 0 || err != nil {
		t.Fatalf("idle set: %d events, %v", n, err)
	}
	unix.Write(fds[1], []byte("hi"))
	n, err := s.Wait(1000)
	if n != 1 || err != nil || s.Events[0].Fd != 7 || s.Events[0].Pad != 3 || s.Events[0].Events&unix.EPOLLIN == 0 {
		t.Fatalf("after a write: %d events %+v, %v", n, s.Events[:n], err)
	}
	// Edge-triggered: unread bytes raise no second event.
	if n, _ := s.Poll(); n != 0 {
		t.Fatalf("no new arrival, yet %d events", n)
	}
	if err := s.Mod(fds[0], unix.EPOLLIN|unix.EPOLLOUT, 8, 4); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Poll(); n != 1 || s.Events[0].Fd != 8 || s.Events[0].Pad != 4 {
		t.Fatalf("after Mod: %d events %+v", n, s.Events[:n])
	}
	if err := s.Del(fds[0]); err != nil {
		t.Fatal(err)
	}
	unix.Write(fds[1], []byte("more"))
	if n, _ := s.Poll(); n != 0 {
		t.Fatalf("after Del: %d events", n)
	}
	go func() {
		time.Sleep(20 * time.Millisecond)
		s.Wake()
	}()
	if n, err := s.Wait(-1); n != 1 || err != nil || s.Events[0].Fd != WakeID {
		t.Fatalf("wake: %d events %+v, %v", n, s.Events[:n], err)
	}
	s.Woken()
	if n, _ := s.Poll(); n != 0 {
		t.Fatalf("after Woken: %d events", n)
	}
	unix.Close(fds[0])
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if after := openFDs(t); after != before+1 { // fds[1], closed by the defer
		t.Errorf("%d descriptors open after, %d before (+1 expected)", after, before)
	}
}
