// Package finetimer is a one-shot timer that wakes its goroutine within
// tens of microseconds of its deadline, however idle the process is, and
// that other goroutines can fire early: the wait of a loop that sends on
// a schedule (the fleet's schedulers), where being late is the error the
// loop exists to avoid.
//
// Go's own timers are late by up to a millisecond on Linux whenever the
// process has nothing else to run: the runtime then sleeps in
// epoll_wait, whose timeout is whole milliseconds, a sub-millisecond one
// rounded up to 1 ms (golang/go#53824). Measured here, a 100 µs
// time.Timer fired 985 µs late at the median, a 1.5 ms one 657 µs late;
// the fleet's sends, each due at its recorded time, were late by half a
// millisecond at the median on a lightly loaded fleet. A Timer is a
// timerfd that the runtime's netpoller watches: its expiry wakes that
// epoll_wait at once (21-30 µs late at the median in the same test).
//
// It is not for many timers (each is a descriptor, and each wait a
// timerfd_settime call) nor for long waits where a millisecond does not
// matter; where the kernel refuses a timerfd, a Timer falls back to a Go
// timer and says so (Fine).
package finetimer

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"
	_ "unsafe" // go:linkname

	"golang.org/x/sys/unix"
)

// Timer is one waiter's timer. Wait and Close belong to the goroutine that
// waits; Kick is safe from any goroutine, at any time, also after Close.
type Timer struct {
	// kicked is a wake-up not yet taken by a Wait; kick carries it to a
	// wait on the Go timer (it may hold one already taken: that wait
	// then returns early, which a loop that looks at its clock after
	// each wait does not mind).
	kicked atomic.Bool
	kick   chan struct{}
	// onFD is set while a Wait waits on the timerfd: only then does a
	// Kick need a system call to end it.
	onFD atomic.Bool

	// The timerfd; fine false when the kernel refused one (or it
	// failed), and every wait is the Go timer's.
	file *os.File
	rc   syscall.RawConn
	fd   int
	fine bool

	slow *time.Timer // WaitCoarse's, and Wait's without a timerfd

	// A timerfd wait's, for goOn (a method value made once: a closure
	// made at each wait would be an allocation each).
	deadline int64
	its      unix.ItimerSpec
	serr     error
	goOn     func(uintptr) bool
}

// New returns a stopped Timer.
func New() *Timer {
	t := &Timer{kick: make(chan struct{}, 1), slow: time.NewTimer(time.Hour)}
	t.slow.Stop()
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return t
	}
	// A non-blocking descriptor in an os.File is polled by the runtime
	// (never call its Fd(): that makes it blocking).
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return t
	}
	t.file, t.rc, t.fd, t.fine = f, rc, fd, true
	t.goOn = t.lookAgain
	return t
}

// Fine reports whether Wait waits on a timerfd (false: on a Go timer, as
// precise as the runtime's).
func (t *Timer) Fine() bool { return t.fine }

// Wait returns once d has passed, or at once if Kick was called since the
// last wait returned (or is called during this one); kicked says which.
// A d of zero or less returns at once.
func (t *Timer) Wait(d time.Duration) (kicked bool) {
	if !t.fine {
		return t.waitSlow(d)
	}
	t.deadline = monotonic() + int64(d)
	t.its = unix.ItimerSpec{Value: unix.NsecToTimespec(t.deadline)}
	t.serr = nil
	t.onFD.Store(true) // before lookAgain's first look at the kick
	err := t.rc.Read(t.goOn)
	t.onFD.Store(false)
	if err != nil || t.serr != nil { // not seen: the file is the waiter's, without deadlines
		t.fine = false
		return t.waitSlow(time.Duration(t.deadline - monotonic()))
	}
	return t.takeKick()
}

// lookAgain says whether a timerfd wait is over. The runtime calls it once
// it has reset the descriptor's readiness, then at each edge. It asks the
// clock and the kick, not the descriptor, and arms the timer each time
// the wait goes on: an expiry before that reset would be lost to the
// wait, and a Kick's expiry can replace this wait's (a Kick whose kick an
// earlier Wait took, or one between the look and the arming), but then
// raises an edge, and it looks again. The expirations' count is never
// read: timerfd_settime clears it.
func (t *Timer) lookAgain(uintptr) bool {
	if t.kicked.Load() || monotonic() >= t.deadline {
		return true
	}
	if t.serr = unix.TimerfdSettime(t.fd, unix.TFD_TIMER_ABSTIME, &t.its, nil); t.serr != nil {
		return true
	}
	return t.kicked.Load()
}

// WaitCoarse is Wait on a Go timer: no system call, and on time within a
// few hundred microseconds while the process is busy, but up to a
// millisecond late when it is idle. For a loop that waits briefly again
// and again: a timerfd's wake for each of those waits raised the fleet's
// CPU by a tenth and more at N:N (issue 34).
func (t *Timer) WaitCoarse(d time.Duration) (kicked bool) { return t.waitSlow(d) }

// takeKick takes a pending kick.
func (t *Timer) takeKick() bool {
	if !t.kicked.Swap(false) {
		return false
	}
	select {
	case <-t.kick:
	default:
	}
	return true
}

// waitSlow waits on the Go timer.
func (t *Timer) waitSlow(d time.Duration) bool {
	if t.takeKick() {
		return true
	}
	if d <= 0 {
		return false
	}
	t.slow.Reset(d)
	select {
	case <-t.kick:
		t.slow.Stop()
		t.kicked.Store(false)
		return true
	case <-t.slow.C:
		return false
	}
}

// Kick ends the Wait in progress, or the next one, at once.
func (t *Timer) Kick() {
	if t.kicked.Swap(true) {
		return // one is pending: a Wait will see it first
	}
	select {
	case t.kick <- struct{}{}:
	default:
	}
	if !t.onFD.Load() {
		return // a Go timer's wait, or none: it sees the kick
	}
	// Expire now. Control fails once the file is closed, so a late
	// Kick never reaches a reused descriptor number.
	its := unix.ItimerSpec{Value: unix.Timespec{Nsec: 1}}
	_ = t.rc.Control(func(fd uintptr) {
		_ = unix.TimerfdSettime(int(fd), 0, &its, nil)
	})
}

// Close releases the timerfd. Wait must not be called after it.
func (t *Timer) Close() error {
	t.slow.Stop()
	if t.file == nil {
		return nil
	}
	return t.file.Close()
}

// monotonic is CLOCK_MONOTONIC in ns, the timerfd's clock: the runtime's
// own reading of it (vDSO; unix.ClockGettime is a system call).
//
//go:linkname monotonic runtime.nanotime
func monotonic() int64
