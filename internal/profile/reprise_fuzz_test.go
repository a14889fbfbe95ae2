package profile

import (
	"slices"
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

// FuzzUDPDeliveries: a logged-in UDP client accounts a datagram through
// the deliveries loop, as a stream read's, exactly as the frame-by-frame
// decode it replaced does (datagramFrames on the whole datagram): the
// same counts, losses, latencies and skips, for any bytes, fed twice (the
// second time as duplicates and gaps for the loss tracking).
func FuzzUDPDeliveries(f *testing.F) {
	at := int64(1_700_000_000_000_000_000)
	var two []byte
	two = wire.AppendDeliver(two, wire.Broadcast, "bob", true, stampSeq(at, 1), []byte("hi"))
	two = wire.AppendDeliver(two, wire.Othercast, "carol", true, stampSeq(at, 7), nil)
	f.Add(two)
	f.Add(append(append([]byte{}, two...), 0xff, 0x00, 0x01))                                      // a tail that is not a frame
	f.Add(wire.AppendDeliver(nil, wire.Unicast, "dave", false, 0, []byte("x")))                    // untraced, not a cast
	f.Add(append(wire.AppendHeartbeat(nil, at), two...))                                           // a frame before the deliveries
	f.Add(append(append([]byte{}, two...), wire.AppendError(nil, wire.ErrRateLimited, "slow")...)) // and after
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ref := udpJoined(), udpJoined()
		now := at + int64(time.Millisecond)
		for round := range 2 {
			var got, want Events
			errGot := fast.Feed(data, now, &got)
			errWant := ref.datagramFrames(data, now, &want)
			if (errGot == nil) != (errWant == nil) {
				t.Fatalf("round %d: error %v, frame by frame %v", round, errGot, errWant)
			}
			if g, w := eventCounts(&got), eventCounts(&want); g != w {
				t.Fatalf("round %d: %+v, frame by frame %+v", round, g, w)
			}
			if !slices.Equal(got.Latencies, want.Latencies) {
				t.Fatalf("round %d: latencies %v, frame by frame %v", round, got.Latencies, want.Latencies)
			}
		}
	})
}

// udpJoined is a UDP client of its own room table, logged in and
// confirmed.
func udpJoined() *repriseClient {
	r := newReprise(&repriseScript{}, true)
	return &repriseClient{r: r, joined: true, p: wire.Parser{MaxFrame: r.MaxFrame}, seqs: roomSeqs{t: r.senders.room("lobby")}}
}

// udpEventCounts is what a datagram's Events say, comparable.
type udpEventCounts struct {
	Frames, Messages, Skipped, Casts, Numbered, Lost int64
	SkipReason, Error, Failed                        string
	LoggedIn, Confirmed                              bool
}

func eventCounts(ev *Events) udpEventCounts {
	return udpEventCounts{ev.Frames, ev.Messages, ev.Skipped, ev.Casts, ev.Numbered, ev.Lost, ev.SkipReason, ev.Error, ev.Failed, ev.LoggedIn, ev.Confirmed}
}
