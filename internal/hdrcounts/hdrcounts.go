// Package hdrcounts counts values (µs) in the bucket layout of the
// fleet's HdrHistograms (1 µs to 5 minutes at 3 significant digits), with
// the bucket computed inline from constants, for the receive path: a
// profile's decoder counts each stamped delivery's latency as it decodes
// it, into counts the fleet lends it for the read, and the fleet folds
// them into real histograms once a second.
//
// It is not a histogram: no percentiles, no merging; fold into
// hdrhistogram-go for those. HdrHistogram's own RecordValue (a call with
// its checks and error returns, reading the layout from the histogram)
// was a tenth of the fleet's user-space time at N:N, and a second pass
// over a read's latencies another tenth (issue 34).
package hdrcounts

import (
	"math/bits"
	"time"
)

// The layout: that of hdrhistogram.New(Min, Max, Digits) (TestLayout
// checks every bucket against hdrhistogram-go).
const (
	Min    = 1
	Max    = int64(5 * time.Minute / time.Microsecond)
	Digits = 3

	subBits  = 11 // log2 of the sub-buckets per bucket: 2 * 10^Digits rounded up
	halfBits = subBits - 1
)

// Counts counts values. The zero value is not ready: use New. Not safe
// for concurrent use: its owner lends it under a lock.
//
// Add does not count a value at once: it keeps the value's index in a
// small buffer of its own (warm), and Settle counts the buffer's in one
// tight loop, where the increments' misses overlap; counted where the
// decoder finds each value, every increment was a miss of its own behind
// the decode's work (issue 34: the counts' increments were about 3 % of
// the fleet's CPU beside busy loops). A full buffer counts at once.
//
// The lender calls SettleSome after each read, which counts the buffer
// once it is half full: settled at every read, a read of one delivery
// (a WebSocket room's, or UDP's) paid each increment's miss alone, 70 %
// of the fleet's time in client.consumeAt (issue 34).
type Counts struct {
	c    []int64
	n    int64 // values counted since the last Fold
	np   int   // indexes pending in pend
	pend [pendMax]uint16
}

// pendMax is how many values Add keeps before Settle: more than a read
// of deliveries usually holds. (The layout's indexes fit in its uint16s:
// TestLayout.)
const pendMax = 256

// New returns empty counts.
func New() *Counts {
	n := (index(Max)>>halfBits + 1) << halfBits // whole buckets, as HdrHistogram
	return &Counts{c: make([]int64, n)}
}

// Clamp keeps a value in the histogram's range: a negative latency
// (clock step) counts as 0, an overlong one as the maximum, rather than
// being dropped.
func Clamp(v int64) int64 { return min(max(v, 0), Max) }

// index is v's index in the counts (0 <= v <= Max).
func index(v int64) int {
	b := bits.Len64(uint64(v)|(1<<subBits-1)) - subBits
	return b<<halfBits + int(v>>uint(b))
}

// value is a value whose index is i (the lowest of its bucket).
func value(i int) int64 {
	b := i>>halfBits - 1
	sub := i&(1<<halfBits-1) + 1<<halfBits
	if b < 0 {
		b, sub = 0, sub-1<<halfBits
	}
	return int64(sub) << uint(b)
}

// Add counts one value, clamped to the range (pending until Settle).
// Small enough to inline in a decoder's loop, inside
// profile.Events.latency (cost 63 of the inliner's 80: that one is at 80).
func (h *Counts) Add(v int64) {
	i := index(Clamp(v))
	if h.np < pendMax {
		h.pend[h.np] = uint16(i)
		h.np++
	} else {
		h.c[i]++
	}
	h.n++
}

// SettleSome counts the values Add kept once they fill half the buffer
// (Fold counts the rest).
func (h *Counts) SettleSome() {
	if h.np >= pendMax/2 {
		h.Settle()
	}
}

// Settle counts the values Add kept.
func (h *Counts) Settle() {
	c := h.c
	for _, i := range h.pend[:h.np] {
		c[i]++
	}
	h.np = 0
}

// Record counts each value, clamped to the range.
func (h *Counts) Record(vs []int64) {
	c := h.c
	for _, v := range vs {
		c[index(Clamp(v))]++
	}
	h.n += int64(len(vs))
}

// Total is the number of values counted since the last Fold.
func (h *Counts) Total() int64 { return h.n }

// Fold adds the counts to each of hs and starts again from zero.
func (h *Counts) Fold(hs ...interface{ RecordValues(v, n int64) error }) {
	if h.n == 0 {
		return
	}
	h.Settle()
	for i, n := range h.c {
		if n != 0 {
			v := value(i)
			for _, d := range hs {
				d.RecordValues(v, n) // in range by construction
			}
			h.c[i] = 0
		}
	}
	h.n = 0
}
