package capture

import (
	"errors"
	"fmt"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// piece says which packet brought a run of stream bytes: end is the stream
// offset just past the run.
type piece struct {
	end int64
	t   time.Time
	pkt int
}

// halfStream cuts one direction of a TCP connection into frames. While
// synced it feeds wire.Parser and keeps a mirror of the bytes not yet framed
// (the parser hands out decoded frames, we need their raw bytes too). When
// not synced (no SYN seen, bytes missing, garbage) it holds bytes and
// searches for an offset where consecutive frames parse.
type halfStream struct {
	name     string // "10.0.0.1:5000 -> 10.0.0.2:7400", for notes
	maxFrame int
	parser   wire.Parser
	synced   bool
	buf      []byte // stream bytes from offset off not yet part of a frame
	off      int64
	pieces   []piece
	frames   []Frame
	hasJoin  bool
	// clientKinds and serverKinds count the frames of each direction's
	// kinds this half sent, to tell the client side by the protocol.
	clientKinds, serverKinds int
	resynced                 bool
	keep                     func(n int) bool // memory budget: may we keep n more bytes?
	note                     func(string)
	// base is the sequence number of stream offset 0; gaps are the stream
	// ranges given up as missing (at most maxNotes), to tell late bytes.
	base    uint32
	gaps    [][2]int64
	lastPkt int  // the last packet that brought bytes
	raw     bool // keep payloads as they come (Options.Raw)
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

func newHalfStream(name string, maxFrame int, synced bool, keep func(int) bool, note func(string)) *halfStream {
	return &halfStream{name: name, maxFrame: maxFrame, parser: wire.Parser{MaxFrame: maxFrame}, synced: synced, keep: keep, note: note}
}

// feed adds stream bytes that packet pkt, captured at t, brought.
func (h *halfStream) feed(data []byte, t time.Time, pkt int) {
	if len(data) == 0 {
		return
	}
	if h.raw {
		h.count++
		if !h.discard && h.keep(len(data)) {
			h.frames = append(h.frames, Frame{Time: h.monotonic(t), Packet: pkt, Bytes: append([]byte(nil), data...)})
		}
		return
	}
	h.buf = append(h.buf, data...)
	h.pieces = append(h.pieces, piece{end: h.off + int64(len(h.buf)), t: t, pkt: pkt})
	h.lastPkt = pkt
	if h.synced {
		if err := h.parser.Feed(data, h.emit); err != nil {
			h.garbage(err)
		}
	}
	h.resync(false)
}

// resync searches for a frame boundary for as long as garbage keeps
// breaking the frames it finds.
func (h *halfStream) resync(final bool) {
	for !h.synced && len(h.buf) > 0 && h.trySync(final) {
	}
}

// emit is the parser's callback: the frame is the first FrameLen bytes of
// the mirror buffer.
func (h *halfStream) emit(f *wire.Frame) error {
	n := wire.FrameLen(h.buf)
	h.store(f.Type, h.buf[:n])
	h.consume(n)
	return nil
}

func (h *halfStream) store(t wire.Type, b []byte) {
	p := h.completedBy(h.off, h.off+int64(len(b)))
	if t == wire.TypeJoin {
		h.hasJoin = true
	}
	if t.FromClient() {
		h.clientKinds++
	} else {
		h.serverKinds++
	}
	h.count++
	tm := h.monotonic(p.t)
	if h.tally != nil && h.marks() {
		h.tally.Add(tm, t, b)
		h.tallied++
	}
	if h.discard || !h.keep(len(b)) {
		return
	}
	h.frames = append(h.frames, Frame{Time: tm, Packet: p.pkt, Type: t, Bytes: append([]byte(nil), b...)})
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

// garbage handles a protocol error: the frame at buf[0] is not one, so skip
// its first byte and look for the next frame boundary.
func (h *halfStream) garbage(err error) {
	var werr *wire.Error
	detail := err.Error()
	if errors.As(err, &werr) {
		detail = fmt.Sprintf("%s (%s)", werr.Code, werr.Detail)
	}
	h.note(fmt.Sprintf("packet %d: %s: not a frame at stream offset %d: %s; resynchronising",
		h.pieceAt(h.off).pkt, h.name, h.off, detail))
	h.synced = false
	h.parser = wire.Parser{MaxFrame: h.maxFrame}
	h.consume(1)
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
	h.synced = false
	h.parser = wire.Parser{MaxFrame: h.maxFrame}
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

// trySync looks for the first offset in buf where frames parse one after
// another, drops the bytes before it and parses on from there. final says
// no more bytes will come. It returns true if it should be called again
// (the frames it found ran into garbage).
func (h *halfStream) trySync(final bool) bool {
	for i := 0; i < len(h.buf); i++ {
		switch probe(h.buf[i:], h.maxFrame, final) {
		case probeBad:
			continue
		case probeWait:
			h.skip(i)
			return false
		case probeGood:
			h.skip(i)
			h.resynced = true
			h.synced = true
			h.note(fmt.Sprintf("packet %d: %s: resynchronised on a frame at stream offset %d", h.pieceAt(h.off).pkt, h.name, h.off))
			data := h.buf
			if err := h.parser.Feed(data, h.emit); err != nil {
				h.garbage(err)
				return true
			}
			return false
		}
	}
	h.skip(len(h.buf))
	return false
}

func (h *halfStream) skip(n int) {
	if n == 0 {
		return
	}
	h.note(fmt.Sprintf("packet %d: %s: skipped %d bytes at stream offset %d that are not frames", h.pieceAt(h.off).pkt, h.name, n, h.off))
	h.consume(n)
}

// end is called once no more bytes will come.
func (h *halfStream) end() {
	h.resync(true)
	if n := len(h.buf); n > 0 {
		want := wire.FrameLen(h.buf)
		h.note(fmt.Sprintf("%s: stream ends inside a frame (%d of %d bytes): left out", h.name, n, max(want, n)))
		h.consume(n)
	}
}

type probeResult int

const (
	probeBad  probeResult = iota // no frame starts here
	probeWait                    // frames may start here: need more bytes to tell
	probeGood                    // two frames in a row start here (or one at the very end)
)

// probe tells whether frames start at b[0]: two whole frames that decode
// one after the other are taken as proof.
func probe(b []byte, maxFrame int, final bool) probeResult {
	count := 0
	var f wire.Frame
	for {
		if count >= 2 {
			return probeGood
		}
		undecided := probeWait
		if final {
			undecided = probeBad
			if count > 0 {
				undecided = probeGood
			}
		}
		if len(b) < wire.LenSize {
			if len(b) == 0 && count > 0 && final {
				return probeGood
			}
			return undecided
		}
		n := wire.FrameLen(b)
		if n == wire.LenSize || n-wire.LenSize > maxFrame {
			return probeBad
		}
		if len(b) < wire.HeaderSize {
			return undecided
		}
		t := wire.Type(b[wire.LenSize])
		if !t.Known() {
			return probeBad
		}
		if len(b) < n {
			return undecided
		}
		if wire.DecodeBody(t, b[wire.HeaderSize:n], &f) != nil {
			return probeBad
		}
		count++
		b = b[n:]
	}
}
