package fleet

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"testing"
)

// TestNudge: a reader wakes a scheduler only once it sleeps more than
// nudgeSlack past its due time, and of several readers only the first
// sends the wake-up.
func TestNudge(t *testing.T) {
	const due = int64(1_000_000)
	tests := []struct {
		name      string
		sleeping  int64 // sleepUntil
		now       int64
		wantWake  bool
		wantUntil int64
	}{
		{"running scheduler", never, due, false, never},
		{"not due yet", due, due - 1, false, due},
		{"due within the slack", due, due + nudgeSlack, false, due},
		{"overdue", due, due + nudgeSlack + 1, true, never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Fleet{}
			s := newScheduler(f, &counters{}, newHists())
			f.scheds = []*scheduler{s}
			s.sleepUntil.Store(tt.sleeping)
			f.nudge(tt.now)
			f.nudge(tt.now) // a second reader
			woke := len(s.wake) == 1
			if woke != tt.wantWake || s.sleepUntil.Load() != tt.wantUntil {
				t.Errorf("woke %v sleepUntil %d, want %v and %d", woke, s.sleepUntil.Load(), tt.wantWake, tt.wantUntil)
			}
		})
	}
}

// refHeap is container/heap over clients by due time, what the shard used
// before dueHeap: the reference it is checked and benchmarked against.
type refHeap []*client

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h refHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *refHeap) Push(x any)        { *h = append(*h, x.(*client)) }
func (h *refHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// TestDueHeap: pushes, turns of the first client (its due time moved on,
// sometimes to the same time or earlier) and removals give the same due
// times, in the same order, as container/heap.
func TestDueHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	var h dueHeap
	var ref refHeap
	for step := range 20_000 {
		switch op := rng.IntN(10); {
		case op < 3 || len(h) == 0:
			due := rng.Int64N(1000)
			h.push(&client{due: due})
			heap.Push(&ref, &client{due: due})
		case op < 9:
			d := rng.Int64N(300) - 20
			h[0].c.due += d
			h.fixFirst()
			ref[0].due += d
			heap.Fix(&ref, 0)
		default:
			h.pop()
			heap.Pop(&ref)
		}
		if len(h) != len(ref) || (len(h) > 0 && h[0].due != ref[0].due) {
			t.Fatalf("step %d: %d clients, first due %d; container/heap %d, %d", step, len(h), h[0].due, len(ref), ref[0].due)
		}
	}
	for prev := int64(math.MinInt64); len(h) > 0; h.pop() {
		if h[0].due < prev || h[0].due != h[0].c.due {
			t.Fatalf("due %d (client's %d) after %d", h[0].due, h[0].c.due, prev)
		}
		prev = h[0].due
	}
}

// BenchmarkDueHeap: a shard's turn order for 256 clients sending every
// 14 ms (72 Hz) with jitter: one op = one turn (the first client's due
// time moves on). BenchmarkContainerHeap is the same with container/heap.
func BenchmarkDueHeap(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 12))
	var h dueHeap
	for range 256 {
		h.push(&client{due: rng.Int64N(14_000_000)})
	}
	cpu := processCPU()
	for b.Loop() {
		h[0].c.due += 13_000_000 + rng.Int64N(2_000_000)
		h.fixFirst()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}

func BenchmarkContainerHeap(b *testing.B) {
	rng := rand.New(rand.NewPCG(11, 12))
	var h refHeap
	for range 256 {
		heap.Push(&h, &client{due: rng.Int64N(14_000_000)})
	}
	cpu := processCPU()
	for b.Loop() {
		h[0].due += 13_000_000 + rng.Int64N(2_000_000)
		heap.Fix(&h, 0)
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
}
