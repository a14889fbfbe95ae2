package session

import (
	"fmt"
	"sort"
	"time"
)

// Frame is one client→server message of a recorded flow, at its offset
// from the flow's start: what a program hands a fleet to build a script
// from (the profile cuts and reads the bytes; a timeline needs the
// offsets only).
type Frame struct {
	Offset time.Duration // since the flow's start
	Bytes  []byte        // the whole message, as the client sent it
}

// Timeline is a script's timing, whatever its protocol: when each of its
// messages is due since the login, which ones form the handshake and the
// login part, and which range loops. Plans are built from it.
type Timeline struct {
	at []time.Duration
	// loginEnd is the first loop message (A); messages before it are the
	// login part. loopEnd is B, exclusive. Without a loop, loginEnd is the
	// first send and loopEnd the number of messages.
	loginEnd, loopEnd int
	// handshakeEnd is the first send: the messages before it (the login
	// and whatever the client said before its first send) are all a
	// receive-only client plays.
	handshakeEnd int
	looping      bool
	period       time.Duration // B−A scaled, when looping
	// cut is a Plan.Until's (nil: none), in the timeline of its own
	// that plan holds.
	cut *cutPlan
}

// TimelineInput is what NewTimeline needs of a recorded flow.
type TimelineInput struct {
	// Flow is the offset of every client message of the flow (loop points
	// given as #index count these), in order.
	Flow []time.Duration
	// First is the index in Flow of the login's first message, Last the
	// index past the last kept one: the script is Flow[First:Last].
	First, Last int
	// FirstSend is the index in the script (from First) of the first
	// message a listener must not play; Last-First when there is none.
	FirstSend int
	Loop      *Loop
	Speed     float64
	// End is the recorded flow's length (its last packet, either way). A
	// loop point given as a time past both End and the last message plus
	// the longest gap between two messages is refused, as an index past
	// the flow is. 0: only the latter bound.
	End time.Duration
}

// NewTimeline builds the timing of a script of in.Flow[in.First:in.Last].
func NewTimeline(in TimelineInput) (Timeline, error) {
	speed := in.Speed
	if speed <= 0 {
		speed = 1
	}
	if in.First < 0 || in.Last > len(in.Flow) || in.Last <= in.First {
		return Timeline{}, fmt.Errorf("session: no messages to play")
	}
	kept := in.Flow[in.First:in.Last]
	base := kept[0]
	t := Timeline{at: make([]time.Duration, len(kept)), handshakeEnd: min(in.FirstSend, len(kept))}
	for i, o := range kept {
		if o < base || (i > 0 && o < kept[i-1]) {
			return Timeline{}, fmt.Errorf("session: message #%d at %v: offsets go backwards", in.First+i, o)
		}
		t.at[i] = time.Duration(float64(o-base) / speed)
	}
	if in.Loop == nil {
		t.loopEnd = len(kept)
		t.loginEnd = t.handshakeEnd
		return t, nil
	}
	l := in.Loop
	end := flowEnd(in.Flow, in.End)
	a, aOff, err := resolve(l.A, in.Flow, in.First, kept, end)
	if err != nil {
		return Timeline{}, fmt.Errorf("session: loop start: %w", err)
	}
	b, bOff, err := resolve(l.B, in.Flow, in.First, kept, end)
	if err != nil {
		return Timeline{}, fmt.Errorf("session: loop end: %w", err)
	}
	if a == 0 {
		return Timeline{}, fmt.Errorf("session: loop start %v is at or before the join (the login, at %v): the join cannot be looped", l.A, base)
	}
	if b <= a {
		return Timeline{}, fmt.Errorf("session: loop %v,%v holds no frames", l.A, l.B)
	}
	if bOff <= aOff {
		return Timeline{}, fmt.Errorf("session: loop %v,%v lasts no time", l.A, l.B)
	}
	t.looping, t.loginEnd, t.loopEnd = true, a, b
	// Pass k plays message j at at_j + k·period, so the gap between the
	// last message and B is kept before every wrap.
	t.period = time.Duration(float64(bOff-aOff) / speed)
	return t, nil
}

// resolve turns a point into an index into kept (len(kept) allowed for
// an end) and the flow offset it stands for.
func resolve(p Point, flow []time.Duration, first int, kept []time.Duration, end time.Duration) (int, time.Duration, error) {
	if p.IsIndex {
		i := p.Index - first
		if p.Index < first || i > len(kept) || (i == len(kept) && p.Index >= len(flow)) {
			return 0, 0, fmt.Errorf("frame index %v outside the replayable frames #%d..#%d", p, first, first+len(kept)-1)
		}
		if i == len(kept) {
			return i, flow[p.Index], nil
		}
		return i, kept[i], nil
	}
	// Past the flow's end a time point holds nothing to play.
	if p.Offset > end {
		return 0, 0, fmt.Errorf("offset %v is past the flow's end at %v (last client message #%d at %v)", p, end, len(flow)-1, flow[len(flow)-1])
	}
	i := sort.Search(len(kept), func(i int) bool { return kept[i] >= p.Offset })
	return i, p.Offset, nil
}

// flowEnd is the latest offset a time loop point may name: the recorded
// end, or the last message plus the longest gap between two messages (a
// loop may keep the pause after its last message), whichever is later.
func flowEnd(flow []time.Duration, recorded time.Duration) time.Duration {
	var gap time.Duration
	for i := 1; i < len(flow); i++ {
		gap = max(gap, flow[i]-flow[i-1])
	}
	return max(recorded, flow[len(flow)-1]+gap)
}

// Len is the number of script messages.
func (t *Timeline) Len() int { return len(t.at) }

// LoginEnd is the index of the first message after the login part.
func (t *Timeline) LoginEnd() int { return t.loginEnd }

// HandshakeEnd is the index of the first send.
func (t *Timeline) HandshakeEnd() int { return t.handshakeEnd }

// Looping reports whether the script has a loop.
func (t *Timeline) Looping() bool { return t.looping }

// Period is the scaled length of one loop pass.
func (t *Timeline) Period() time.Duration { return t.period }

// At is message i's due time since the login (first pass), scaled.
func (t *Timeline) At(i int) time.Duration { return t.at[i] }

// LoopRange returns the loop's message range [a, b).
func (t *Timeline) LoopRange() (a, b int) { return t.loginEnd, t.loopEnd }
