package fleet

import (
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
)

// TestHdrCountsLayout: hdrCounts has newHist's layout: the same number of
// counts, and values recorded through it and folded give a histogram
// equal, count for count, to one that recorded them itself, at every
// bucket's edges, out of range (clamped as before) and at random.
func TestHdrCountsLayout(t *testing.T) {
	ref := newHist()
	if got, want := len(newHdrCounts().c), len(ref.Export().Counts); got != want {
		t.Fatalf("%d counts, hdrhistogram has %d", got, want)
	}
	var vs []int64
	for i := range len(newHdrCounts().c) {
		v := hdrValue(i)
		if got := hdrIndex(v); got != i {
			t.Fatalf("hdrIndex(hdrValue(%d) = %d) = %d", i, v, got)
		}
		vs = append(vs, v, v-1, v+1)
	}
	vs = append(vs, -5, 0, histMax, histMax+1, 1<<62)
	rng := rand.New(rand.NewPCG(5, 6))
	for range 100_000 {
		vs = append(vs, rng.Int64N(histMax))
		vs = append(vs, rng.Int64N(100_000))
	}
	h := newHdrCounts()
	h.record(vs)
	got, got2 := newHist(), newHist()
	h.fold(got, got2)
	for _, v := range vs {
		ref.RecordValue(clampHist(v))
	}
	if !slices.Equal(got.Export().Counts, ref.Export().Counts) || got.TotalCount() != ref.TotalCount() {
		t.Errorf("folded counts differ from hdrhistogram's own (total %d, want %d)", got.TotalCount(), ref.TotalCount())
	}
	if !slices.Equal(got2.Export().Counts, ref.Export().Counts) {
		t.Error("the second histogram folded into differs")
	}
	// Folded counts start again from zero.
	h.record([]int64{1500})
	again := newHist()
	h.fold(again)
	if again.TotalCount() != 1 || again.Max() != 1500 {
		t.Errorf("after a fold, the next one holds %d values up to %d, want 1 of 1500", again.TotalCount(), again.Max())
	}
}

// BenchmarkRecordLatencies: one read's 15 latencies (µs, 0.2 to 60 ms)
// into a recorder. One op = one value.
func BenchmarkRecordLatencies(b *testing.B) {
	rng := rand.New(rand.NewPCG(7, 8))
	reads := make([][]int64, 1024)
	for i := range reads {
		for range 15 {
			reads[i] = append(reads[i], 200+rng.Int64N(60_000))
		}
	}
	h := newHists()
	b.ReportAllocs()
	cpu := processCPU()
	for i := 0; b.Loop(); i++ {
		h.recordLatencies(reads[i%len(reads)])
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N*15), "cpu-ns/value")
}

// processCPU is the process's CPU time so far (user and system, ns): on
// a shared host a benchmark's CPU per op is steadier than its wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
