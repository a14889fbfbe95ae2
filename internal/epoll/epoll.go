// Package epoll is an edge-triggered epoll set over raw, non-blocking
// descriptors, with an eventfd in it that wakes its waiter: the event
// loops of programs that serve many sockets from one goroutine per core
// (the relay's TCP loops, the fleet's pollers) rather than a goroutine
// per socket. A descriptor in a Set must not also be polled by Go's
// runtime (a net.Conn's or an os.File's): both would be woken for each
// arrival, and a close by the runtime would leave the Set holding a
// number the kernel may reuse. It is not a general event library: no
// timers (a loop keeps its own and passes Wait a timeout), no callbacks.
//
// Each registered descriptor carries an id and a generation, returned in
// its events (EpollEvent.Fd and .Pad), so a loop finds its connection by
// index and can tell events of a slot's earlier occupant from its own.
package epoll

import (
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WakeID is the id of the Set's own eventfd in its events.
const WakeID = -1

// Set is one epoll descriptor and its wake-up eventfd. Wake is safe from
// any goroutine; everything else belongs to the goroutine that waits.
type Set struct {
	fd, wake int
	// Events holds the events of the last Wait or Poll.
	Events []unix.EpollEvent
	buf    [8]byte
}

// wakeOne is what a wake-up adds to the eventfd's count.
var wakeOne = []byte{1, 0, 0, 0, 0, 0, 0, 0}

// New makes a Set returning at most batch events a wait.
func New(batch int) (*Set, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	wake, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	s := &Set{fd: fd, wake: wake, Events: make([]unix.EpollEvent, max(batch, 1))}
	if err := s.Add(wake, unix.EPOLLIN, WakeID, 0); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Fd is the epoll descriptor, for a waiter that parks on it elsewhere
// (an epoll descriptor is readable while events are ready).
func (s *Set) Fd() int { return s.fd }

// Add registers fd for events (EPOLLET is added), reported with id and gen.
func (s *Set) Add(fd int, events uint32, id, gen int32) error {
	e := unix.EpollEvent{Events: events | unix.EPOLLET, Fd: id, Pad: gen}
	return unix.EpollCtl(s.fd, unix.EPOLL_CTL_ADD, fd, &e)
}

// Mod changes what fd is registered for.
func (s *Set) Mod(fd int, events uint32, id, gen int32) error {
	e := unix.EpollEvent{Events: events | unix.EPOLLET, Fd: id, Pad: gen}
	return unix.EpollCtl(s.fd, unix.EPOLL_CTL_MOD, fd, &e)
}

// Del takes fd out of the set. Closing fd does too, once no other
// descriptor refers to its file.
func (s *Set) Del(fd int) error {
	return unix.EpollCtl(s.fd, unix.EPOLL_CTL_DEL, fd, nil)
}

// Wait waits up to timeout ms (-1: until an event) and returns how many
// events it put in Events; an interrupted wait returns 0 and no error.
func (s *Set) Wait(timeout int) (int, error) {
	n, err := unix.EpollWait(s.fd, s.Events, timeout)
	if errors.Is(err, unix.EINTR) {
		return 0, nil
	}
	return max(n, 0), err
}

// Poll is Wait with a timeout of 0 as a raw system call: it never blocks,
// so it needs none of the runtime's bookkeeping for one that may.
func (s *Set) Poll() (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(s.fd), uintptr(unsafe.Pointer(&s.Events[0])), uintptr(len(s.Events)), 0, 0, 0)
	switch e {
	case 0:
		return int(n), nil
	case unix.EINTR:
		return 0, nil
	}
	return 0, e
}

// Wake makes the waiter's Wait return with a WakeID event.
func (s *Set) Wake() {
	unix.Write(s.wake, wakeOne)
}

// Woken resets the eventfd after a WakeID event (edge-triggered: the next
// Wake raises a new one).
func (s *Set) Woken() {
	unix.Read(s.wake, s.buf[:])
}

// Close closes both descriptors; no goroutine may use the Set any more.
func (s *Set) Close() error {
	return errors.Join(unix.Close(s.fd), unix.Close(s.wake))
}
