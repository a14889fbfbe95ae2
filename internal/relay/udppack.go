package relay

import (
	"sync"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Packing a UDP client's frames across workers and flushes.
//
// The cost of UDP is per datagram (udpio.go), so a worker packs a client's
// frames into datagrams of up to Config.UDPCoalesce bytes. It used to pack
// only what one worker queued between two of its sends. But the workers
// share the port (SO_REUSEPORT hashes each sender onto one), so a member of
// a room got each tick's frames from every worker, each packing its own
// share; and what one worker read in one gather rarely filled a datagram.
// On a quiet host that was ~6 deliveries per datagram of a possible ~9.
//
// Now each UDP client has one datagram being filled, its openDgram, which
// every worker appends to under the client's own mutex. It leaves, through
// the sendmmsg of the worker that finds it so, when the next frame would
// not fit (sent at once), or when its first frame has waited
// Config.UDPHold: each worker lists the datagrams it opened, and at every
// flush sends those that are due; its read times out when the first is
// due, so a datagram waits no longer for want of traffic. A frame so waits
// at most about UDPHold for others to share its datagram, as a TCP writer
// waits --write-coalesce for more of a burst.

// openDgram is a UDP client's datagram being filled: whole frames.
type openDgram struct {
	mu  sync.Mutex
	b   []byte
	at  int64  // relay clock of its first frame
	dlv int    // deliver frames in it
	seq uint64 // bumped at each opening, so a worker's stale listing is told apart
}

// opened is a worker's listing of a datagram it opened.
type opened struct {
	c   *client
	seq uint64
}

// packing reports whether deliveries go through the clients' open
// datagrams (packing on, with a hold).
func (u *udpServer) packing() bool { return u.w.coalesce > 0 && u.s.cfg.UDPHold > 0 }

// pack appends frame, queued at relay clock now, to c's open datagram, and
// queues in the worker's writer a datagram it fills. Without packing, the
// frame goes to the writer, which packs what it holds at its flush.
func (u *udpServer) pack(c *client, frame []byte, now int64) {
	if !u.packing() {
		if u.w.add(frame, c.addr) {
			u.sendAll() // a huge fan-out: send what is queued now
		}
		return
	}
	limit := u.w.coalesce
	full := false
	d := &c.dg
	d.mu.Lock()
	if len(d.b) > 0 && len(d.b)+len(frame) > limit {
		full = u.take(c)
	}
	if len(d.b) == 0 {
		if d.b == nil {
			d.b = make([]byte, 0, limit) // held while the client lives: ≤ 1200 bytes by default
		}
		d.at = now
		d.seq++
		u.opened = append(u.opened, opened{c, d.seq})
	}
	d.b = append(d.b, frame...)
	if wire.Type(frame[wire.LenSize]) == wire.TypeDeliver {
		d.dlv++
	}
	if len(d.b)+len(frame) > limit {
		full = u.take(c) || full // another like it would not fit: it is as full as it gets
	}
	d.mu.Unlock()
	if full {
		u.sendAll()
	}
}

// take queues c's open datagram in the worker's writer and empties it;
// c.dg.mu must be held. full as for udpWriter.add.
func (u *udpServer) take(c *client) (full bool) {
	d := &c.dg
	full = u.w.addDatagram(d.b, c.addr, d.dlv)
	d.b, d.dlv = d.b[:0], 0
	return full
}

// due queues the open datagrams this worker opened whose first frame has
// waited the hold at relay clock now (all: every one), forgets those
// another worker sent or refilled, and notes when the first of the rest is
// due (u.next; 0 for none).
func (u *udpServer) due(now int64, all bool) {
	hold := int64(u.s.cfg.UDPHold)
	keep := u.opened[:0]
	u.nextDue = 0
	for _, o := range u.opened {
		d := &o.c.dg
		d.mu.Lock()
		switch {
		case d.seq != o.seq || len(d.b) == 0: // sent (and maybe opened again) by another
		case all || now-d.at >= hold:
			u.take(o.c)
		default:
			keep = append(keep, o)
			if at := d.at + hold; u.nextDue == 0 || at < u.nextDue {
				u.nextDue = at
			}
		}
		d.mu.Unlock()
	}
	clear(u.opened[len(keep):]) // drop the clients' references
	u.opened = keep
}
