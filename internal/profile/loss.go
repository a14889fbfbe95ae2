package profile

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
// first numbered delivery. The map holds pointers so that a delivery
// updates its sender's entry through a lookup, which Go does without
// converting the sender to a string: an assignment m[string(b)] = v
// allocates the key each time, which at N:N was the fleet's largest cost
// (a third of its CPU with the garbage collection it caused).
type seqTracker struct {
	last map[string]*uint16 // seq+1 of the last delivery in order
}

// see accounts one numbered delivery from sender; it returns the change
// in lost messages (a gap: positive; a late arrival: -1).
func (t *seqTracker) see(sender []byte, trace int64) int64 {
	if trace < 0 {
		return 0
	}
	seq := uint16(trace % seqMod)
	prev, ok := t.last[string(sender)]
	if !ok {
		if t.last == nil {
			t.last = make(map[string]*uint16)
		}
		next := seq + 1
		t.last[string(sender)] = &next
		return 0
	}
	gap := (int(seq) - int(*prev) + seqMod) % seqMod // *prev is last+1: 0 means in order
	switch {
	case gap == 0:
		*prev = seq + 1
		return 0
	case gap < seqAhead:
		*prev = seq + 1
		return int64(gap)
	}
	return -1 // behind the last one seen: late (or a duplicate)
}
