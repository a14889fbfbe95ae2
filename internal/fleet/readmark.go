package fleet

import (
	"math"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A read mark says whether a client's reader has caught up with its
// socket, for the drain: a quiet gap alone does not tell a fleet that
// received everything from one whose readers the host starved, their
// deliveries waiting unread in the kernel (a loaded host's mosquitto run
// ended 3.6 % short so: the mqtt profiles' fan-out is the server's, so
// the fleet owes no count to wait for, and the leave's goodbye made the
// server reset connections with deliveries still unread).
//
// The drain begins a read epoch when its quiet begins (Fleet.readEpoch);
// each stream reader loads the epoch when it wakes and, once a read
// empties its socket, stores it as its client's mark. A client is caught
// up in an epoch when its mark is that epoch or later (it read to the
// end after the quiet began), or when it is parked since before with its
// socket empty. The hot path pays an atomic load and two stores per
// wake, not per read and under no lock.
//
// Marks: markUnread (0) for a client whose reads mark nothing (UDP, a
// connection without a RawConn): the drain cannot tell, and judges it
// by the quiet alone as before; markReading between a wake and the read
// that emptied the socket; markDone once its reads ended (nothing more
// can arrive); otherwise one more than the epoch read at the last wake
// (so that epoch 0, before any drain, is not markUnread).
const (
	markUnread  int64 = 0
	markReading int64 = -1
	markDone    int64 = math.MaxInt64
)

// readMarker is a stream reader's link to its client's mark; the zero
// value marks nothing. A value in the reader, not an object of its own:
// one cold line fewer a read (issue 34).
type readMarker struct {
	mark  *atomic.Int64
	epoch *atomic.Int64
}

// wake is called as a read callback begins: the mark to set once the
// socket is empty.
func (m *readMarker) wake() int64 {
	if m.mark == nil {
		return 0
	}
	e := m.epoch.Load() + 1
	m.mark.Store(markReading)
	return e
}

// emptied marks a read that left the socket empty, with wake's mark
// (the epoch loaded before the read).
func (m *readMarker) emptied(e int64) {
	if m.mark != nil {
		m.mark.Store(e)
	}
}

// ended marks a reader whose reads are over.
func (m *readMarker) ended() {
	if m.mark != nil {
		m.mark.Store(markDone)
	}
}

// beginReadEpoch starts a read epoch (the drain's quiet began) and
// returns it.
func (f *Fleet) beginReadEpoch() int64 {
	return f.readEpoch.Add(1)
}

// caughtUp says whether c's reader has read its socket to the end since
// epoch began (or cannot receive any more).
func (c *client) caughtUp(epoch int64) bool {
	m := c.readMark.Load()
	switch {
	case m == markUnread || m > epoch:
		return true
	case m == markReading || c.raw == nil:
		return false
	}
	// Parked since before the epoch: caught up when nothing waits in its
	// socket, and its reader did not wake meanwhile (a read taken out of
	// the socket but not yet counted).
	n := 1
	if err := c.raw.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		return true // closed: it receives nothing more
	}
	return n == 0 && c.readMark.Load() == m
}

// behindReaders returns the clients of list (all the live logged-in
// ones when nil) that have not caught up in epoch.
func (f *Fleet) behindReaders(list []*client, all bool, epoch int64) []*client {
	if all {
		f.mu.Lock()
		list = list[:0]
		for c := range f.live {
			if c.joined.Load() && !c.dead.Load() {
				list = append(list, c)
			}
		}
		f.mu.Unlock()
	}
	behind := list[:0]
	for _, c := range list {
		if !c.dead.Load() && !c.caughtUp(epoch) {
			behind = append(behind, c)
		}
	}
	clear(list[len(behind):])
	return behind
}
