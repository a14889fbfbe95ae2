package relay

import (
	"net/netip"
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
// delivery, on a counter shard of the connection's: see outbound). A shard
// past its share of the budget asks the sweeper to count and cut
// (evictMemory): the connections holding the
// most bytes first, the slowest consumers, until the rest fit 3/4 of it, as
// memory_budget. Everyone else keeps being served.
type memBudget struct {
	// used is the bytes in outbound chunks taken from the pool, in shards
	// by connection, each on its own cache line: one locked add on a line
	// every core wrote was a cost per chunk and per write the relay's
	// readers and writers all paid.
	used      [memShards]paddedInt64
	limit     int64 // Config.QueueBudget, with partial frames; 0: none
	perSource int64 // Config.QueueBudgetPerSource; 0: none
	// wakeAt is a shard's count past which a charge wakes the sweeper:
	// its share of the lower of the two bounds (a source can pass its
	// share only when the relay's count passes it too).
	wakeAt int64
	evict  chan struct{}
	// hard says the count passed twice the budget (the sweeper, which
	// cuts, ran late: a loaded host): a queue that takes a new chunk then
	// and holds minEvict or more cuts itself (outbound.appendFrame).
	hard atomic.Bool
}

const memShards = 16

type paddedInt64 struct {
	atomic.Int64
	_ [56]byte
}

// init sets the budget's bounds (0: none).
func (m *memBudget) init(limit, perSource int64) {
	m.limit, m.perSource, m.evict = limit, perSource, make(chan struct{}, 1)
	if low := min(limit, perSource); low > 0 {
		m.wakeAt = low / memShards
	} else {
		m.wakeAt = max(limit, perSource) / memShards
	}
}

// charge adds n bytes (negative: gives them back) to connection id's
// shard; past its share of the budget it asks the sweeper to look
// (evictMemory counts exactly).
func (m *memBudget) charge(id uint64, n int64) {
	if v := m.used[id%memShards].Add(n); n > 0 && m.wakeAt > 0 && v > m.wakeAt {
		m.wake()
		if m.limit > 0 && m.total() > 2*m.limit {
			m.hard.Store(true)
		}
	}
}

// total is the bytes in outbound chunks, all connections.
func (m *memBudget) total() int64 {
	var t int64
	for i := range m.used {
		t += m.used[i].Load()
	}
	return t
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
	bySrc := make(map[netip.Addr]int64)
	s.eachClient(func(c *client) {
		if c.out.isClosing() {
			return
		}
		n := int64(c.out.Pending()) + c.partialHeld.Load()
		total += n
		bySrc[c.src] += n
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
		srcOver := budget.perSource > 0 && bySrc[h.c.src] > budget.perSource
		if !(overAll && total > target) && !srcOver {
			continue
		}
		if h.c.evict() {
			cut++
			freed += h.n
		}
		total -= h.n
		if bySrc[h.c.src] -= h.n; srcOver && bySrc[h.c.src] <= srcTarget {
			delete(bySrc, h.c.src) // fits again: no more cuts from it this round
		}
	}
	budget.hard.Store(budget.limit > 0 && budget.total() > 2*budget.limit)
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
	c.abort()
	return true
}

// abort cuts short c's write in flight and its reader's wait, for the
// memory budget.
func (c *client) abort() {
	c.tc.aborted.Store(true)
	c.signal()
	c.s.log.Debug("memory budget: cut", zap.Uint64("conn", c.id), zap.String("user", c.user))
}
