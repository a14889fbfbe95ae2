package profile

import (
	"encoding/binary"
	"math/bits"
)

// Loss accounting of the reprise profile. Over UDP a delivery can be lost; the fleet counts what
// was lost per sender instead of hiding it behind a latency histogram.
//
// Every room-wide send (broadcast, othercast) with a trace stamp carries
// its sender's sequence number in the stamp's last three decimal digits:
// the stamp is the send time in ns with its sub-microsecond part replaced
// by seq mod 1000 (latency is kept in µs, so it loses nothing). Each
// receiver keeps the last sequence per sender and counts the gaps. Only
// room-wide casts are numbered, because every other member gets every one
// of them; a unicast or ownercast does not advance the sequence.
//
// Limits, stated in the summary's loss figure: a run of 500 or more
// consecutive losses from one sender is seen as a reorder; losses at the
// very end of a sender's stream (nothing after them) are not seen. A
// delivery older than the last one seen is late, not lost: it is counted
// back off the lost ones.
const (
	seqMod = 1000
	// seqAhead: a jump of up to this many is a gap; more is a late arrival.
	seqAhead = seqMod / 2
)

// stampSeq is the trace stamp for wall time now (ns) carrying seq.
func stampSeq(now int64, seq uint64) int64 {
	return now - now%seqMod + int64(seq%seqMod)
}

// seqTracker is one receiver's last sequence per sender, created on its
// first numbered delivery, in a small table of its own.
//
// A lookup is the receive path's largest user-space cost, and what it
// costs is memory more than instructions: with hundreds of receivers, a
// receiver's table has left the near caches by its next read. So the
// entries are dense, 24 bytes each, in the order their senders were first
// seen, and each remembers which sender followed it last time. In a room
// the relay delivers the other members' casts in much the same order
// round after round, so a read's deliveries are found with one comparison
// each and no hash, walking the entries in memory order (two or three to
// a cache line). A wrong guess costs a hash of the key and a probe of an
// index of int32s. (The table before held 56-byte entries at hash
// positions: one line touched per delivery, at random.)
type seqTracker struct {
	ents  []seqEnt // in order of first delivery
	index []int32  // entry+1 at the sender's hash position, 0 empty; a power of two, at most half full
	long  []string // by entry: the id when over 16 bytes ("" otherwise); nil until one is
	prev  int32    // entry+1 of the last delivery's sender; 0 none
}

// seqEnt is one sender's entry: its key's fields inline (an id of up to
// 16 bytes is held in the entry itself, so that comparing one reads no
// other memory), 24 bytes in all.
type seqEnt struct {
	head, tail uint64 // idKey's
	n          uint16 // idKey's
	last       uint16 // seq+1 of the last delivery in order
	next       int32  // entry+1 of the sender that came after this one last time; 0 none
}

func (e *seqEnt) key() idKey { return idKey{e.head, e.tail, e.n} }

// idKey is an id's first and last 8 bytes (zero-padded when shorter) and
// its length (capped at 0xffff): for ids of up to 16 bytes, equal keys
// are equal ids.
type idKey struct {
	head, tail uint64
	n          uint16
}

func keyOf(b []byte) idKey {
	k := idKey{n: uint16(min(len(b), 0xffff))}
	if len(b) >= 8 {
		k.head = binary.LittleEndian.Uint64(b)
		k.tail = binary.LittleEndian.Uint64(b[len(b)-8:])
		return k
	}
	for i, c := range b {
		k.head |= uint64(c) << (8 * i)
	}
	return k
}

// hash mixes a key (ids longer than 16 bytes with equal keys share a
// chain; is tells them apart). The index uses its top bits.
func (k idKey) hash() uint64 {
	return (k.head ^ bits.RotateLeft64(k.tail, 31) ^ uint64(k.n)<<48) * 0x9e3779b97f4a7c15
}

// is says whether entry e holds sender, whose key is k.
func (t *seqTracker) is(e int32, k idKey, sender []byte) bool {
	x := &t.ents[e]
	return x.head == k.head && x.tail == k.tail && x.n == k.n && (k.n <= 16 || t.long[e] == string(sender))
}

// seqIndexMin is the index's first size.
const seqIndexMin = 64

// entry returns the entry of sender, adding it when new (found false).
func (t *seqTracker) entry(sender []byte) (e int32, found bool) {
	k := keyOf(sender)
	if t.prev > 0 {
		if g := t.ents[t.prev-1].next - 1; g >= 0 && t.is(g, k, sender) {
			t.prev = g + 1
			return g, true
		}
	}
	if t.index == nil {
		t.index = make([]int32, seqIndexMin)
	}
	j, mask := t.home(k), len(t.index)-1
	for ; t.index[j] != 0; j = (j + 1) & mask {
		if e := t.index[j] - 1; t.is(e, k, sender) {
			t.link(e)
			return e, true
		}
	}
	if 2*(len(t.ents)+1) > len(t.index) {
		t.grow()
		return t.entry(sender)
	}
	e = int32(len(t.ents))
	t.ents = append(t.ents, seqEnt{head: k.head, tail: k.tail, n: k.n})
	if k.n > 16 && t.long == nil {
		t.long = make([]string, e, cap(t.ents))
	}
	if t.long != nil {
		t.long = append(t.long, "")
		if k.n > 16 {
			t.long[e] = string(sender)
		}
	}
	t.index[j] = e + 1
	t.link(e)
	return e, false
}

// home is a key's first position in the index.
func (t *seqTracker) home(k idKey) int {
	return int(k.hash() >> (64 - bits.TrailingZeros(uint(len(t.index)))))
}

// link records that entry e came after the previous delivery's sender.
func (t *seqTracker) link(e int32) {
	if t.prev > 0 {
		t.ents[t.prev-1].next = e + 1
	}
	t.prev = e + 1
}

// grow doubles the index; the entries and their guesses stay.
func (t *seqTracker) grow() {
	t.index = make([]int32, 2*len(t.index))
	mask := len(t.index) - 1
	for e := range t.ents {
		j := t.home(t.ents[e].key())
		for t.index[j] != 0 {
			j = (j + 1) & mask
		}
		t.index[j] = int32(e) + 1
	}
}

// see accounts one numbered delivery from sender; it returns the change
// in lost messages (a gap: positive; a late arrival: -1).
func (t *seqTracker) see(sender []byte, trace int64) int64 {
	if trace < 0 {
		return 0
	}
	seq := uint16(trace % seqMod)
	i, ok := t.entry(sender)
	s := &t.ents[i]
	if !ok {
		s.last = seq + 1
		return 0
	}
	gap := (int(seq) - int(s.last) + seqMod) % seqMod // s.last is last+1: 0 means in order
	switch {
	case gap == 0:
		s.last = seq + 1
		return 0
	case gap < seqAhead:
		s.last = seq + 1
		return int64(gap)
	}
	return -1 // behind the last one seen: late (or a duplicate)
}
