package capture

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// farJump is how far a timestamp may be from the packet before it and
// still be taken as it is without looking at the packets after: a capture
// may hold a long silence, but a packet an hour away from both of its
// neighbours has a wrong clock.
const farJump = time.Hour

// maxSilence is the longest forward step kept as a silence when the
// packets after it agree with it; past it the capture's clock stepped (no
// recorded session holds a day with no packet), and the later packets are
// shifted to continue from the packet before.
const maxSilence = 24 * time.Hour

// lookAhead is how many packets the clock holds to judge one: a run of
// bad timestamps up to lookAhead-1 packets long is mended as a group.
const lookAhead = 16

// Plausible capture times: a timestamp outside them is wrong whatever its
// neighbours say (and would not even print as JSON past year 9999).
var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// rawPacket is one packet record as read from the file.
type rawPacket struct {
	data []byte
	ci   gopacket.CaptureInfo
	lt   layers.LinkType
	n    int // 1-based number in the file
	// note is a TLS-terminating proxy's pcapng comment on the packet.
	note string
}

// clock mends timestamps that are wrong by far (farJump) before anything
// uses them, so that what a capture costs to read depends on its packets,
// never on the values of its timestamps:
//
//   - a run of packets far from the packet before, followed within the
//     look-ahead by packets near it again, is far from both sides: the
//     run takes the time of the packet before (at the start of the file,
//     of the first packet after the run);
//   - a jump that the packets after it agree with is a step: back, the
//     later packets are shifted to continue from the packet before;
//     forward, it is kept as a silence up to maxSilence and shifted past
//     it. Either way a note gives its packet and size.
//
// Small disorder (a packet a little earlier than the one before) is left
// for the time-order window after it. Packets leave in the order they
// came, at most lookAhead-1 packets later.
type clock struct {
	q        []rawPacket
	prev     time.Time // the latest time handed on
	havePrev bool
	shift    time.Duration // added to every timestamp after a clock step
	warn     func(format string, args ...any)
}

func newClock(warn func(string, ...any)) *clock { return &clock{warn: warn} }

// push takes the next packet and hands on the packets decided.
func (c *clock) push(p rawPacket, out func(rawPacket)) {
	c.q = append(c.q, p)
	if len(c.q) == lookAhead {
		c.decide(out)
	}
}

// flush hands on the packets still held, at the end of the file.
func (c *clock) flush(out func(rawPacket)) {
	for len(c.q) > 0 {
		c.decide(out)
	}
}

func far(a, b time.Time) bool {
	d := a.Sub(b)
	return d > farJump || d < -farJump
}

func plausible(t time.Time) bool { return !t.Before(minTime) && !t.After(maxTime) }

// at is held packet i's timestamp with the current shift.
func (c *clock) at(i int) time.Time { return c.q[i].ci.Timestamp.Add(c.shift) }

// good says held packet i is plausible and agrees with ref.
func (c *clock) good(i int, ref time.Time) bool {
	t := c.at(i)
	return plausible(t) && !far(t, ref)
}

// decide fixes the time of the oldest packet held (or of a run starting
// with it) and hands it on.
func (c *clock) decide(out func(rawPacket)) {
	if !c.havePrev {
		c.first(out)
		return
	}
	t := c.at(0)
	if plausible(t) && !far(t, c.prev) {
		c.emit(1, t, out)
		return
	}
	// Far from the packet before: does the capture come back to it?
	for j := 1; j < len(c.q); j++ {
		if c.good(j, c.prev) {
			c.mendRun(j, c.prev, "the packets around", out)
			return
		}
	}
	if plausible(t) && len(c.q) > 1 && c.good(1, t) {
		c.step(t, out)
		return
	}
	c.mendRun(1, c.prev, "the packets around", out)
}

// first decides the first packets of the file: a run far from the packets
// after it takes the time of the first packet that no fewer of the packets
// held agree with (itself included) than disagree.
func (c *clock) first(out func(rawPacket)) {
	for k := range c.q {
		t := c.at(k)
		if !plausible(t) {
			continue
		}
		agree := 0
		for j := k + 1; j < len(c.q); j++ {
			if c.good(j, t) {
				agree++
			}
		}
		if rest := len(c.q) - k - 1; agree+1 < rest-agree {
			continue
		}
		if k == 0 {
			c.emit(1, t, out)
		} else {
			c.mendRun(k, t, "the packets after", out)
		}
		return
	}
	t := c.at(0)
	if !plausible(t) {
		c.warn("packet %d: timestamp %s is not a plausible capture time: taken as %s", c.q[0].n, stamp(c.q[0].ci.Timestamp), stamp(minTime))
		t = minTime
	}
	c.emit(1, t, out)
}

// step handles a jump the packets after it agree with.
func (c *clock) step(t time.Time, out func(rawPacket)) {
	n := c.q[0].n
	d := t.Sub(c.prev)
	switch {
	case d < 0:
		c.shift -= d
		c.warn("packet %d: the capture's clock steps back by %s here (the packets after agree): later timestamps are shifted to continue from packet %d", n, approx(d), n-1)
		t = c.prev
	case d > maxSilence:
		c.shift -= d
		c.warn("packet %d: the capture's clock steps forward by %s here (the packets after agree; no session holds such a silence): later timestamps are shifted to continue from packet %d", n, approx(d), n-1)
		t = c.prev
	default:
		c.warn("packet %d: %s with no packet before it (the packets after agree): kept as a silence", n, approx(d))
	}
	c.emit(1, t, out)
}

// mendRun gives the first k packets held time t, with one note naming
// them.
func (c *clock) mendRun(k int, t time.Time, around string, out func(rawPacket)) {
	first, last := c.q[0], c.q[k-1]
	if k == 1 {
		what := "far from " + around + " it"
		if c.havePrev {
			what = approx(c.at(0).Sub(t)) + " from " + around + " it"
		}
		if !plausible(c.at(0)) {
			what = "not a plausible capture time"
		}
		c.warn("packet %d: timestamp %s is %s: taken as %s", first.n, stamp(first.ci.Timestamp), what, stamp(t))
	} else {
		c.warn("packets %d-%d: %d timestamps from %s to %s are far from %s them: taken as %s",
			first.n, last.n, k, stamp(first.ci.Timestamp), stamp(last.ci.Timestamp), around, stamp(t))
	}
	c.emit(k, t, out)
}

// emit hands on the first k packets held at time t.
func (c *clock) emit(k int, t time.Time, out func(rawPacket)) {
	for range k {
		p := c.q[0]
		c.q = c.q[1:]
		p.ci.Timestamp = t
		if !c.havePrev || t.After(c.prev) {
			c.prev = t
		}
		c.havePrev = true
		out(p)
	}
}

// Bounds of the time-order window.
const (
	// reorderWindow is how far back in capture time a packet may come and
	// still be put in its place: the skew between a multi-queue NIC's
	// queues or the files mergecap joined is far less.
	reorderWindow = time.Second
	// reorderPackets and reorderBytes cap what the window holds, whatever
	// the packet rate.
	reorderPackets = 8192
	reorderBytes   = 16 << 20
)

// timeOrder puts packets in time order within a bounded window, as a
// capture from a multi-queue NIC, a mirror port or merged files needs:
// each packet keeps its own time, and a TCP segment or datagram that the
// file holds after a later one goes back before it. A packet that comes
// after the window has moved past its time takes the time of the packet
// before it, so times handed on never go backwards.
type timeOrder struct {
	h        packetHeap
	bytes    int
	newest   time.Time // the latest time pushed
	released time.Time // the latest time handed on
	seq      int
	warn     func(format string, args ...any)

	early, firstEarly int // packets earlier than one before them in the file
	maxEarly          time.Duration
	late, firstLate   int // of those, packets that came after the window
	maxLate           time.Duration
}

func (w *timeOrder) push(p rawPacket, out func(rawPacket)) {
	t := p.ci.Timestamp
	if t.Before(w.newest) {
		w.early++
		if w.firstEarly == 0 {
			w.firstEarly = p.n
		}
		w.maxEarly = max(w.maxEarly, w.newest.Sub(t))
	} else {
		w.newest = t
	}
	w.seq++
	heap.Push(&w.h, heldPacket{p, w.seq})
	w.bytes += len(p.data)
	for w.h.Len() > 0 && (w.newest.Sub(w.h[0].p.ci.Timestamp) > reorderWindow || w.h.Len() > reorderPackets || w.bytes > reorderBytes) {
		w.pop(out)
	}
}

func (w *timeOrder) pop(out func(rawPacket)) {
	p := heap.Pop(&w.h).(heldPacket).p
	w.bytes -= len(p.data)
	if t := p.ci.Timestamp; t.Before(w.released) {
		w.late++
		if w.firstLate == 0 {
			w.firstLate = p.n
		}
		w.maxLate = max(w.maxLate, w.released.Sub(t))
		p.ci.Timestamp = w.released
	} else {
		w.released = t
	}
	out(p)
}

func (w *timeOrder) flush(out func(rawPacket)) {
	for w.h.Len() > 0 {
		w.pop(out)
	}
	if w.early > 0 {
		w.warn("%d packets were earlier than a packet before them in the file (first: packet %d, by up to %v): read in time order",
			w.early, w.firstEarly, w.maxEarly)
	}
	if w.late > 0 {
		w.warn("%d packets came after a packet over %v later than they were (first: packet %d, by up to %v): each was taken as at that packet's time",
			w.late, reorderWindow, w.firstLate, w.maxLate)
	}
}

// heldPacket is a packet in the window; seq keeps file order among equal
// times.
type heldPacket struct {
	p   rawPacket
	seq int
}

type packetHeap []heldPacket

func (h packetHeap) Len() int { return len(h) }
func (h packetHeap) Less(i, j int) bool {
	ti, tj := h[i].p.ci.Timestamp, h[j].p.ci.Timestamp
	if ti.Equal(tj) {
		return h[i].seq < h[j].seq
	}
	return ti.Before(tj)
}
func (h packetHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *packetHeap) Push(x any)   { *h = append(*h, x.(heldPacket)) }
func (h *packetHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// stamp prints a timestamp for a note, whatever its year.
func stamp(t time.Time) string {
	if !plausible(t) {
		return fmt.Sprintf("%d s since 1970", t.Unix())
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// approx prints a duration of any size readably.
func approx(d time.Duration) string {
	d = max(d, -d)
	const year = 365 * 24 * time.Hour
	if d >= year {
		return fmt.Sprintf("about %.0f years", float64(d)/float64(year))
	}
	if d >= 48*time.Hour {
		return fmt.Sprintf("about %.0f days", d.Hours()/24)
	}
	return d.Round(time.Millisecond).String()
}
