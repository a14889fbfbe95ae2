package capture

import (
	"fmt"
	"time"
)

// piece says which packet brought a run of stream bytes: end is the stream
// offset just past the run.
type piece struct {
	end int64
	t   time.Time
	pkt int
}

// halfStream is one direction of a TCP connection: its bytes in stream
// order go to the protocol's StreamCutter, which cuts them into frames
// through the Stream methods below; the half keeps the bytes not yet cut
// and which packet brought each run of them. Without a cutter
// (Options.Framer nil) each packet's payload is kept as it came.
type halfStream struct {
	name   string // "10.0.0.1:5000 -> 10.0.0.2:7400", for notes
	cut    StreamCutter
	framer Framer
	buf    []byte // stream bytes from offset off not yet part of a frame
	off    int64
	pieces []piece
	frames []Frame
	// hints counts the frames of each Hint this half sent, to tell the
	// client side by the protocol.
	hints [Opens + 1]int
	keep  func(n int) bool // memory budget: may we keep n more bytes?
	note  func(string)
	// base is the sequence number of stream offset 0; gaps are the stream
	// ranges given up as missing (at most maxNotes), to tell late bytes.
	base    uint32
	gaps    [][2]int64
	lastPkt int // the last packet that brought bytes
	// last is the time of the last frame kept: a frame is never earlier
	// (reordered segments bring bytes whose own time is before it).
	last time.Time
	// count is the frames found, kept or not; discard says keep none
	// (a flow not selected: Options.Select).
	count   int
	discard bool
	// tally, when set (Options.Summarize), takes each frame while marks
	// charges it to the memory budget; tallied counts them.
	tally   Tally
	marks   func() bool
	tallied int
}

func newHalfStream(name string, framer Framer, keep func(int) bool, note func(string)) *halfStream {
	h := &halfStream{name: name, framer: framer, keep: keep, note: note}
	if framer != nil {
		h.cut = framer.Stream()
	}
	return h
}

// feed adds stream bytes that packet pkt, captured at t, brought.
func (h *halfStream) feed(data []byte, t time.Time, pkt int) {
	if len(data) == 0 {
		return
	}
	if h.cut == nil {
		h.count++
		if !h.discard && h.keep(len(data)) {
			h.frames = append(h.frames, Frame{Time: h.monotonic(t), Packet: pkt, Bytes: append([]byte(nil), data...)})
		}
		return
	}
	h.buf = append(h.buf, data...)
	h.pieces = append(h.pieces, piece{end: h.off + int64(len(h.buf)), t: t, pkt: pkt})
	h.lastPkt = pkt
	h.cut.Feed(h, data)
}

// Pending implements Stream.
func (h *halfStream) Pending() []byte { return h.buf }

// Offset implements Stream.
func (h *halfStream) Offset() int64 { return h.off }

// Name implements Stream.
func (h *halfStream) Name() string { return h.name }

// Note implements Stream.
func (h *halfStream) Note(msg string) { h.note(msg) }

// Packet implements Stream.
func (h *halfStream) Packet() int { return h.pieceAt(h.off).pkt }

// Emit implements Stream: the frame is the first n pending bytes.
func (h *halfStream) Emit(n int) {
	h.store(h.buf[:n])
	h.consume(n)
}

// Drop implements Stream.
func (h *halfStream) Drop(n int) { h.consume(n) }

func (h *halfStream) store(b []byte) {
	p := h.completedBy(h.off, h.off+int64(len(b)))
	h.hints[h.framer.Hint(b)]++
	h.count++
	tm := h.monotonic(p.t)
	if h.tally != nil && h.marks() {
		h.tally.Add(tm, b)
		h.tallied++
	}
	if h.discard || !h.keep(len(b)) {
		return
	}
	h.frames = append(h.frames, Frame{Time: tm, Packet: p.pkt, Bytes: append([]byte(nil), b...)})
}

// monotonic is t, or the time of the frame before when t is earlier.
func (h *halfStream) monotonic(t time.Time) time.Time {
	if t.Before(h.last) {
		return h.last
	}
	h.last = t
	return t
}

// completedBy finds the packet that completed the stream range [lo, hi)
// (which is in buf): the one captured last among those that brought its
// bytes. In stream order that is the last piece, unless segments were
// reordered: then a piece that filled a hole came after the bytes behind it.
func (h *halfStream) completedBy(lo, hi int64) piece {
	var best piece
	found := false
	prevEnd := int64(-1) // the first piece may start before h.off
	for _, p := range h.pieces {
		if p.end > lo && prevEnd < hi && (!found || p.t.After(best.t)) {
			best, found = p, true
		}
		if p.end >= hi {
			break
		}
		prevEnd = p.end
	}
	if !found {
		return h.pieces[len(h.pieces)-1]
	}
	return best
}

// pieceAt finds the piece holding stream offset o (which is in buf).
func (h *halfStream) pieceAt(o int64) piece {
	for _, p := range h.pieces {
		if o < p.end {
			return p
		}
	}
	return h.pieces[len(h.pieces)-1]
}

func (h *halfStream) consume(n int) {
	h.buf = h.buf[n:]
	h.off += int64(n)
	i := 0
	for i < len(h.pieces) && h.pieces[i].end <= h.off {
		i++
	}
	h.pieces = h.pieces[i:]
	if len(h.buf) == 0 {
		h.buf = h.buf[:0:0]
	}
}

// gap handles bytes the capture does not hold (a lost packet): whatever
// frame was in progress is gone, and the stream must realign.
func (h *halfStream) gap(skip int, pkt int) {
	at := h.off + int64(len(h.buf))
	after := "at the start"
	if h.lastPkt > 0 {
		after = fmt.Sprintf("after packet %d", h.lastPkt)
	}
	h.note(fmt.Sprintf("%s: %d bytes missing from the capture %s (stream offset %d; the stream goes on in packet %d): waited %v of capture time for them; resynchronising",
		h.name, skip, after, at, pkt, flushAfter))
	if len(h.gaps) < maxNotes {
		h.gaps = append(h.gaps, [2]int64{at, at + int64(skip)})
	}
	h.off += int64(len(h.buf) + skip)
	h.buf, h.pieces = nil, nil
	if h.cut != nil {
		h.cut.Gap()
	}
}

// late notes a packet whose bytes fall in a range given up as missing:
// they came after the out-of-order tolerance and are dropped.
func (h *halfStream) late(seq uint32, n int, pkt int) {
	start := int64(seq - h.base) // stream offset, for streams under 4 GiB
	end := start + int64(n)
	for _, g := range h.gaps {
		if lo, hi := max(start, g[0]), min(end, g[1]); lo < hi {
			h.note(fmt.Sprintf("packet %d: %s: %d bytes at stream offset %d came after their gap was given up (over %v of capture time late): dropped",
				pkt, h.name, hi-lo, lo, flushAfter))
			return
		}
	}
}

// Skip implements Stream.
func (h *halfStream) Skip(n int) {
	if n == 0 {
		return
	}
	h.note(fmt.Sprintf("packet %d: %s: skipped %d bytes at stream offset %d that are not frames", h.pieceAt(h.off).pkt, h.name, n, h.off))
	h.consume(n)
}

// end is called once no more bytes will come: the cutter cuts what it
// can, the rest is dropped.
func (h *halfStream) end() {
	if h.cut == nil {
		return
	}
	h.cut.End(h)
	h.consume(len(h.buf))
}

// resynced says the cutter had to realign the stream.
func (h *halfStream) resynced() bool { return h.cut != nil && h.cut.Resynced() }
