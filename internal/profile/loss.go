package profile

import (
	"encoding/binary"
	"hash/maphash"
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
// first numbered delivery, in a small open-addressed table of its own.
// A Go map was the receive path's largest user-space cost (a lookup
// hashes the sender every time): in a room the relay delivers the other
// members' casts in much the same order round after round, so each entry
// remembers which sender followed it last time, and a delivery whose
// sender is that guess is found with one comparison and no hash. A wrong
// guess costs one hash and a probe, as before.
type seqTracker struct {
	seed  maphash.Seed
	slots []seqSlot // a power of two, at most half full; nil until first use
	used  int
	prev  int32 // slot of the last delivery's sender; -1 none
}

// seqSlot is one sender's entry; hash 0 marks an empty slot. key holds
// an id of up to 16 bytes in the slot itself, so that comparing one
// reads no other memory: with hundreds of receivers the ids' own bytes
// are seldom in the cache, and that miss was most of a lookup's cost.
type seqSlot struct {
	hash uint64
	key  idKey
	id   string // compared only for ids over 16 bytes
	last uint16 // seq+1 of the last delivery in order
	next int32  // slot of the sender that came after this one last time; -1 none
}

// idKey is an id's length with its first and last 8 bytes (zero-padded
// when shorter): for ids of up to 16 bytes, equal keys are equal ids.
type idKey struct {
	head, tail uint64
	n          int
}

func keyOf(b []byte) idKey {
	k := idKey{n: len(b)}
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

// is says whether the slot holds sender, whose key is k.
func (s *seqSlot) is(k idKey, sender []byte) bool {
	return s.key == k && (k.n <= 16 || s.id == string(sender))
}

// seqSlotsMin is the table's first size.
const seqSlotsMin = 64

// slot returns the slot of sender, adding it when new (found false).
func (t *seqTracker) slot(sender []byte) (i int32, found bool) {
	k := keyOf(sender)
	if t.slots != nil && t.prev >= 0 {
		if g := t.slots[t.prev].next; g >= 0 && t.slots[g].is(k, sender) {
			t.prev = g
			return g, true
		}
	}
	if t.slots == nil {
		t.seed = maphash.MakeSeed()
		t.slots = make([]seqSlot, seqSlotsMin)
		t.prev = -1
	}
	h := maphash.Bytes(t.seed, sender) | 1
	mask := len(t.slots) - 1
	j := int(h) & mask
	for ; t.slots[j].hash != 0; j = (j + 1) & mask {
		if t.slots[j].hash == h && t.slots[j].is(k, sender) {
			t.link(int32(j))
			return int32(j), true
		}
	}
	if 2*(t.used+1) > len(t.slots) {
		t.grow()
		return t.slot(sender)
	}
	t.slots[j] = seqSlot{hash: h, key: k, next: -1}
	if k.n > 16 {
		t.slots[j].id = string(sender)
	}
	t.used++
	t.link(int32(j))
	return int32(j), false
}

// link records that slot j came after the previous delivery's sender.
func (t *seqTracker) link(j int32) {
	if t.prev >= 0 {
		t.slots[t.prev].next = j
	}
	t.prev = j
}

// grow doubles the table; the guesses start over.
func (t *seqTracker) grow() {
	old := t.slots
	t.slots = make([]seqSlot, 2*len(old))
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.hash == 0 {
			continue
		}
		j := int(s.hash) & mask
		for t.slots[j].hash != 0 {
			j = (j + 1) & mask
		}
		s.next = -1
		t.slots[j] = s
	}
	t.prev = -1
}

// see accounts one numbered delivery from sender; it returns the change
// in lost messages (a gap: positive; a late arrival: -1).
func (t *seqTracker) see(sender []byte, trace int64) int64 {
	if trace < 0 {
		return 0
	}
	seq := uint16(trace % seqMod)
	i, ok := t.slot(sender)
	s := &t.slots[i]
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
