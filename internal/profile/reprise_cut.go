package profile

import (
	"errors"
	"fmt"
	"sort"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/wire"
)

// The reprise protocol's framer: how the capture reader's payloads become
// reprise frames. A TCP direction is cut with wire.Parser and realigned
// on a frame boundary when it starts midway, after a gap or on garbage;
// a datagram is a client's (session token and one frame) or the server's
// (one or more whole frames).

// RepriseFramer cuts reprise frames of at most maxFrame bytes (0:
// wire.DefaultMaxFrame) out of a capture's payloads
// (capture.Options.Framer).
func RepriseFramer(maxFrame int) capture.Framer {
	if maxFrame <= 0 {
		maxFrame = wire.DefaultMaxFrame
	}
	return repriseFramer{maxFrame: maxFrame}
}

type repriseFramer struct{ maxFrame int }

// Stream implements capture.Framer.
func (r repriseFramer) Stream() capture.StreamCutter {
	c := &repriseCutter{maxFrame: r.maxFrame, parser: wire.Parser{MaxFrame: r.maxFrame}}
	c.emitFn = c.emit
	return c
}

// Hint implements capture.Framer: a frame's type says its direction, a
// join its client for sure.
func (repriseFramer) Hint(frame []byte) capture.Hint {
	switch t := wire.Type(frame[wire.LenSize]); {
	case t == wire.TypeJoin:
		return capture.Opens
	case t.FromClient():
		return capture.FromClient
	}
	return capture.FromServer
}

// Datagram implements capture.Framer: a client→server datagram (token +
// one frame) or a server→client one (one or more whole frames,
// docs/protocol.md), its frames without the token.
func (r repriseFramer) Datagram(d []byte) ([][]byte, bool) {
	var f wire.Frame
	if _, frame, err := wire.SplitDatagram(d, r.maxFrame); err == nil {
		t := wire.Type(frame[wire.LenSize])
		if t.FromClient() && wire.DecodeBody(t, frame[wire.HeaderSize:], &f) == nil {
			return [][]byte{frame}, true
		}
	}
	var frames [][]byte
	for rest := d; len(rest) > 0; {
		n, err := wire.Decode(rest, r.maxFrame, &f)
		if err != nil || f.Type.FromClient() {
			return nil, false
		}
		frames = append(frames, rest[:n])
		rest = rest[n:]
	}
	return frames, len(frames) > 0
}

// Reorder implements capture.Framer: a direction's traced frames (sends,
// and deliveries per sender) go back in the order of their trace stamps,
// which their sender set from its clock.
func (repriseFramer) Reorder(frames []capture.Frame) int {
	type traced struct {
		slot  int
		trace int64
	}
	groups := map[string][]traced{}
	var f wire.Frame
	for i, fr := range frames {
		if t := wire.Type(fr.Bytes[wire.LenSize]); t != wire.TypeSend && t != wire.TypeDeliver {
			continue
		}
		if _, err := wire.Decode(fr.Bytes, len(fr.Bytes), &f); err != nil || !f.HasTrace {
			continue
		}
		key := "" // a send: the flow's own client
		if f.Type == wire.TypeDeliver {
			key = "deliver " + string(f.User)
		}
		groups[key] = append(groups[key], traced{i, f.Trace})
	}
	moved := 0
	for _, g := range groups {
		if sort.SliceIsSorted(g, func(a, b int) bool { return g[a].trace < g[b].trace }) {
			continue
		}
		slots := make([]int, len(g))
		orig := make([]capture.Frame, len(g))
		for k, t := range g {
			slots[k], orig[k] = t.slot, frames[t.slot]
		}
		byTrace := make([]int, len(g)) // byTrace[k]: which of g goes to slot k
		for k := range byTrace {
			byTrace[k] = k
		}
		sort.SliceStable(byTrace, func(a, b int) bool { return g[byTrace[a]].trace < g[byTrace[b]].trace })
		for k, from := range byTrace {
			if from != k {
				moved++
			}
			fr := orig[from]
			fr.Time = orig[k].Time
			frames[slots[k]] = fr
		}
	}
	return moved
}

// repriseCutter cuts one TCP direction. While synced it feeds wire.Parser,
// whose frames are the first bytes pending in the stream (the parser
// hands out decoded frames; the stream keeps their bytes). When not
// synced (no SYN seen, bytes missing, garbage) it searches the pending
// bytes for an offset where consecutive frames parse.
type repriseCutter struct {
	maxFrame         int
	parser           wire.Parser
	synced, resynced bool
	s                capture.Stream // the stream being fed
	emitFn           func(*wire.Frame) error
}

// FromStart implements capture.StreamCutter.
func (c *repriseCutter) FromStart() { c.synced = true }

// Resynced implements capture.StreamCutter.
func (c *repriseCutter) Resynced() bool { return c.resynced }

// Feed implements capture.StreamCutter.
func (c *repriseCutter) Feed(s capture.Stream, data []byte) {
	c.s = s
	if c.synced {
		if err := c.parser.Feed(data, c.emitFn); err != nil {
			c.garbage(err)
		}
	}
	c.resync(false)
}

// Gap implements capture.StreamCutter: whatever frame was in progress is
// gone.
func (c *repriseCutter) Gap() {
	c.synced = false
	c.parser = wire.Parser{MaxFrame: c.maxFrame}
}

// End implements capture.StreamCutter.
func (c *repriseCutter) End(s capture.Stream) {
	c.s = s
	c.resync(true)
	if b := s.Pending(); len(b) > 0 {
		n, want := len(b), wire.FrameLen(b)
		s.Note(fmt.Sprintf("%s: stream ends inside a frame (%d of %d bytes): left out", s.Name(), n, max(want, n)))
		s.Drop(n)
	}
}

// emit is the parser's callback: the frame is the first FrameLen bytes
// pending.
func (c *repriseCutter) emit(*wire.Frame) error {
	c.s.Emit(wire.FrameLen(c.s.Pending()))
	return nil
}

// resync searches for a frame boundary for as long as garbage keeps
// breaking the frames it finds.
func (c *repriseCutter) resync(final bool) {
	for !c.synced && len(c.s.Pending()) > 0 && c.trySync(final) {
	}
}

// garbage handles a protocol error: the frame at the first pending byte
// is not one, so skip that byte and look for the next frame boundary.
func (c *repriseCutter) garbage(err error) {
	var werr *wire.Error
	detail := err.Error()
	if errors.As(err, &werr) {
		detail = fmt.Sprintf("%s (%s)", werr.Code, werr.Detail)
	}
	s := c.s
	s.Note(fmt.Sprintf("packet %d: %s: not a frame at stream offset %d: %s; resynchronising",
		s.Packet(), s.Name(), s.Offset(), detail))
	c.Gap()
	s.Drop(1)
}

// trySync looks for the first pending offset where frames parse one
// after another, drops the bytes before it and parses on from there.
// final says no more bytes will come. It returns true if it should be
// called again (the frames it found ran into garbage).
func (c *repriseCutter) trySync(final bool) bool {
	s := c.s
	buf := s.Pending()
	for i := 0; i < len(buf); i++ {
		switch probe(buf[i:], c.maxFrame, final) {
		case probeBad:
			continue
		case probeWait:
			s.Skip(i)
			return false
		case probeGood:
			s.Skip(i)
			c.resynced = true
			c.synced = true
			s.Note(fmt.Sprintf("packet %d: %s: resynchronised on a frame at stream offset %d", s.Packet(), s.Name(), s.Offset()))
			if err := c.parser.Feed(s.Pending(), c.emitFn); err != nil {
				c.garbage(err)
				return true
			}
			return false
		}
	}
	s.Skip(len(buf))
	return false
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
