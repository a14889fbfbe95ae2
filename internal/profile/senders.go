package profile

import (
	"sync"
	"sync/atomic"
)

// Loss tracking by room (issue 34). A receiver's last sequence per sender
// is two bytes in an array of its own, indexed by the sender's slot in a
// table its room shares: the room's senders numbered in the order any of
// its receivers first saw them.
//
// What a lookup costs on a busy fleet is memory, not instructions: between
// two reads of one receiver, hundreds of others' reads pass through the
// caches, so whatever is the receiver's own is cold at each read. Keyed by
// sender per receiver (seqTracker: 24 bytes a sender, a guess chain and a
// hash index), a read of 30 deliveries touched a dozen cold lines and
// half of the guesses missed under real timing (perf annotate: each miss
// a load of the index and of an entry). Here the keys and the index are
// the room's, read by all its receivers and so warm, and a receiver's own
// state for a 32-member room is one line of sequences.
//
// The table only grows (up to maxRoomSenders; later senders are tracked
// per receiver, as before) and is read without a lock: a slot's entry is
// written before the index position that names it is published (an
// atomic store), and a grown table is a new one, published whole.

// maxRoomSenders bounds the senders a room's table numbers; a receiver
// tracks further senders in a seqTracker of its own.
const maxRoomSenders = 1 << 12

// senderTable numbers one room's senders.
type senderTable struct {
	mu  sync.Mutex // inserts
	cur atomic.Pointer[senderIndex]
	n   int32 // slots taken (under mu)
}

// senderIndex is one published generation of a senderTable: an open
// addressing index over the entries, at most a quarter full (see
// roomSeqs). Entries below
// the table's count are never written again.
type senderIndex struct {
	pos  []atomic.Int32 // slot+1 at the key's hash position, 0 empty; a power of two
	ents []senderEnt    // by slot; len(pos)/4 of them
}

// senderEnt is one sender's key (an id over 16 bytes also whole, since
// keys of longer ids may collide).
type senderEnt struct {
	key  idKey
	long string
}

// senderIndexMin is a table's first index size (32 senders).
const senderIndexMin = 128

func newSenderIndex(size int) *senderIndex {
	return &senderIndex{pos: make([]atomic.Int32, size), ents: make([]senderEnt, size/4)}
}

// find returns sender's slot in x, -1 when absent.
func (x *senderIndex) find(k idKey, h uint64, sender []byte) int32 {
	mask := uint64(len(x.pos) - 1)
	for j := h >> 32 & mask; ; j = (j + 1) & mask {
		s := x.pos[j].Load() - 1
		if s < 0 {
			return -1
		}
		if e := &x.ents[s]; e.key == k && (k.n <= 16 || e.long == string(sender)) {
			return s
		}
	}
}

// slot returns sender's slot, numbering it when new; -1 when the table is
// full.
func (t *senderTable) slot(sender []byte) int32 {
	k := keyOf(sender)
	h := k.hash()
	if x := t.cur.Load(); x != nil {
		if s := x.find(k, h, sender); s >= 0 {
			return s
		}
	}
	return t.insert(k, h, sender)
}

// insert numbers a sender not found, unless another receiver did
// meanwhile.
func (t *senderTable) insert(k idKey, h uint64, sender []byte) int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	x := t.cur.Load()
	if x != nil {
		if s := x.find(k, h, sender); s >= 0 {
			return s
		}
	}
	if t.n >= maxRoomSenders {
		return -1
	}
	if x == nil || int(t.n) >= len(x.ents) {
		x = t.grow(x)
	}
	s := t.n
	x.ents[s] = senderEnt{key: k}
	if k.n > 16 {
		x.ents[s].long = string(sender)
	}
	t.n++
	mask := uint64(len(x.pos) - 1)
	j := h >> 32 & mask
	for x.pos[j].Load() != 0 {
		j = (j + 1) & mask
	}
	x.pos[j].Store(s + 1) // publishes the entry
	return s
}

// grow publishes an index of twice the size holding x's entries (the
// first: senderIndexMin). Under mu.
func (t *senderTable) grow(x *senderIndex) *senderIndex {
	size := senderIndexMin
	if x != nil {
		size = 2 * len(x.pos)
	}
	y := newSenderIndex(size)
	mask := uint64(len(y.pos) - 1)
	for s := range t.n {
		e := x.ents[s]
		y.ents[s] = e
		j := e.key.hash() >> 32 & mask
		for y.pos[j].Load() != 0 {
			j = (j + 1) & mask
		}
		y.pos[j].Store(s + 1)
	}
	t.cur.Store(y)
	return y
}

// roomSeqs is one receiver's loss tracking: its last sequence from each
// of its room's senders (owned by the receiver), by the sender's slot in
// the room's table. A delivery costs one hash of its sender's key and
// one probe of the room's index, kept at most a quarter full so that the
// first probe is the sender's almost always, whatever order the relay
// delivers the room's casts in. (A guess of the sender that followed the
// last one, as seqTracker makes, is a little cheaper when it holds, but
// under load the relay's order of a room's senders changes from round to
// round, and each miss cost a second lookup: issue 34, 383 instructions
// a delivery against 281 with the order kept.)
type roomSeqs struct {
	t    *senderTable
	x    *senderIndex // the table as last loaded: its slots stay valid
	seqs []uint16     // by slot: seq+1 of the last delivery in order, 0 none yet
	more *seqTracker  // senders past the room table's capacity; nil until one is
	// small holds seqs while the room has at most smallRoom senders:
	// inline, so that they share the receiver's lines rather than being
	// an array of their own, one more cold line at each read (issue
	// 34). A larger room's grow seqs on the heap. (A roomSeqs is never
	// copied once seqs points here.)
	small [smallRoom]uint16
}

// smallRoom is how many senders' sequences a roomSeqs holds inline.
const smallRoom = 32

// see accounts one numbered delivery from sender; it returns the change
// in lost messages (a gap: positive; a late arrival: -1), as
// seqTracker.see does. The usual delivery (its sender's slot the first
// probed) takes one call and a few dozen instructions.
func (r *roomSeqs) see(sender []byte, trace int64) int64 {
	if trace < 0 {
		return 0
	}
	seq := uint16(uint64(trace) % seqMod)
	k := keyOf(sender)
	if x := r.x; x != nil {
		s := x.pos[k.hash()>>32&uint64(len(x.pos)-1)].Load() - 1
		if uint(s) < uint(len(x.ents)) && uint(s) < uint(len(r.seqs)) {
			if e := &x.ents[s]; e.key == k && (k.n <= 16 || e.long == string(sender)) {
				return seqStep(&r.seqs[s], seq)
			}
		}
	}
	return r.seeSlow(sender, k, seq)
}

// seeSlow is see past the first probe: the sender's slot from the room's
// index (numbered when new).
func (r *roomSeqs) seeSlow(sender []byte, k idKey, seq uint16) int64 {
	h := k.hash()
	s := int32(-1)
	if r.x != nil {
		s = r.x.find(k, h, sender)
	}
	if s < 0 {
		s = r.t.insert(k, h, sender)
		r.x = r.t.cur.Load()
	}
	if s < 0 {
		if r.more == nil {
			r.more = &seqTracker{}
		}
		return r.more.see(sender, int64(seq))
	}
	switch {
	case int(s) < len(r.seqs):
	case r.seqs == nil && int(s) < len(r.small):
		r.seqs = r.small[:]
	default: // a sender new to this receiver (another may have numbered it)
		r.seqs = append(r.seqs, make([]uint16, int(s)+1-len(r.seqs)+len(r.seqs)/2)...)
	}
	return seqStep(&r.seqs[s], seq)
}

// seqStep moves a sender's last sequence (seq+1; 0 none yet) on to seq
// and returns the change in lost messages.
func seqStep(last *uint16, seq uint16) int64 {
	l := *last
	*last = seq + 1
	if l == 0 {
		return 0
	}
	gap := int(seq) - int(l) // l is the last seq+1: 0 means in order
	if gap < 0 {
		gap += seqMod
	}
	switch {
	case gap == 0:
		return 0
	case gap < seqAhead:
		return int64(gap)
	}
	*last = l // behind the last one seen: late (or a duplicate)
	return -1
}

// senderTables holds a player's rooms' tables, by room.
type senderTables struct {
	mu sync.Mutex
	m  map[string]*senderTable
}

// room returns room's table, made on first use.
func (ts *senderTables) room(name string) *senderTable {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.m[name]
	if t == nil {
		if ts.m == nil {
			ts.m = map[string]*senderTable{}
		}
		t = &senderTable{}
		ts.m[name] = t
	}
	return t
}
