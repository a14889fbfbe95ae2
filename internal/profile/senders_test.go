package profile

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// TestRoomSeqs: seqCases through a room's table.
func TestRoomSeqs(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	for _, tt := range seqCases {
		t.Run(tt.name, func(t *testing.T) {
			tab := &senderTable{}
			// A room-mate that sees other senders first: slots are the
			// room's, not the receiver's.
			other := roomSeqs{t: tab}
			other.see([]byte("c"), stampSeq(base, 1))
			other.see([]byte("b"), stampSeq(base, 1))
			r := &roomSeqs{t: tab}
			if lost := seqCasesLost(r, tt.seqs); lost != tt.want {
				t.Errorf("lost %d, want %d", lost, tt.want)
			}
			if r.see([]byte("x"), -1) != 0 {
				t.Error("a negative trace counted")
			}
		})
	}
}

// refSeqs is the plain map of last sequences that loss tracking must
// count exactly as.
type refSeqs map[string]uint16

func (m refSeqs) see(id string, trace int64) int64 {
	q := uint16(trace % seqMod)
	prev, ok := m[id]
	gap := (int(q) - int(prev) + seqMod) % seqMod
	switch {
	case !ok || gap == 0:
		m[id] = q + 1
		return 0
	case gap < seqAhead:
		m[id] = q + 1
		return int64(gap)
	}
	return -1
}

// TestRoomSeqsAgainstMap: receivers of one room, each seeing the
// senders in an order of its own with gaps, late arrivals and
// duplicates, count exactly what a map per receiver counts; so do they
// past the table's capacity, where later senders are tracked per
// receiver.
func TestRoomSeqsAgainstMap(t *testing.T) {
	for _, tt := range []struct {
		name            string
		senders, rounds int
	}{
		{"300 senders", 300, 200},
		{"past capacity", maxRoomSenders + 40, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			tab := &senderTable{}
			const receivers = 3
			rs := make([]*roomSeqs, receivers)
			refs := make([]refSeqs, receivers)
			for i := range rs {
				rs[i], refs[i] = &roomSeqs{t: tab}, refSeqs{}
			}
			next := make([]uint64, tt.senders)
			var got, want int64
			for round := range tt.rounds {
				for k := range tt.senders {
					s := k
					if rng.IntN(10) == 0 {
						s = rng.IntN(tt.senders)
					}
					next[s] += uint64(1 + rng.IntN(3)/2)
					// Ids short, of 8 to 16 bytes, and longer (kept whole).
					id := fmt.Sprintf("u%d%s", s, strings.Repeat("x", s%24))
					for i := range rs {
						seq := next[s]
						if rng.IntN(50) == 0 && seq > 2 {
							seq -= 2 // late for this receiver
						}
						trace := stampSeq(1e18+int64(round), seq)
						got += rs[i].see([]byte(id), trace)
						want += refs[i].see(id, trace)
					}
				}
			}
			if got != want {
				t.Errorf("lost %d, want %d (a map's count)", got, want)
			}
			// Every receiver saw every sender that sent.
			slots, extra := min(len(refs[0]), maxRoomSenders), max(len(refs[0])-maxRoomSenders, 0)
			past := 0
			if rs[0].more != nil {
				past = len(rs[0].more.ents)
			}
			if int(tab.n) != slots || past != extra {
				t.Errorf("%d senders in the table and %d past it, want %d and %d", tab.n, past, slots, extra)
			}
		})
	}
}

// TestSenderTableLongIDsSameEnds: ids over 16 bytes that share their
// first and last 8 bytes get two slots.
func TestSenderTableLongIDsSameEnds(t *testing.T) {
	tab := &senderTable{}
	a, b := tab.slot([]byte("aaaaaaaa-1-bbbbbbbb")), tab.slot([]byte("aaaaaaaa-2-bbbbbbbb"))
	if a == b || tab.slot([]byte("aaaaaaaa-1-bbbbbbbb")) != a {
		t.Errorf("slots %d, %d: want two, each found again", a, b)
	}
}

// TestSenderTableConcurrent: a room's receivers number its senders at
// the same time, each in an order of its own (run with -race): every
// sender gets one slot, the same for all, and the slots are dense.
func TestSenderTableConcurrent(t *testing.T) {
	const senders, receivers = 500, 6
	tab := &senderTable{}
	slots := make([][]int32, receivers)
	var wg sync.WaitGroup
	for r := range receivers {
		wg.Go(func() {
			order := rand.New(rand.NewPCG(uint64(r), 9)).Perm(senders)
			got := make([]int32, senders)
			for _, s := range order {
				got[s] = tab.slot([]byte(fmt.Sprintf("replay-%d", s)))
			}
			slots[r] = got
		})
	}
	wg.Wait()
	seen := make([]bool, senders)
	for s := range senders {
		v := slots[0][s]
		for r := range receivers {
			if slots[r][s] != v {
				t.Fatalf("sender %d: slot %d for receiver 0, %d for receiver %d", s, v, slots[r][s], r)
			}
		}
		if v < 0 || v >= senders || seen[v] {
			t.Fatalf("sender %d: slot %d, out of 0..%d or taken twice", s, v, senders-1)
		}
		seen[v] = true
	}
}

// TestRoomSeqsNoAlloc: a delivery from a sender already seen allocates
// nothing.
func TestRoomSeqsNoAlloc(t *testing.T) { checkSeeNoAlloc(t, &roomSeqs{t: &senderTable{}}) }

// TestRoomSeqsSize: a receiver's loss tracking stays small while idle
// (an idle receive-only client holds one; issue 22's bound is 8 KiB a
// client): 112 bytes, a room of up to 32 senders' sequences inline, a
// larger room's allocated as senders appear.
func TestRoomSeqsSize(t *testing.T) {
	if n := unsafe.Sizeof(roomSeqs{}); n != 112 {
		t.Errorf("roomSeqs is %d bytes, want 112", n)
	}
}

// TestRoomSeqsInline: a room's first 32 senders are tracked in the
// receiver's own lines, and a 33rd moves them all to the heap with
// nothing lost: every sender's next delivery in order is no gap, and
// one skipped is one lost.
func TestRoomSeqsInline(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	r := &roomSeqs{t: &senderTable{}}
	id := func(i int) []byte { return []byte(fmt.Sprintf("user-%03d", i)) }
	for i := range smallRoom {
		r.see(id(i), stampSeq(base, 1))
	}
	if &r.seqs[0] != &r.small[0] {
		t.Fatalf("%d senders: sequences not inline", smallRoom)
	}
	r.see(id(smallRoom), stampSeq(base, 1))
	if &r.seqs[0] == &r.small[0] || len(r.seqs) <= smallRoom {
		t.Fatalf("%d senders: sequences still inline (len %d)", smallRoom+1, len(r.seqs))
	}
	var lost int64
	for i := range smallRoom + 1 {
		lost += r.see(id(i), stampSeq(base, 2))
	}
	if lost != 0 {
		t.Errorf("in-order deliveries after the move counted %d lost", lost)
	}
	if got := r.see(id(5), stampSeq(base, 4)); got != 1 {
		t.Errorf("a skipped sequence counted %d lost, want 1", got)
	}
}

// BenchmarkRoomSeqs: BenchmarkSeqTrackerRooms's shape through the rooms'
// tables.
func BenchmarkRoomSeqs(b *testing.B) {
	for _, rooms := range []int{8, 16} {
		b.Run(fmt.Sprintf("%dx32", rooms), func(b *testing.B) { benchSeqRooms(b, rooms, false, newRoomSeqs) })
	}
	b.Run("8x32/reordered", func(b *testing.B) { benchSeqRooms(b, 8, true, newRoomSeqs) })
}
