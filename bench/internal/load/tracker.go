package load

import (
	"sync/atomic"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Latencies are recorded in microseconds up to a minute; two significant
// digits keep one histogram near 20 KiB, so a thousand receivers each own
// one without contention and they are merged at the end.
const (
	histMaxMicros = 60_000_000
	histSigFigs   = 2
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, histMaxMicros, histSigFigs) }

// Window is the measurement window, in Unix nanoseconds of send time. It is
// set once by the runner after every member joined, while the receivers are
// already reading, hence the atomics.
type Window struct {
	start, end atomic.Int64
}

// Set opens the window [start, end).
func (w *Window) Set(start, end int64) { w.start.Store(start); w.end.Store(end) }

// Counts is one receiver's accounting.
type Counts struct {
	Received  uint64 // deliveries with a well-formed stamp for this room
	InWindow  uint64 // of those, sent inside the measurement window
	Gaps      uint64 // sequence numbers skipped over (a later one came first)
	Dups      uint64 // deliveries at or below a sequence number already seen
	Misrouted uint64 // another room's message, or the receiver's own
	Malformed uint64 // payload too short to hold a stamp
}

// Add sums o into c.
func (c *Counts) Add(o Counts) {
	c.Received += o.Received
	c.InWindow += o.InWindow
	c.Gaps += o.Gaps
	c.Dups += o.Dups
	c.Misrouted += o.Misrouted
	c.Malformed += o.Malformed
}

// Tracker checks one receiver's deliveries: per-sender order and
// completeness, and the latency of those sent inside the window. It is
// owned by the receiver's goroutine; only Progress is read concurrently.
type Tracker struct {
	room, self uint32
	last       []uint64 // highest sequence number seen per sender in the room
	win        *Window
	now        int64 // time of the current read, set by SetNow
	Counts     Counts
	Hist       *hdrhistogram.Histogram
	progress   atomic.Uint64
}

// NewTracker tracks member self of a room with members members.
func NewTracker(room, self uint32, members int, win *Window) *Tracker {
	return &Tracker{room: room, self: self, last: make([]uint64, members), win: win, Hist: newHist()}
}

// Observe accounts one delivered payload read at nowNs.
func (t *Tracker) Observe(p []byte, nowNs int64) {
	s, err := DecodePayload(p)
	if err != nil {
		t.Counts.Malformed++
		return
	}
	if s.Room != t.room || s.Member == t.self || int(s.Member) >= len(t.last) {
		t.Counts.Misrouted++
		return
	}
	t.Counts.Received++
	last := t.last[s.Member]
	switch {
	case s.Seq == last+1:
		t.last[s.Member] = s.Seq
	case s.Seq > last+1:
		t.Counts.Gaps += s.Seq - last - 1
		t.last[s.Member] = s.Seq
	default:
		t.Counts.Dups++
	}
	if s.SentNs >= t.win.start.Load() && s.SentNs < t.win.end.Load() {
		t.Counts.InWindow++
		us := (nowNs - s.SentNs) / 1000
		if us < 1 {
			us = 1
		}
		if us > histMaxMicros {
			us = histMaxMicros
		}
		// In range by construction, so RecordValue cannot fail.
		_ = t.Hist.RecordValue(us)
	}
}

// SetNow sets the arrival time Deliver uses.
func (t *Tracker) SetNow(ns int64) { t.now = ns }

// Deliver is Observe at the time set by SetNow; it has the shape Scan wants.
func (t *Tracker) Deliver(p []byte) { t.Observe(p, t.now) }

// Publish makes the received count visible to Progress; the read loop calls
// it once per read, not per message.
func (t *Tracker) Publish() { t.progress.Store(t.Counts.Received) }

// Progress is the received count as of the last Publish, safe from any
// goroutine.
func (t *Tracker) Progress() uint64 { return t.progress.Load() }

// Unique is how many distinct messages arrived.
func (t *Tracker) Unique() uint64 { return t.Counts.Received - t.Counts.Dups }
