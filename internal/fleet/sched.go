package fleet

import (
	"container/heap"
	"context"
	"math"
	"sync"
	"time"
)

const (
	// maxBatch caps the frames one client sends in one turn, so a client
	// far behind cannot starve the others of its shard.
	maxBatch = 256
	never    = math.MaxInt64
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

	h clientHeap
	// w and ends are the scheduler goroutine's scratch for one client's
	// turn: the non-blocking writer and the end offsets of its frames.
	w    *rawWriter
	ends []int
}

func newShard(f *Fleet, c *counters, rec *hists) *shard {
	return &shard{f: f, c: c, rec: rec, wake: make(chan struct{}, 1), w: newRawWriter(), ends: make([]int, 0, maxBatch)}
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
		wait := time.Hour
		if len(s.h) > 0 {
			wait = time.Duration(s.h[0].due - now)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-timer.C:
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
