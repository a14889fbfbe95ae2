package capture

import (
	"fmt"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// farJump is how far a timestamp may be from the packet before it and
// still be taken as it is without looking at the packet after: a capture
// may hold a long silence, but a packet an hour away from both of its
// neighbours has a wrong clock.
const farJump = time.Hour

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
}

// clock mends packet timestamps before anything uses them, so that what a
// capture costs to read depends on its packets, never on the values of its
// timestamps, and times never go backwards:
//
//   - a packet far (farJump) from the packet before it, while the packet
//     after it is near that one, is an outlier: it takes the time of the
//     packet before (the first packet: of the packet after);
//   - a jump that the packets after it confirm is real: forward it is kept
//     (a long silence), backward it is a clock step and the later packets
//     are shifted to continue from the packet before;
//   - a packet earlier than the one before (by less than farJump) takes its
//     time.
//
// Each mend is reported with its packet number. Packets leave in the
// order they came, at most two packets later (the look-ahead).
type clock struct {
	q        []rawPacket // look-ahead, at most 3
	n        int         // packets handed out
	prev     time.Time
	havePrev bool
	shift    time.Duration // added to every timestamp after a clock step back
	warn     func(format string, args ...any)

	backs, firstBack int
	maxBack          time.Duration
}

func newClock(warn func(string, ...any)) *clock { return &clock{warn: warn} }

// push takes the next packet and hands on the packets decided.
func (c *clock) push(p rawPacket, out func(rawPacket)) {
	c.q = append(c.q, p)
	if len(c.q) == 3 {
		c.decide(out)
	}
}

// flush hands on the packets still held, at the end of the file.
func (c *clock) flush(out func(rawPacket)) {
	for len(c.q) > 0 {
		c.decide(out)
	}
	if c.backs > 0 {
		c.warn("%d packets were earlier than the packet before them (first: packet %d, by up to %v): each was taken as at that packet's time",
			c.backs, c.firstBack, c.maxBack)
	}
}

func far(a, b time.Time) bool {
	d := a.Sub(b)
	return d > farJump || d < -farJump
}

func plausible(t time.Time) bool { return !t.Before(minTime) && !t.After(maxTime) }

// decide fixes the time of the oldest packet held and hands it on.
func (c *clock) decide(out func(rawPacket)) {
	p := c.q[0]
	c.q = c.q[1:]
	c.n++
	raw := p.ci.Timestamp
	t := raw.Add(c.shift)
	var next, after *time.Time
	if len(c.q) > 0 {
		n := c.q[0].ci.Timestamp.Add(c.shift)
		next = &n
	}
	if len(c.q) > 1 {
		a := c.q[1].ci.Timestamp.Add(c.shift)
		after = &a
	}
	switch {
	case !c.havePrev:
		// The first packet: an outlier if far from the next two, which
		// agree (or if implausible and the next is not).
		if next != nil && plausible(*next) && (!plausible(t) || far(t, *next) && (after == nil || !far(*next, *after))) {
			c.warn("packet %d: timestamp %s is far from the packets after it: taken as %s", c.n, stamp(raw), stamp(*next))
			t = *next
		} else if !plausible(t) {
			c.warn("packet %d: timestamp %s is not a plausible capture time: taken as %s", c.n, stamp(raw), stamp(minTime))
			t = minTime
		}
	case !plausible(t) || far(t, c.prev) && (next == nil || !far(*next, c.prev)):
		c.warn("packet %d: timestamp %s is %s from the packets around it: taken as %s", c.n, stamp(raw), approx(t.Sub(c.prev)), stamp(c.prev))
		t = c.prev
	case t.Before(c.prev) && far(t, c.prev):
		// The packets after agree: the capture's clock stepped back.
		step := c.prev.Sub(t)
		c.shift += step
		c.warn("packet %d: the capture's clock steps back by %s here: later timestamps are shifted to continue from packet %d", c.n, approx(step), c.n-1)
		t = c.prev
	case t.Before(c.prev):
		c.backs++
		if c.firstBack == 0 {
			c.firstBack = c.n
		}
		c.maxBack = max(c.maxBack, c.prev.Sub(t))
		t = c.prev
	}
	c.prev, c.havePrev = t, true
	p.ci.Timestamp = t
	out(p)
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
