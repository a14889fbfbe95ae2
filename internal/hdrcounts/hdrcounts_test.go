package hdrcounts

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(Min, Max, Digits) }

// TestLayout: Counts has the histogram's layout: the same number of
// counts, and values counted through it (one by one and a slice at a
// time) and folded give a histogram equal, count for count, to one that
// recorded them itself, at every bucket's edges, out of range (clamped)
// and at random.
func TestLayout(t *testing.T) {
	ref := newHist()
	if got, want := len(New().c), len(ref.Export().Counts); got != want || got > 1<<16 {
		t.Fatalf("%d counts, hdrhistogram has %d (and Add's pending indexes hold up to 1<<16)", got, want)
	}
	var vs []int64
	for i := range len(New().c) {
		v := value(i)
		if got := index(v); got != i {
			t.Fatalf("index(value(%d) = %d) = %d", i, v, got)
		}
		vs = append(vs, v, v-1, v+1)
	}
	vs = append(vs, -5, 0, Max, Max+1, 1<<62)
	rng := rand.New(rand.NewPCG(5, 6))
	for range 100_000 {
		vs = append(vs, rng.Int64N(Max))
		vs = append(vs, rng.Int64N(100_000))
	}
	for _, v := range vs {
		ref.RecordValue(Clamp(v))
	}
	for _, by := range []string{"Record", "Add"} {
		h := New()
		if by == "Record" {
			h.Record(vs)
		} else {
			for _, v := range vs {
				h.Add(v)
			}
		}
		if h.Total() != int64(len(vs)) {
			t.Errorf("%s: total %d, want %d", by, h.Total(), len(vs))
		}
		got, got2 := newHist(), newHist()
		h.Fold(got, got2)
		if !slices.Equal(got.Export().Counts, ref.Export().Counts) || got.TotalCount() != ref.TotalCount() {
			t.Errorf("%s: folded counts differ from hdrhistogram's own (total %d, want %d)", by, got.TotalCount(), ref.TotalCount())
		}
		if !slices.Equal(got2.Export().Counts, ref.Export().Counts) {
			t.Errorf("%s: the second histogram folded into differs", by)
		}
		// Folded counts start again from zero.
		h.Add(1500)
		again := newHist()
		h.Fold(again)
		if again.TotalCount() != 1 || again.Max() != 1500 || h.Total() != 0 {
			t.Errorf("%s: after a fold, the next one holds %d values up to %d (total left %d), want 1 of 1500", by, again.TotalCount(), again.Max(), h.Total())
		}
		empty := newHist()
		h.Fold(empty)
		if empty.TotalCount() != 0 {
			t.Errorf("%s: an empty fold added %d values", by, empty.TotalCount())
		}
	}
}

// BenchmarkAdd: latencies (µs, 0.2 to 60 ms) counted one by one, as a
// decoder does. One op = one value.
func BenchmarkAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	vs := make([]int64, 1024)
	for i := range vs {
		vs[i] = 200 + rng.Int64N(60_000)
	}
	h := New()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h.Add(vs[i%len(vs)])
	}
}

// TestSettle: values Add keeps pending are counted once, whether a
// Settle, a SettleSome, a full buffer (counted at once) or a Fold counts
// them.
func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		settle int  // Settle after this many Adds (0: never)
		some   bool // SettleSome rather than Settle (the fleet's, after each read)
	}{
		{"a few, folded", 10, 0, false},
		{"a few, settled", 10, 5, false},
		{"a buffer's worth", pendMax, pendMax, false},
		{"past a full buffer", 3*pendMax + 7, 0, false},
		{"past a full buffer, settled between", 3*pendMax + 7, pendMax + 1, false},
		{"one a read, some settled", 3*pendMax + 7, 1, true},
		{"sixty a read, some settled", 3*pendMax + 7, 60, true},
		{"a buffer a read, some settled", 3 * pendMax, pendMax, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, ref := New(), newHist()
			for i := range tc.n {
				v := int64(1 + i*37%90_000)
				h.Add(v)
				ref.RecordValue(v)
				if tc.settle > 0 && (i+1)%tc.settle == 0 {
					if !tc.some {
						h.Settle()
					} else if h.SettleSome(); h.np >= pendMax/2 {
						t.Fatalf("%d pending after SettleSome", h.np)
					}
				}
			}
			if h.Total() != int64(tc.n) {
				t.Errorf("total %d, want %d", h.Total(), tc.n)
			}
			got := newHist()
			h.Fold(got)
			if !slices.Equal(got.Export().Counts, ref.Export().Counts) {
				t.Errorf("folded %d values, want %d, count for count", got.TotalCount(), ref.TotalCount())
			}
		})
	}
}
