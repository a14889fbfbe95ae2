package relay

import (
	"slices"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// The memory budget: one bound on everything the relay queues, the TCP
// connections' outbound chunks and the partial frames together
// (Config.QueueBudget), and a share of it per source address
// (Config.QueueBudgetPerSource), so that members that never read cannot
// take the relay's memory, nor one address everyone's share. --max-pending
// bounds one connection; only this bounds the sum.
//
// Outbound memory is counted by chunk, when a queue takes a chunk from the
// pool and when the chunk goes back (one atomic add per 4 KiB chunk, not per
// delivery: see outbound). A count that passes the budget or a source's
// share asks the sweeper to cut (evictMemory): the connections holding the
// most bytes first, the slowest consumers, until the rest fit 3/4 of it, as
// memory_budget. Everyone else keeps being served.
type memBudget struct {
	used      atomic.Int64 // bytes in outbound chunks taken from the pool, all connections
	limit     int64        // Config.QueueBudget, with partial frames; 0: none
	perSource int64        // Config.QueueBudgetPerSource; 0: none
	evict     chan struct{}
}

// charge adds n bytes (negative: gives them back) to the relay's and src's
// counts; past either bound it asks the sweeper to evict.
func (m *memBudget) charge(src *source, n int64) {
	total := m.used.Add(n)
	over := m.limit > 0 && total > m.limit
	if src != nil {
		if s := src.mem.Add(n); m.perSource > 0 && s > m.perSource {
			over = true
		}
	}
	if over && n > 0 {
		m.wake()
	}
}

// wake asks the sweeper to run evictMemory, without waiting.
func (m *memBudget) wake() {
	select {
	case m.evict <- struct{}{}:
	default:
	}
}

// minEvict: a connection holding less is no slow consumer, whatever the
// count says (a few chunks' worth of a connection that reads). evictIdle:
// after a round that cut nobody, the next waits this long.
const (
	minEvict  = 4 * chunkSize
	evictIdle = int64(10 * time.Millisecond)
)

// evictMemory closes the connections holding the most queued bytes and
// partial frames until the relay's count fits 3/4 of the budget and every
// source's fits 3/4 of its share, and returns how many it closed.
// Connections already closing are not counted: their memory goes when
// their writer returns.
func (s *Server) evictMemory() int64 {
	type held struct {
		c *client
		n int64
	}
	var list []held
	var total int64
	bySrc := make(map[*source]int64)
	s.eachClient(func(c *client) {
		if c.out.isClosing() {
			return
		}
		n := int64(c.out.Pending()) + c.partialHeld.Load()
		total += n
		bySrc[c.out.src] += n
		if n >= minEvict {
			list = append(list, held{c, n})
		}
	})
	slices.SortFunc(list, func(a, b held) int { return int(b.n - a.n) })
	budget := &s.mem
	overAll := budget.limit > 0 && total > budget.limit
	target, srcTarget := budget.limit*3/4, budget.perSource*3/4
	var cut, freed int64
	for _, h := range list {
		srcOver := budget.perSource > 0 && h.c.out.src != nil && bySrc[h.c.out.src] > budget.perSource
		if !(overAll && total > target) && !srcOver {
			continue
		}
		if h.c.evict() {
			cut++
			freed += h.n
		}
		total -= h.n
		if bySrc[h.c.out.src] -= h.n; srcOver && bySrc[h.c.out.src] <= srcTarget {
			delete(bySrc, h.c.out.src) // fits again: no more cuts from it this round
		}
	}
	if cut > 0 {
		s.log.Info("over the memory budget: cut the slowest consumers", zap.Int64("connections", cut),
			zap.Int64("bytes_held", freed), zap.Int64("queue_budget", budget.limit), zap.Int64("per_source", budget.perSource))
	}
	return cut
}

// evict closes c for the memory budget: its queue is dropped at once, the
// write in flight (if blocked) and the reader's wait are cut short, and it
// ends as memory_budget. It gets no error frame: it was not reading.
func (c *client) evict() bool {
	if !c.out.fail(CloseMemoryBudget) {
		return false
	}
	now := time.Now()
	c.tcp.SetWriteDeadline(now)
	c.tcp.SetReadDeadline(now)
	c.signal()
	c.s.log.Debug("memory budget: cut", zap.Uint64("conn", c.id), zap.String("user", c.user))
	return true
}
