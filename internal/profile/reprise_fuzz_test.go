package profile

import (
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

// FuzzRepriseScript builds scripts from arbitrary frame bytes and loop points:
// newRepriseScript
// must return an error or a script whose plan steps stay in range.
func FuzzRepriseScript(f *testing.F) {
	join := wire.AppendJoin(nil, "lobby", "alice", nil, 0)
	send := wire.AppendSend(nil, wire.Send{Mode: wire.Unicast, Targets: []string{"bob"}, Payload: []byte("alice")})
	f.Add(append(append([]byte{}, join...), send...), uint8(10), "5ms,25ms")
	f.Add(join, uint8(0), "")
	f.Fuzz(func(t *testing.T, data []byte, gap uint8, loop string) {
		var in []session.Frame
		for i := 0; len(data) > 0 && i < 64; i++ {
			n := wire.FrameLen(data)
			if n <= 0 || n > len(data) {
				n = len(data)
			}
			in = append(in, session.Frame{Offset: time.Duration(i) * time.Duration(gap) * time.Millisecond, Bytes: data[:n]})
			data = data[n:]
		}
		l, ok, err := session.ParseLoop(loop)
		opts := repriseOptions{RewritePayload: true}
		if err == nil && ok {
			opts.Loop = &l
		}
		s, err := newRepriseScript(in, opts)
		if err != nil {
			return
		}
		peers := make([]string, len(s.Others))
		for i := range peers {
			peers[i] = "peer-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		}
		p := s.Plan(time.Second)
		e, err := s.Encode(repriseIdentity{User: "me", Peers: peers}, p.Frames())
		if err != nil {
			return
		}
		var buf []byte
		for n := int64(0); n < 50; n++ {
			st := p.Step(n)
			if st.End || st.Frame == session.Heartbeat {
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
