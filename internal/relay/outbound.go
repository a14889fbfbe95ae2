package relay

import (
	"sync"
	"sync/atomic"

	"github.com/reprise-harness/reprise/internal/wire"
)

// chunkSize is the size of the pooled buffers an outbound queue is made of.
// Small enough that a connection with a few frames queued holds little,
// large enough that one chunk carries dozens of typical deliveries.
const chunkSize = 4 << 10

// chunk is one buffer of a queue, from the arena (arena.go).
type chunk struct {
	b    []byte
	slab *slab // nil: a heap chunk (the arena could not map a slab)
	idx  uint16
}

func getChunk() *chunk { return chunks.get() }

func putChunk(c *chunk) { chunks.put(c) }

// outbound is one TCP connection's queue of bytes to write, after the
// outbound struct of nats-server's client.go: frames are copied into pooled
// chunks under a mutex by whichever goroutine produced them, and the
// connection's writer takes all queued chunks at once and writes them with
// one writev. pending counts queued and in-flight bytes, so a peer that does
// not read is capped at max bytes (plus one chunk of slack) and then
// declared a slow consumer instead of blocking anyone.
//
// The pending byte count is queued - released: producers add to queued
// under the mutex with plain arithmetic, the writer adds to released after
// each write without the mutex (it takes the mutex once per write, in take,
// not twice). A locked atomic add per delivery inside appendFrame made its
// unlock the relay's hottest instruction (each locked instruction waits for
// the frame's copy to drain from the store buffer), so only the writer,
// once per write, pays one. A producer may see a release a moment late:
// the cap then errs on the strict side.
//
// The mutex is a leaf: nothing else is locked while it is held.
type outbound struct {
	mu       sync.Mutex
	q        []*chunk
	queued   int64        // bytes ever queued, less dropped ones; under mu
	released atomic.Int64 // bytes written (released by the writer)
	frames   int          // frames queued since the writer last took q; under mu
	delivers int          // deliver frames among them; under mu
	max      int
	// flagged says a flush signal is owed: the producer that set it sends
	// the wake-up after its batch; the writer clears it when it takes q.
	flagged bool
	closing bool
	reason  CloseReason // why closing
	// closed mirrors closing for readers that must not take the mutex (the
	// connection's own reader checks it after every read).
	closed atomic.Bool
	// mem counts the chunks the queue holds against the relay's memory
	// budget, in connection id's shard (budget.go); nil: not counted
	// (tests).
	mem *memBudget
	id  uint64
}

// slowConsumerFrame is the last frame a slow consumer gets: the queue it
// could not drain is dropped, and the frame follows the bytes the writer
// already took, so it starts at a frame boundary. A peer that reads again
// within the write timeout learns why it was cut instead of seeing a bare
// close (the fleet counts disconnects by the relay's error code).
var slowConsumerFrame = wire.AppendError(nil, wire.ErrSlowConsumer, "outbound queue over --max-pending: the client reads slower than its room sends")

// appendFrame queues b. signal says the caller must wake the writer after
// its batch (it was the first to queue since the writer last took the
// queue). ok is false if b would put the queue over max: the queue is then
// dropped and closed with reason slow_consumer, with slowConsumerFrame as
// its only frame, and the caller must wake the writer (to write that
// frame, bounded by the write timeout) and stop reading the peer; or if
// the relay is twice over its memory budget (memBudget.hard) and this
// queue large: then it is dropped and closed with reason memory_budget,
// and the caller must cut the connection short (client.abort). A closing
// queue takes nothing and reports ok.
//
// It unlocks without defer: it runs once per delivery, and the deferred
// unlock was 5 % of the relay's CPU in a profile (self time).
func (o *outbound) appendFrame(b []byte) (signal, ok bool) {
	o.mu.Lock()
	switch {
	case o.closing:
		signal, ok = false, true
	case o.pendingLocked()+int64(len(b)) > int64(o.max):
		o.closeLocked(closeFor(wire.ErrSlowConsumer))
		o.dropLocked()
		o.pushLocked(slowConsumerFrame)
		o.flagged = true
		signal, ok = true, false
	case o.mem != nil && o.newChunkLocked(len(b)) && o.mem.hard.Load() && o.pendingLocked() >= minEvict:
		// Twice over the memory budget and the sweeper not there yet:
		// a queue this large cuts itself (budget.go).
		o.closeLocked(CloseMemoryBudget)
		o.dropLocked()
		o.flagged = true
		signal, ok = true, false
	default:
		o.pushLocked(b)
		if len(b) > wire.LenSize && b[wire.LenSize] == byte(wire.TypeDeliver) {
			o.delivers++
		}
		signal, ok = !o.flagged, true
		o.flagged = true
	}
	o.mu.Unlock()
	return signal, ok
}

// newChunkLocked reports whether queueing n bytes takes a new chunk.
func (o *outbound) newChunkLocked(n int) bool {
	k := len(o.q)
	return k == 0 || cap(o.q[k-1].b)-len(o.q[k-1].b) < n
}

// closeWith queues a last frame (if any, regardless of max) and marks the
// queue closing. It reports false if the queue was closing already.
func (o *outbound) closeWith(last []byte, reason CloseReason) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closing {
		return false
	}
	o.closeLocked(reason)
	o.pushLocked(last)
	o.flagged = true
	return true
}

func (o *outbound) closeLocked(reason CloseReason) {
	o.closing = true
	o.reason = reason
	o.closed.Store(true)
}

func (o *outbound) pushLocked(b []byte) {
	o.queued += int64(len(b))
	o.frames++
	for len(b) > 0 {
		var c *chunk
		if n := len(o.q); n > 0 && len(o.q[n-1].b) < cap(o.q[n-1].b) {
			c = o.q[n-1]
		} else {
			c = getChunk()
			o.q = append(o.q, c)
			o.chunks(1)
		}
		k := copy(c.b[len(c.b):cap(c.b)], b)
		c.b = c.b[:len(c.b)+k]
		b = b[k:]
	}
}

func (o *outbound) dropLocked() {
	o.chunks(-len(o.q))
	for i, c := range o.q {
		o.queued -= int64(len(c.b))
		putChunk(c)
		o.q[i] = nil
	}
	o.q = o.q[:0]
	o.frames, o.delivers = 0, 0
}

// chunks counts n chunks taken from the pool (negative: given back)
// against the memory budget.
func (o *outbound) chunks(n int) {
	if o.mem != nil && n != 0 {
		o.mem.charge(o.id, int64(n)*chunkSize)
	}
}

// take hands the writer every queued chunk, swapping in spare as the new
// (empty) queue, and says how many deliver frames they hold and whether
// the queue is closing.
func (o *outbound) take(spare []*chunk) (q []*chunk, delivers int, closing bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	q, o.q = o.q, spare[:0]
	delivers = o.delivers
	o.flagged = false
	o.frames, o.delivers = 0, 0
	return q, delivers, o.closing
}

// written releases n in-flight bytes after a write, without the mutex.
func (o *outbound) written(n int) { o.released.Add(int64(n)) }

func (o *outbound) pendingLocked() int64 { return o.queued - o.released.Load() }

// backlog is the pending byte count and the frames queued since the
// writer last took the queue.
func (o *outbound) backlog() (pending int64, frames int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.pendingLocked(), o.frames
}

// fail closes the queue (if it was not) with reason and drops what is
// queued; first says whether this call closed it (reason is then the
// queue's reason), so a cause is counted once.
func (o *outbound) fail(reason CloseReason) (first bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	first = !o.closing
	if first {
		o.closeLocked(reason)
	}
	o.dropLocked()
	return first
}

// state reports whether the queue is closing and why.
func (o *outbound) state() (closing bool, reason CloseReason) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closing, o.reason
}

// isClosing reports whether the queue is closing, without the mutex.
func (o *outbound) isClosing() bool { return o.closed.Load() }

// Pending is the queued and in-flight byte count.
func (o *outbound) Pending() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return int(o.pendingLocked())
}
