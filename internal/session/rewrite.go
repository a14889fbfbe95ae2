package session

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Identity is who one replayed client is.
type Identity struct {
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

// Encoded holds one client's bytes for the script frames that differ per
// client; every other frame is shared with all clients.
type Encoded struct {
	own [][]byte
	// zeros are the trailing zero bytes of each own frame that are not
	// stored (a UDP join's padding: about 1 KiB per client otherwise held
	// for the whole run); AppendFrame writes them.
	zeros []int
}

// Encode rewrites the first n script frames (Plan.Frames) for id. It is
// called once per client; AppendFrame then copies bytes without allocating.
func (s *Script) Encode(id Identity, n int) (*Encoded, error) {
	if err := s.checkIdentity(id); err != nil {
		return nil, err
	}
	var repl *strings.Replacer
	if s.rewritePayload {
		repl = s.replacer(id)
	}
	e := &Encoded{}
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

func (s *Script) checkIdentity(id Identity) error {
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
func (s *Script) mapID(id Identity, recorded string) string {
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
func (s *Script) encodeJoin(f *frame, id Identity) ([]byte, int) {
	room := id.Room
	if room == "" {
		room = s.RecordedRoom
	}
	unpadded := len(wire.AppendJoin(nil, room, id.User, id.Auth, 0))
	pad := max(f.padding, id.JoinSize-unpadded, 0)
	return wire.AppendJoin(make([]byte, 0, unpadded+pad), room, id.User, id.Auth, pad), pad
}

func (s *Script) encodeSend(f *frame, id Identity, repl *strings.Replacer) []byte {
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
func (s *Script) replacer(id Identity) *strings.Replacer {
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

func (s *Script) payloadHasID(p []byte) bool {
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
func (s *Script) AppendFrame(dst []byte, e *Encoded, i int, now int64) []byte {
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
func (s *Script) FrameLen(e *Encoded, i int) int {
	if f := &s.frames[i]; f.template {
		return len(e.own[f.tmpl]) + e.zeros[f.tmpl]
	}
	return len(s.frames[i].bytes)
}
