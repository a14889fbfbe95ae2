package profile

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
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

// seqCases are one receiver's deliveries from sender "a" (another sender
// in order in between) and the lost count they make: gaps count, late
// arrivals count back, wrap-around at seqMod is seamless.
var seqCases = []struct {
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
	{"zero sequence first", []uint64{1000, 1001, 1002}, 0},
}

// seqCasesLost feeds s one case's deliveries and returns the lost count.
func seqCasesLost(s seer, seqs []uint64) int64 {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	var lost int64
	for i, q := range seqs {
		lost += s.see([]byte("a"), stampSeq(base+int64(i)*1e6, q))
		// Another sender in order in between changes nothing.
		lost += s.see([]byte("b"), stampSeq(base, uint64(i+1)))
	}
	return lost
}

// TestSeqTracker: seqCases through one receiver's own tracker.
func TestSeqTracker(t *testing.T) {
	for _, tt := range seqCases {
		t.Run(tt.name, func(t *testing.T) {
			if lost := seqCasesLost(&seqTracker{}, tt.seqs); lost != tt.want {
				t.Errorf("lost %d, want %d", lost, tt.want)
			}
		})
	}
}

// TestSeqTrackerNoAlloc: a delivery from a sender already seen allocates
// nothing (the receive path's hot loop; a string key per delivery was a
// third of the fleet's CPU at N:N).
func TestSeqTrackerNoAlloc(t *testing.T) { checkSeeNoAlloc(t, &seqTracker{}) }

// checkSeeNoAlloc fails t when a delivery to s from a sender s has seen
// allocates.
func checkSeeNoAlloc(t *testing.T, s seer) {
	t.Helper()
	sender := []byte("user-0017")
	s.see(sender, stampSeq(1e18, 1))
	seq := uint64(1)
	allocs := testing.AllocsPerRun(1000, func() {
		seq++
		s.see(sender, stampSeq(1e18, seq))
	})
	if allocs != 0 {
		t.Errorf("%v allocations per delivery, want 0", allocs)
	}
}

// BenchmarkSeqTracker: one receiver of a 32-member room, deliveries from
// the 31 others in turn, each in its sender's order.
func BenchmarkSeqTracker(b *testing.B) {
	var senders [][]byte
	for i := range 31 {
		senders = append(senders, []byte(fmt.Sprintf("replay-%d", 100+i)))
	}
	var tr seqTracker
	var lost int64
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		lost += tr.see(senders[i%31], stampSeq(1e18, uint64(i/31+1)))
	}
	if lost != 0 {
		b.Fatalf("lost %d, want 0", lost)
	}
}

// TestSeqTrackerAgainstMap: many senders (the table grows), in an order
// that mostly repeats and sometimes does not (the guess misses), with
// gaps, late arrivals and duplicates: the tracker counts exactly what a
// plain map of last sequences counts.
func TestSeqTrackerAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const senders = 300
	next := make([]uint64, senders)
	ref := refSeqs{}
	var tr seqTracker
	var got, want int64
	for round := range 400 {
		for k := range senders {
			s := k
			if rng.IntN(10) == 0 {
				s = rng.IntN(senders) // out of the usual order
			}
			next[s] += uint64(1 + rng.IntN(3)/2) // a gap now and then
			seq := next[s]
			if rng.IntN(50) == 0 && seq > 2 {
				seq -= 2 // late
			}
			// Ids short, of 8 to 16 bytes, and longer (kept whole).
			id := fmt.Sprintf("u%d%s", s, strings.Repeat("x", s%24))
			trace := stampSeq(1e18+int64(round), seq)
			got += tr.see([]byte(id), trace)
			want += ref.see(id, trace)
		}
	}
	if got != want {
		t.Errorf("lost %d, want %d (a map's count)", got, want)
	}
	if len(tr.ents) != senders {
		t.Errorf("%d senders tracked, want %d", len(tr.ents), senders)
	}
}

// TestSeqTrackerLongIDsSameEnds: ids over 16 bytes that share their
// first and last 8 bytes are two senders, not one.
func TestSeqTrackerLongIDsSameEnds(t *testing.T) {
	a, b := []byte("aaaaaaaa-1-bbbbbbbb"), []byte("aaaaaaaa-2-bbbbbbbb")
	var tr seqTracker
	var lost int64
	for i := range uint64(10) {
		lost += tr.see(a, stampSeq(1e18, i+1))
		lost += tr.see(b, stampSeq(1e18, 100+i))
	}
	if lost != 0 || len(tr.ents) != 2 {
		t.Errorf("lost %d with %d senders tracked, want 0 and 2", lost, len(tr.ents))
	}
}

// BenchmarkSeqTrackerRooms: the fleet's shape at N:N, rooms×32 receivers
// each with its own tracker, served in a shuffled order one read (about
// 15 deliveries) at a time, as the readers of a busy fleet are: between
// two reads of one receiver the others' tables pass through the cache, so
// this measures a lookup whose table is not in L1, unlike
// BenchmarkSeqTracker. Each receiver gets its 31 room-mates' casts in the
// same order every round but for one swapped pair in ten rounds.
// The "/reordered" variants swap 4 adjacent pairs every round (about a
// quarter of the guesses miss, as under load).
func BenchmarkSeqTrackerRooms(b *testing.B) {
	for _, rooms := range []int{8, 16} {
		b.Run(fmt.Sprintf("%dx32", rooms), func(b *testing.B) { benchSeqRooms(b, rooms, false, newSeqTracker) })
	}
	b.Run("8x32/reordered", func(b *testing.B) { benchSeqRooms(b, 8, true, newSeqTracker) })
}

// seer is a receiver's loss tracking: seqTracker or roomSeqs.
type seer interface {
	see(sender []byte, trace int64) int64
}

// newSeqTracker is a receiver's own seqTracker (its room's table unused).
func newSeqTracker(*senderTable) seer { return &seqTracker{} }

// newRoomSeqs tracks by the room's table.
func newRoomSeqs(t *senderTable) seer { return &roomSeqs{t: t} }

func benchSeqRooms(b *testing.B, rooms int, reorder bool, newSeer func(*senderTable) seer) {
	const members, perRead = 32, 15
	n := rooms * members
	ids := make([][]byte, n)
	for i := range ids {
		ids[i] = []byte(fmt.Sprintf("replay-%d", 100+i))
	}
	type receiver struct {
		tr    seer
		order []int // the senders' indices in delivery order
		pos   int   // next in order
		seq   []uint64
	}
	tables := make([]*senderTable, rooms)
	for i := range tables {
		tables[i] = &senderTable{}
	}
	rcv := make([]*receiver, n)
	for i := range rcv {
		room := i / members
		r := &receiver{seq: make([]uint64, n), tr: newSeer(tables[room])}
		for m := range members {
			if s := room*members + m; s != i {
				r.order = append(r.order, s)
			}
		}
		rcv[i] = r
	}
	rng := rand.New(rand.NewPCG(3, 4))
	turn := make([]int, n)
	for i := range turn {
		turn[i] = i
	}
	var lost int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for done := 0; done < b.N; {
		rng.Shuffle(n, func(i, j int) { turn[i], turn[j] = turn[j], turn[i] })
		for _, i := range turn {
			r := rcv[i]
			for k := 0; k < perRead && done < b.N; k++ {
				if r.pos == len(r.order) {
					r.pos = 0
					for k := range 4 {
						if k > 0 && !reorder || !reorder && rng.IntN(10) != 0 {
							break
						}
						a := rng.IntN(len(r.order) - 1)
						r.order[a], r.order[a+1] = r.order[a+1], r.order[a]
					}
				}
				s := r.order[r.pos]
				r.pos++
				r.seq[s]++
				lost += r.tr.see(ids[s], stampSeq(1e18, r.seq[s]))
				done++
			}
		}
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	if lost != 0 {
		b.Fatalf("lost %d, want 0", lost)
	}
}

// processCPU is the process's CPU time so far (user and system, ns): on
// a shared host a benchmark's CPU per op is steadier than its wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestSeqEntSize: a tracker entry stays 24 bytes (two or three to a cache
// line, walked in delivery order): the lookup's cost is the memory it
// touches.
func TestSeqEntSize(t *testing.T) {
	if n := unsafe.Sizeof(seqEnt{}); n != 24 {
		t.Errorf("seqEnt is %d bytes, want 24", n)
	}
}
