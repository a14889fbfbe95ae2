package profile

import (
	"testing"
	"time"
)

func TestStampSeq(t *testing.T) {
	for _, tt := range []struct {
		now  int64
		seq  uint64
		want int64
	}{
		{1_700_000_000_123_456_789, 1, 1_700_000_000_123_456_001},
		{1_700_000_000_123_456_789, 999, 1_700_000_000_123_456_999},
		{1_700_000_000_123_456_789, 1000, 1_700_000_000_123_456_000},
		{1_700_000_000_123_456_000, 1234, 1_700_000_000_123_456_234},
	} {
		got := stampSeq(tt.now, tt.seq)
		if got != tt.want {
			t.Errorf("stampSeq(%d, %d) = %d, want %d", tt.now, tt.seq, got, tt.want)
		}
		if got/1000 != tt.now/1000 {
			t.Errorf("stampSeq(%d, %d) moved the stamp's microsecond", tt.now, tt.seq)
		}
	}
}

// TestSeqTracker feeds one receiver sequences from two senders and checks
// the lost count: gaps count, late arrivals count back, wrap-around at
// seqMod is seamless.
func TestSeqTracker(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, tt := range []struct {
		name string
		seqs []uint64 // from sender "a"
		want int64
	}{
		{"in order", []uint64{1, 2, 3, 4, 5}, 0},
		{"one gap", []uint64{1, 2, 5, 6}, 2},
		{"first seen late start", []uint64{40, 41, 42}, 0},
		{"late arrival", []uint64{1, 3, 2, 4}, 0},
		{"wrap", []uint64{998, 999, 1000, 1001, 1003}, 1},
		{"duplicate is not a gap", []uint64{1, 2, 2, 3}, -1},
		{"long burst lost", []uint64{1, 300}, 298},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var tr seqTracker
			var lost int64
			for i, s := range tt.seqs {
				lost += tr.see([]byte("a"), stampSeq(base+int64(i)*1e6, s))
				// Another sender in order in between changes nothing.
				lost += tr.see([]byte("b"), stampSeq(base, uint64(i+1)))
			}
			if lost != tt.want {
				t.Errorf("lost %d, want %d", lost, tt.want)
			}
		})
	}
}

// TestSeqTrackerNoAlloc: a delivery from a sender already seen allocates
// nothing (the receive path's hot loop; a string key per delivery was a
// third of the fleet's CPU at N:N).
func TestSeqTrackerNoAlloc(t *testing.T) {
	var tr seqTracker
	sender := []byte("user-0017")
	tr.see(sender, stampSeq(1e18, 1))
	seq := uint64(1)
	allocs := testing.AllocsPerRun(1000, func() {
		seq++
		tr.see(sender, stampSeq(1e18, seq))
	})
	if allocs != 0 {
		t.Errorf("%v allocations per delivery, want 0", allocs)
	}
}
