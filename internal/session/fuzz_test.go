package session

import (
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

// FuzzParseLoop checks that any --loop text parses or errors, never panics,
// and that a parsed loop has B after A when both are of one kind.
func FuzzParseLoop(f *testing.F) {
	for _, s := range []string{"12s,48s", "#120,#900", "1m30s,#5", ",", "#-1,2s", "1h,1ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, ok, err := ParseLoop(s)
		if err != nil || !ok {
			return
		}
		if l.A.IsIndex == l.B.IsIndex && (l.B.Offset < l.A.Offset || l.B.Index < l.A.Index) {
			t.Fatalf("ParseLoop(%q) = %+v: B before A", s, l)
		}
	})
}

// FuzzNew builds scripts from arbitrary frame bytes and loop points: New
// must return an error or a script whose plan steps stay in range.
func FuzzNew(f *testing.F) {
	join := wire.AppendJoin(nil, "lobby", "alice", nil, 0)
	send := wire.AppendSend(nil, wire.Send{Mode: wire.Unicast, Targets: []string{"bob"}, Payload: []byte("alice")})
	f.Add(append(append([]byte{}, join...), send...), uint8(10), "5ms,25ms")
	f.Add(join, uint8(0), "")
	f.Fuzz(func(t *testing.T, data []byte, gap uint8, loop string) {
		var in []Frame
		for i := 0; len(data) > 0 && i < 64; i++ {
			n := wire.FrameLen(data)
			if n <= 0 || n > len(data) {
				n = len(data)
			}
			in = append(in, Frame{Offset: time.Duration(i) * time.Duration(gap) * time.Millisecond, Bytes: data[:n]})
			data = data[n:]
		}
		l, ok, err := ParseLoop(loop)
		opts := Options{RewritePayload: true}
		if err == nil && ok {
			opts.Loop = &l
		}
		s, err := New(in, opts)
		if err != nil {
			return
		}
		peers := make([]string, len(s.Others))
		for i := range peers {
			peers[i] = "peer-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		}
		p := s.Plan(time.Second)
		e, err := s.Encode(Identity{User: "me", Peers: peers}, p.Frames())
		if err != nil {
			return
		}
		var buf []byte
		for n := int64(0); n < 50; n++ {
			st := p.Step(n)
			if st.End || st.Frame == Heartbeat {
				break
			}
			buf = s.AppendFrame(buf[:0], e, st.Frame, n)
			var fr wire.Frame
			if _, err := wire.Decode(buf, wire.DefaultMaxFrame, &fr); err != nil {
				t.Fatalf("step %d: rewritten frame does not decode: %v", n, err)
			}
		}
	})
}
