package profile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

// The reprise protocol's script: one recorded client flow of wire frames
// that every replayed client of the fleet plays, with the rewriting of
// the recorded user id, room, peers and auth token into each client's
// own. Its timing is session's Timeline.

// repriseOptions shape a script.
type repriseOptions struct {
	// Loop is the range repeated for as long as a run lasts; nil plays the
	// whole script once.
	Loop *session.Loop
	// Speed divides the recorded gaps (2 plays twice as fast); 0 means 1.
	Speed float64
	// RewritePayload also replaces recorded user ids inside payload bytes.
	RewritePayload bool
	// MaxFrame caps the decoded frames' length; 0 means wire.DefaultMaxFrame.
	MaxFrame int
	// End is the recorded flow's length (its last packet, either way): see
	// session.TimelineInput.End.
	End time.Duration
}

// repriseScript is a recorded session ready to be replayed by many clients. It is
// immutable after newRepriseScript and safe to share between goroutines.
type repriseScript struct {
	session.Timeline
	frames []repriseFrame

	// RecordedUser is the user id of the recorded join; RecordedRoom its room.
	RecordedUser string
	RecordedRoom string
	// Others are the recorded users other than RecordedUser that frames
	// target (unicast, manycast), in order of first appearance. A replayed
	// client maps Others[k] onto its repriseIdentity.Peers[k].
	Others []string
	// Notes say what was dropped or adjusted while building the script.
	Notes []string

	ids            map[string]int // recorded id → 0 (self) or 1+k (Others[k])
	rewritePayload bool
}

// repriseFrame is one script frame: its due time since the join and what the
// rewriter needs.
type repriseFrame struct {
	typ   wire.Type
	bytes []byte
	// template marks frames whose bytes differ per client (join, targets,
	// payload ids); tmpl is then their index in repriseEncoded.own.
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

// errNoJoin means the flow has no join frame, so there is nothing to replay.
var errNoJoin = errors.New("session: the flow has no join frame")

// newRepriseScript builds a script from a flow's client frames. Frames before the first
// join and from the first leave on are dropped (the fleet joins and leaves
// by itself), with a note saying so.
func newRepriseScript(in []session.Frame, opts repriseOptions) (*repriseScript, error) {
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
	s := &repriseScript{ids: map[string]int{}, rewritePayload: opts.RewritePayload}
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
	tl, err := session.NewTimeline(session.TimelineInput{Flow: flow, First: first, Last: last, FirstSend: firstSend, Loop: opts.Loop, Speed: speed, End: opts.End})
	if err != nil {
		return nil, err
	}
	s.Timeline = tl
	return s, nil
}

// decodeFrames decodes in[first:last) (from the first join to before the
// first leave) into s.frames and returns that range.
func (s *repriseScript) decodeFrames(in []session.Frame, maxFrame int, speed float64) (first, last int, err error) {
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
		s.frames = append(s.frames, decodedFrame(&f, fr.Bytes))
	}
	if first < 0 {
		return 0, 0, errNoJoin
	}
	return first, len(in), nil
}

// decodedFrame copies what the rewriter needs out of f (whose slices alias b).
func decodedFrame(f *wire.Frame, b []byte) repriseFrame {
	fr := repriseFrame{typ: f.Type, bytes: b}
	switch f.Type {
	case wire.TypeJoin:
		fr.authLen, fr.padding = len(f.Auth), f.Padding
	case wire.TypeSend:
		fr.mode, fr.hasTrace, fr.trace, fr.payload = f.Mode, f.HasTrace, f.Trace, f.Payload
		f.Targets(func(id []byte) { fr.targets = append(fr.targets, string(id)) })
	}
	return fr
}

func (s *repriseScript) findOthers() {
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
func (s *repriseScript) markTemplates() {
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
func (s *repriseScript) Type(i int) wire.Type { return s.frames[i].typ }

// Mode is frame i's cast mode (a send's).
func (s *repriseScript) Mode(i int) wire.Mode { return s.frames[i].mode }

// RoomWide reports whether frame i is a traced broadcast or othercast:
// a send every other member receives, so its stamp can carry a sequence
// that receivers check for gaps.
func (s *repriseScript) RoomWide(i int) bool {
	f := &s.frames[i]
	return f.typ == wire.TypeSend && f.hasTrace && (f.mode == wire.Broadcast || f.mode == wire.Othercast)
}

// repriseIdentity is who one replayed client is.
type repriseIdentity struct {
	// User replaces the recorded user id.
	User string
	// Room replaces the recorded room; empty keeps it.
	Room string
	// Peers[k] replaces the recorded other user Others[k]. They must be
	// distinct and differ from User, so the mapping stays one-to-one.
	Peers []string
	// Auth is the join's auth token (nil: none).
	Auth []byte
	// JoinSize pads the join frame to at least this many bytes (UDP: the
	// datagram size wire.UDPJoinPad minus the token).
	JoinSize int
}

// repriseEncoded holds one client's bytes for the script frames that differ per
// client; every other frame is shared with all clients.
type repriseEncoded struct {
	own [][]byte
	// zeros are the trailing zero bytes of each own frame that are not
	// stored (a UDP join's padding: about 1 KiB per client otherwise held
	// for the whole run); AppendFrame writes them.
	zeros []int
}

// Encode rewrites the first n script frames (Plan.Frames) for id. It is
// called once per client; AppendFrame then copies bytes without allocating.
func (s *repriseScript) Encode(id repriseIdentity, n int) (*repriseEncoded, error) {
	if err := s.checkIdentity(id); err != nil {
		return nil, err
	}
	var repl *strings.Replacer
	if s.rewritePayload {
		repl = s.replacer(id)
	}
	e := &repriseEncoded{}
	for i := 0; i < n && i < len(s.frames); i++ {
		f := &s.frames[i]
		if !f.template {
			continue
		}
		var b []byte
		pad := 0
		switch f.typ {
		case wire.TypeJoin:
			b, pad = s.encodeJoin(f, id)
		default:
			b = s.encodeSend(f, id, repl)
		}
		if len(b)-wire.LenSize > wire.DefaultMaxFrame {
			return nil, fmt.Errorf("session: frame #%d for %s: %d bytes after rewriting, over the max frame", i, id.User, len(b))
		}
		if pad > 0 {
			b = append([]byte(nil), b[:len(b)-pad]...)
		}
		e.own = append(e.own, b)
		e.zeros = append(e.zeros, pad)
	}
	return e, nil
}

func (s *repriseScript) checkIdentity(id repriseIdentity) error {
	if err := wire.CheckID("user id", id.User); err != nil {
		return fmt.Errorf("session: %w", err)
	}
	if id.Room != "" {
		if err := wire.CheckID("room", id.Room); err != nil {
			return fmt.Errorf("session: %w", err)
		}
	}
	if len(id.Peers) < len(s.Others) {
		return fmt.Errorf("session: %s has %d peers for %d recorded other users", id.User, len(id.Peers), len(s.Others))
	}
	seen := map[string]bool{id.User: true}
	for _, p := range id.Peers[:len(s.Others)] {
		if err := wire.CheckID("peer id", p); err != nil {
			return fmt.Errorf("session: %w", err)
		}
		if seen[p] {
			return fmt.Errorf("session: peer %q of %s is used twice: the id mapping must be one-to-one", p, id.User)
		}
		seen[p] = true
	}
	return nil
}

// mapID is the replacement of a recorded id (self or other).
func (s *repriseScript) mapID(id repriseIdentity, recorded string) string {
	k, ok := s.ids[recorded]
	switch {
	case !ok:
		return recorded
	case k == 0:
		return id.User
	default:
		return id.Peers[k-1]
	}
}

// encodeJoin returns the join for id and how many zero bytes of padding
// end it.
func (s *repriseScript) encodeJoin(f *repriseFrame, id repriseIdentity) ([]byte, int) {
	room := id.Room
	if room == "" {
		room = s.RecordedRoom
	}
	unpadded := len(wire.AppendJoin(nil, room, id.User, id.Auth, 0))
	pad := max(f.padding, id.JoinSize-unpadded, 0)
	return wire.AppendJoin(make([]byte, 0, unpadded+pad), room, id.User, id.Auth, pad), pad
}

func (s *repriseScript) encodeSend(f *repriseFrame, id repriseIdentity, repl *strings.Replacer) []byte {
	m := wire.Send{Mode: f.mode, HasTrace: f.hasTrace, Trace: f.trace, Payload: f.payload}
	for _, t := range f.targets {
		m.Targets = append(m.Targets, s.mapID(id, t))
	}
	if repl != nil {
		m.Payload = []byte(repl.Replace(string(f.payload)))
	}
	return wire.AppendSend(nil, m)
}

// replacer maps every recorded id to id's, longest first so that "bob"
// inside "bobby" is not rewritten when "bobby" is an id too.
func (s *repriseScript) replacer(id repriseIdentity) *strings.Replacer {
	olds := make([]string, 0, len(s.ids))
	for r := range s.ids {
		olds = append(olds, r)
	}
	sort.Slice(olds, func(i, j int) bool {
		if len(olds[i]) != len(olds[j]) {
			return len(olds[i]) > len(olds[j])
		}
		return olds[i] < olds[j]
	})
	pairs := make([]string, 0, 2*len(olds))
	for _, o := range olds {
		pairs = append(pairs, o, s.mapID(id, o))
	}
	return strings.NewReplacer(pairs...)
}

func (s *repriseScript) payloadHasID(p []byte) bool {
	for id := range s.ids {
		if bytes.Contains(p, []byte(id)) {
			return true
		}
	}
	return false
}

// AppendFrame appends client e's bytes of script frame i to dst, with the
// send's trace timestamp or the heartbeat's timestamp set to now (Unix
// nanoseconds). It allocates only if dst must grow.
func (s *repriseScript) AppendFrame(dst []byte, e *repriseEncoded, i int, now int64) []byte {
	f := &s.frames[i]
	b, zeros := f.bytes, 0
	if f.template {
		b, zeros = e.own[f.tmpl], e.zeros[f.tmpl]
	}
	start := len(dst)
	dst = append(dst, b...)
	if zeros > 0 {
		dst = append(dst, make([]byte, zeros)...) // no allocation beyond dst's growth
	}
	switch {
	case f.typ == wire.TypeSend && f.hasTrace:
		// A send's trace sits right after its flags byte.
		binary.BigEndian.PutUint64(dst[start+wire.HeaderSize+1:], uint64(now))
	case f.typ == wire.TypeHeartbeat:
		binary.BigEndian.PutUint64(dst[start+wire.HeaderSize:], uint64(now))
	}
	return dst
}

// FrameLen is the size of client e's bytes of frame i.
func (s *repriseScript) FrameLen(e *repriseEncoded, i int) int {
	if f := &s.frames[i]; f.template {
		return len(e.own[f.tmpl]) + e.zeros[f.tmpl]
	}
	return len(s.frames[i].bytes)
}
