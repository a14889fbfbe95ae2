package fleet

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// maxBatch caps the frames one client sends in one turn, so a client
	// far behind cannot starve the others of its shard.
	maxBatch = 256
	never    = math.MaxInt64
	// nudgeSlack is how late past its due time a sleeping scheduler may
	// be before a reader wakes it (see shard.sleepUntil).
	nudgeSlack = int64(100 * time.Microsecond)
)

// shard is one scheduler: a goroutine with a min-heap of its clients by
// next due time. It sleeps until the earliest due time, sends what is due
// (coalesced into one non-blocking write per client on TCP, see send.go)
// and measures how late each send was. There is one shard per core, never
// a timer per client, and it never waits on a socket.
type shard struct {
	f    *Fleet
	c    *counters
	rec  *hists
	wake chan struct{}

	mu       sync.Mutex
	incoming []*client

	// sleepUntil is the fleet clock the scheduler sleeps until (never
	// while it runs). A Go timer fires only when the P that holds it
	// schedules, and on a host whose cores are oversubscribed that P's
	// thread can be off the CPU for a whole OS time slice (milliseconds)
	// while the fleet's other threads run readers. Readers therefore
	// check it after every read and wake an overdue scheduler themselves
	// (Fleet.nudge), so it runs on whichever thread of the fleet is on a
	// CPU.
	sleepUntil atomic.Int64

	h clientHeap
	// w and ends are the scheduler goroutine's scratch for one client's
	// turn: the non-blocking writer and the end offsets of its frames.
	w    *rawWriter
	ends []int
}

func newShard(f *Fleet, c *counters, rec *hists) *shard {
	s := &shard{f: f, c: c, rec: rec, wake: make(chan struct{}, 1), w: newRawWriter(), ends: make([]int, 0, maxBatch)}
	s.sleepUntil.Store(never)
	return s
}

// add hands a logged-in client to the shard.
func (s *shard) add(c *client) {
	s.mu.Lock()
	s.incoming = append(s.incoming, c)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *shard) takeIncoming() {
	s.mu.Lock()
	in := s.incoming
	s.incoming = nil
	s.mu.Unlock()
	for _, c := range in {
		c.due = c.start // step 1 is computed on the first turn
		heap.Push(&s.h, c)
	}
}

// run schedules until ctx ends.
func (s *shard) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	buf := make([]byte, 0, 64<<10)
	lags := make([]int64, 0, 1024)
	for {
		s.takeIncoming()
		now := s.f.now()
		for len(s.h) > 0 && s.h[0].due <= now {
			if ctx.Err() != nil {
				return
			}
			c := s.h[0]
			if c.dead.Load() {
				heap.Pop(&s.h)
				continue
			}
			buf, lags = c.send(now, buf, lags)
			if c.dead.Load() || c.due == never {
				heap.Pop(&s.h)
			} else {
				heap.Fix(&s.h, 0)
			}
			if len(lags) >= cap(lags)/2 {
				s.rec.recordLags(lags)
				lags = lags[:0]
			}
			now = s.f.now()
		}
		if len(lags) > 0 {
			s.rec.recordLags(lags)
			lags = lags[:0]
		}
		wait, due := time.Hour, int64(never)
		if len(s.h) > 0 {
			due = s.h[0].due
			wait = time.Duration(due - now)
		}
		s.sleepUntil.Store(due)
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-timer.C:
		}
		s.sleepUntil.Store(never)
	}
}

// poke wakes the scheduler if it still sleeps until due; of several
// pokers only one sends.
func (s *shard) poke(due int64) {
	if s.sleepUntil.CompareAndSwap(due, never) {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// nudge wakes every scheduler sleeping more than nudgeSlack past its due
// time; now is the fleet clock. Readers call it after each read: two
// atomic loads when all is on time.
func (f *Fleet) nudge(now int64) {
	for _, s := range f.shards {
		if d := s.sleepUntil.Load(); now-d > nudgeSlack {
			s.poke(d)
		}
	}
}

// clientHeap orders clients by due time.
type clientHeap []*client

func (h clientHeap) Len() int           { return len(h) }
func (h clientHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h clientHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx, h[j].heapIdx = i, j
}
func (h *clientHeap) Push(x any) {
	c := x.(*client)
	c.heapIdx = len(*h)
	*h = append(*h, c)
}
func (h *clientHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return c
}
