// Package session turns one recorded client flow into a script that every
// replayed client of the fleet plays: the login part (the join and whatever
// the client sent before the loop start A), the loop [A, B) repeated with
// its recorded timing scaled by a speed, and the rewriting of the recorded
// user id, room, peers and auth token into each replayed client's own.
//
// The schedule (Plan.Step, Plan.DueBy) is a pure function of a step number
// or of elapsed time, so it is tested with tables and no sleeps. This
// package reads no files and opens no sockets: internal/capture decodes the
// pcap, internal/fleet sends the bytes.
package session

import (
	"errors"
	"fmt"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Frame is one client→server frame of the recorded flow.
type Frame struct {
	Offset time.Duration // since the flow's start
	Bytes  []byte        // the whole frame, length prefix included (no UDP token)
}

// Options shape a script.
type Options struct {
	// Loop is the range repeated for as long as a run lasts; nil plays the
	// whole script once.
	Loop *Loop
	// Speed divides the recorded gaps (2 plays twice as fast); 0 means 1.
	Speed float64
	// RewritePayload also replaces recorded user ids inside payload bytes.
	RewritePayload bool
	// MaxFrame caps the decoded frames' length; 0 means wire.DefaultMaxFrame.
	MaxFrame int
	// End is the recorded flow's length (its last packet, either way): see
	// TimelineInput.End.
	End time.Duration
}

// Script is a recorded session ready to be replayed by many clients. It is
// immutable after New and safe to share between goroutines.
type Script struct {
	Timeline
	frames []frame

	// RecordedUser is the user id of the recorded join; RecordedRoom its room.
	RecordedUser string
	RecordedRoom string
	// Others are the recorded users other than RecordedUser that frames
	// target (unicast, manycast), in order of first appearance. A replayed
	// client maps Others[k] onto its Identity.Peers[k].
	Others []string
	// Notes say what was dropped or adjusted while building the script.
	Notes []string

	ids            map[string]int // recorded id → 0 (self) or 1+k (Others[k])
	rewritePayload bool
}

// frame is one script frame: its due time since the join and what the
// rewriter needs.
type frame struct {
	typ   wire.Type
	bytes []byte
	// template marks frames whose bytes differ per client (join, targets,
	// payload ids); tmpl is then their index in Encoded.own.
	template bool
	tmpl     int
	mode     wire.Mode
	hasTrace bool
	trace    int64
	targets  []string
	payload  []byte
	authLen  int
	padding  int
}

// ErrNoJoin means the flow has no join frame, so there is nothing to replay.
var ErrNoJoin = errors.New("session: the flow has no join frame")

// New builds a script from a flow's client frames. Frames before the first
// join and from the first leave on are dropped (the fleet joins and leaves
// by itself), with a note saying so.
func New(in []Frame, opts Options) (*Script, error) {
	speed := opts.Speed
	if speed == 0 {
		speed = 1
	}
	if speed < 0 {
		return nil, fmt.Errorf("session: speed %v must be positive", speed)
	}
	maxFrame := opts.MaxFrame
	if maxFrame <= 0 {
		maxFrame = wire.DefaultMaxFrame
	}
	s := &Script{ids: map[string]int{}, rewritePayload: opts.RewritePayload}
	first, last, err := s.decodeFrames(in, maxFrame, speed)
	if err != nil {
		return nil, err
	}
	s.findOthers()
	s.markTemplates()
	firstSend := len(s.frames)
	for i, f := range s.frames {
		if f.typ == wire.TypeSend {
			firstSend = i
			break
		}
	}
	flow := make([]time.Duration, len(in))
	for i, fr := range in {
		flow[i] = fr.Offset
	}
	tl, err := NewTimeline(TimelineInput{Flow: flow, First: first, Last: last, FirstSend: firstSend, Loop: opts.Loop, Speed: speed, End: opts.End})
	if err != nil {
		return nil, err
	}
	s.Timeline = tl
	return s, nil
}

// decodeFrames decodes in[first:last) (from the first join to before the
// first leave) into s.frames and returns that range.
func (s *Script) decodeFrames(in []Frame, maxFrame int, speed float64) (first, last int, err error) {
	first = -1
	var base time.Duration
	var f wire.Frame
	for i, fr := range in {
		n, err := wire.Decode(fr.Bytes, maxFrame, &f)
		if err != nil {
			return 0, 0, fmt.Errorf("session: frame #%d at %v: %w", i, fr.Offset, err)
		}
		if n != len(fr.Bytes) {
			return 0, 0, fmt.Errorf("session: frame #%d at %v: %d trailing bytes", i, fr.Offset, len(fr.Bytes)-n)
		}
		if first < 0 {
			if f.Type != wire.TypeJoin {
				continue
			}
			first, base = i, fr.Offset
			s.RecordedUser, s.RecordedRoom = string(f.User), string(f.Room)
			s.ids[s.RecordedUser] = 0
			if first > 0 {
				s.Notes = append(s.Notes, fmt.Sprintf("dropped %d frames before the first join", first))
			}
		}
		if f.Type == wire.TypeLeave {
			s.Notes = append(s.Notes, fmt.Sprintf("dropped %d frames from the leave at #%d on: the fleet leaves by itself", len(in)-i, i))
			return first, i, nil
		}
		if f.Type == wire.TypeJoin && i != first {
			return 0, 0, fmt.Errorf("session: frame #%d at %v: a second join without a leave", i, fr.Offset)
		}
		if fr.Offset < base || (len(s.frames) > 0 && fr.Offset < in[i-1].Offset) {
			return 0, 0, fmt.Errorf("session: frame #%d at %v: offsets go backwards", i, fr.Offset)
		}
		s.frames = append(s.frames, decoded(&f, fr.Bytes))
	}
	if first < 0 {
		return 0, 0, ErrNoJoin
	}
	return first, len(in), nil
}

// decoded copies what the rewriter needs out of f (whose slices alias b).
func decoded(f *wire.Frame, b []byte) frame {
	fr := frame{typ: f.Type, bytes: b}
	switch f.Type {
	case wire.TypeJoin:
		fr.authLen, fr.padding = len(f.Auth), f.Padding
	case wire.TypeSend:
		fr.mode, fr.hasTrace, fr.trace, fr.payload = f.Mode, f.HasTrace, f.Trace, f.Payload
		f.Targets(func(id []byte) { fr.targets = append(fr.targets, string(id)) })
	}
	return fr
}

func (s *Script) findOthers() {
	for _, f := range s.frames {
		for _, t := range f.targets {
			if _, ok := s.ids[t]; !ok {
				s.Others = append(s.Others, t)
				s.ids[t] = len(s.Others)
			}
		}
	}
}

// markTemplates marks the frames whose bytes depend on the client.
func (s *Script) markTemplates() {
	n := 0
	for i := range s.frames {
		f := &s.frames[i]
		f.template = f.typ == wire.TypeJoin || len(f.targets) > 0 ||
			(s.rewritePayload && s.payloadHasID(f.payload))
		if f.template {
			f.tmpl = n
			n++
		}
	}
}

// Type is frame i's type.
func (s *Script) Type(i int) wire.Type { return s.frames[i].typ }

// RoomWide reports whether frame i is a traced broadcast or othercast:
// a send every other member receives, so its stamp can carry a sequence
// that receivers check for gaps.
func (s *Script) RoomWide(i int) bool {
	f := &s.frames[i]
	return f.typ == wire.TypeSend && f.hasTrace && (f.mode == wire.Broadcast || f.mode == wire.Othercast)
}
