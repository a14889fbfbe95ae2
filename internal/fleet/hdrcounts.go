package fleet

import "math/bits"

// hdrCounts counts values (µs) in the bucket layout of newHist's
// HdrHistogram (histMin 1, histDigits 3: 2048 sub-buckets, unit 1), with
// the index computed inline from constants. The readers record every
// delivery's latency, and HdrHistogram's RecordValue (a call with its
// checks and error returns, reading the layout from the histogram) was
// a tenth of the fleet's user-space time at N:N. fold adds the counts to
// real histograms; TestHdrCountsLayout checks the layout against
// hdrhistogram-go for every bucket.
type hdrCounts struct {
	c      []int64
	lo, hi int // the indices touched since the last fold; lo > hi: none
}

const (
	hdrSubBits  = 11 // log2 of the sub-buckets per bucket: 2 * 10^histDigits rounded up
	hdrHalfBits = hdrSubBits - 1
)

// hdrIndex is v's index in the counts (0 <= v <= histMax).
func hdrIndex(v int64) int {
	b := 64 - bits.LeadingZeros64(uint64(v)|(1<<hdrSubBits-1)) - hdrSubBits
	return (b+1)<<hdrHalfBits + int(v>>uint(b)) - 1<<hdrHalfBits
}

// hdrValue is a value whose index is i (the lowest of its bucket).
func hdrValue(i int) int64 {
	b := i>>hdrHalfBits - 1
	sub := i&(1<<hdrHalfBits-1) + 1<<hdrHalfBits
	if b < 0 {
		b, sub = 0, sub-1<<hdrHalfBits
	}
	return int64(sub) << uint(b)
}

func newHdrCounts() *hdrCounts {
	n := (hdrIndex(histMax)>>hdrHalfBits + 1) << hdrHalfBits // whole buckets, as HdrHistogram
	return &hdrCounts{c: make([]int64, n), lo: n, hi: -1}
}

// record counts each value, clamped to the histogram's range.
func (h *hdrCounts) record(us []int64) {
	lo, hi, c := h.lo, h.hi, h.c
	for _, v := range us {
		i := hdrIndex(clampHist(v))
		c[i]++
		lo, hi = min(lo, i), max(hi, i)
	}
	h.lo, h.hi = lo, hi
}

// fold adds the counts to each of hs and starts again from zero.
func (h *hdrCounts) fold(hs ...interface{ RecordValues(v, n int64) error }) {
	for i := h.lo; i <= h.hi; i++ {
		if n := h.c[i]; n != 0 {
			v := hdrValue(i)
			for _, d := range hs {
				d.RecordValues(v, n) // in range by construction
			}
			h.c[i] = 0
		}
	}
	h.lo, h.hi = len(h.c), -1
}
