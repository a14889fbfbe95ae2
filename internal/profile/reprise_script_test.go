package profile

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

func msDur(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// recording is a small recorded session of "alice" in room "lobby": a join,
// a heartbeat, then poses every 100 ms, a unicast to bob, a manycast to bob
// and carol, and a leave at the end.
func repriseRecording() []session.Frame {
	pose := func(at int) session.Frame {
		return session.Frame{Offset: msDur(at), Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: 42, Payload: []byte("pose alice")})}
	}
	return []session.Frame{
		{Offset: msDur(0), Bytes: wire.AppendHeartbeat(nil, 1)},                    // #0 before the join: dropped
		{Offset: msDur(10), Bytes: wire.AppendJoin(nil, "lobby", "alice", nil, 0)}, // #1
		{Offset: msDur(20), Bytes: wire.AppendHeartbeat(nil, 2)},                   // #2
		pose(110), // #3
		pose(210), // #4
		{Offset: msDur(250), Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Unicast, Targets: []string{"bob"}, Payload: []byte("to bob from alice")})}, // #5
		pose(310), // #6
		{Offset: msDur(350), Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Manycast, Targets: []string{"bob", "carol"}, Payload: []byte("x")})}, // #7
		pose(410), // #8
		{Offset: msDur(500), Bytes: wire.AppendLeave(nil)},        // #9: dropped
		{Offset: msDur(600), Bytes: wire.AppendHeartbeat(nil, 3)}, // #10: dropped
	}
}

func mustRepriseScript(t *testing.T, loop string, speed float64, rewrite bool) *repriseScript {
	t.Helper()
	var lp *session.Loop
	if loop != "" {
		l, ok, err := session.ParseLoop(loop)
		if err != nil || !ok {
			t.Fatalf("session.ParseLoop(%q): %v", loop, err)
		}
		lp = &l
	}
	s, err := newRepriseScript(repriseRecording(), repriseOptions{Loop: lp, Speed: speed, RewritePayload: rewrite})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func TestNewScript(t *testing.T) {
	s := mustRepriseScript(t, "", 1, false)
	if s.RecordedUser != "alice" || s.RecordedRoom != "lobby" {
		t.Errorf("recorded %q in %q, want alice in lobby", s.RecordedUser, s.RecordedRoom)
	}
	if got := strings.Join(s.Others, ","); got != "bob,carol" {
		t.Errorf("Others = %s, want bob,carol", got)
	}
	if s.Len() != 8 {
		t.Errorf("Len = %d, want 8 (join to before the leave)", s.Len())
	}
	if s.LoginEnd() != 2 {
		t.Errorf("LoginEnd = %d, want 2 (join, heartbeat)", s.LoginEnd())
	}
	if len(s.Notes) != 2 {
		t.Errorf("Notes = %q, want the dropped prefix and the dropped leave", s.Notes)
	}
}

func TestNewErrors(t *testing.T) {
	loop := func(s string) *session.Loop { l, _, _ := session.ParseLoop(s); return &l }
	join := session.Frame{Offset: 0, Bytes: wire.AppendJoin(nil, "r", "u", nil, 0)}
	send := session.Frame{Offset: msDur(10), Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast, Payload: []byte("p")})}
	tests := []struct {
		name    string
		in      []session.Frame
		opts    repriseOptions
		wantErr string
	}{
		{"no join", []session.Frame{send}, repriseOptions{}, "no join"},
		{"garbage", []session.Frame{{Offset: 0, Bytes: []byte{0, 0, 0, 1, 0x77}}}, repriseOptions{}, "unknown_type"},
		{"trailing", []session.Frame{{Offset: 0, Bytes: append(wire.AppendLeave(nil), 1)}}, repriseOptions{}, "trailing"},
		{"two joins", []session.Frame{join, {Offset: msDur(5), Bytes: join.Bytes}}, repriseOptions{}, "second join"},
		{"backwards", []session.Frame{join, send, {Offset: msDur(5), Bytes: send.Bytes}}, repriseOptions{}, "backwards"},
		{"loop at join", []session.Frame{join, send}, repriseOptions{Loop: loop("0s,10ms")}, "before the join"},
		{"empty loop", []session.Frame{join, send, {Offset: msDur(30), Bytes: send.Bytes}}, repriseOptions{Loop: loop("12ms,20ms")}, "no frames"},
		{"time past the flow", []session.Frame{join, send}, repriseOptions{Loop: loop("1ms,100s")}, "past the flow's end at 20ms"},
		{"start past the flow", []session.Frame{join, send}, repriseOptions{Loop: loop("1s,2s")}, "past the flow's end at 20ms"},
		{"past the recorded end", []session.Frame{join, send}, repriseOptions{Loop: loop("5ms,3s"), End: 2 * time.Second}, "past the flow's end at 2s"},
		{"index out", []session.Frame{join, send}, repriseOptions{Loop: loop("#1,#9")}, "outside"},
		{"negative speed", []session.Frame{join}, repriseOptions{Speed: -1}, "positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newRepriseScript(tt.in, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// The kept frames of repriseRecording() are, by script index and due time since
// the join at 10 ms: 0 join @0, 1 hb @10, 2 pose @100, 3 pose @200,
// 4 unicast @240, 5 pose @300, 6 manycast @340, 7 pose @400.

func TestPlanLoop(t *testing.T) {
	// session.Loop 150ms,350ms: A = the pose at 210 (script #3), B before the
	// manycast at 350; period 200 ms.
	s := mustRepriseScript(t, "150ms,350ms", 1, false)
	p := s.Plan(time.Minute)
	if a, b := s.LoopRange(); a != 3 || b != 6 {
		t.Fatalf("LoopRange = %d,%d, want 3,6", a, b)
	}
	tests := []struct {
		n    int64
		want session.Step
	}{
		{0, session.Step{Frame: 0, Due: 0}},
		{1, session.Step{Frame: 1, Due: msDur(10)}},
		{2, session.Step{Frame: 2, Due: msDur(100)}},
		{3, session.Step{Frame: 3, Due: msDur(200)}},
		{4, session.Step{Frame: 4, Due: msDur(240)}},
		{5, session.Step{Frame: 5, Due: msDur(300)}},
		{6, session.Step{Frame: 3, Due: msDur(400), Loops: 1}},
		{8, session.Step{Frame: 5, Due: msDur(500), Loops: 1}},
		{9, session.Step{Frame: 3, Due: msDur(600), Loops: 2}},
		{3 + 3*1000, session.Step{Frame: 3, Due: msDur(200 + 200*1000), Loops: 1000}},
	}
	for _, tt := range tests {
		if got := p.Step(tt.n); got != tt.want {
			t.Errorf("Step(%d) = %+v, want %+v", tt.n, got, tt.want)
		}
	}
	if got := p.Frames(); got != 6 {
		t.Errorf("Frames = %d, want 6", got)
	}
}

func TestPlanSpeed(t *testing.T) {
	s := mustRepriseScript(t, "150ms,350ms", 2, false)
	p := s.Plan(time.Minute)
	for _, tt := range []struct {
		n   int64
		due time.Duration
	}{{1, msDur(5)}, {3, msDur(100)}, {6, msDur(200)}, {9, msDur(300)}} {
		if got := p.Step(tt.n).Due; got != tt.due {
			t.Errorf("speed 2: Step(%d).Due = %v, want %v", tt.n, got, tt.due)
		}
	}
}

func TestPlanIndexLoop(t *testing.T) {
	// #4,#7 in flow indexes: script frames 3..5, period 350−210 = 140ms.
	s := mustRepriseScript(t, "#4,#7", 1, false)
	p := s.Plan(0)
	if got := p.Step(6); got != (session.Step{Frame: 3, Due: msDur(340), Loops: 1}) {
		t.Errorf("Step(6) = %+v", got)
	}
}

func TestPlanOnceThenHeartbeat(t *testing.T) {
	s := mustRepriseScript(t, "", 1, false)
	p := s.Plan(time.Second)
	tests := []struct {
		n    int64
		want session.Step
	}{
		{7, session.Step{Frame: 7, Due: msDur(400)}},
		{8, session.Step{Frame: session.Heartbeat, Due: msDur(1400)}},
		{10, session.Step{Frame: session.Heartbeat, Due: msDur(3400)}},
	}
	for _, tt := range tests {
		if got := p.Step(tt.n); got != tt.want {
			t.Errorf("Step(%d) = %+v, want %+v", tt.n, got, tt.want)
		}
	}
	if got := s.Plan(0).Step(8); !got.End {
		t.Errorf("no heartbeat interval: Step(8) = %+v, want End", got)
	}
}

// TestReceiveOnlyPlan: a receive-only client plays the join and the
// heartbeat before the first send, none of the poses the recording sent
// before the loop start, and then only heartbeats.
func TestReceiveOnlyPlan(t *testing.T) {
	s := mustRepriseScript(t, "150ms,350ms", 1, false)
	p := s.ReceiveOnlyPlan(time.Minute)
	tests := []struct {
		n    int64
		want session.Step
	}{
		{0, session.Step{Frame: 0, Due: 0}},
		{1, session.Step{Frame: 1, Due: msDur(10)}},
		{2, session.Step{Frame: session.Heartbeat, Due: msDur(10) + time.Minute}},
		{3, session.Step{Frame: session.Heartbeat, Due: msDur(10) + 2*time.Minute}},
	}
	for _, tt := range tests {
		if got := p.Step(tt.n); got != tt.want {
			t.Errorf("Step(%d) = %+v, want %+v", tt.n, got, tt.want)
		}
	}
	if got := p.Frames(); got != 2 {
		t.Errorf("Frames = %d, want 2", got)
	}
}

// TestDueByMatchesStep checks the closed form against walking the steps.
func TestDueByMatchesStep(t *testing.T) {
	s := mustRepriseScript(t, "150ms,350ms", 1, false)
	for name, p := range map[string]session.Plan{
		"loop": s.Plan(0), "receive-only": s.ReceiveOnlyPlan(msDur(70)), "once": mustRepriseScript(t, "", 1, false).Plan(msDur(90)),
	} {
		for e := -msDur(1); e < 2*time.Second; e += msDur(7) {
			var want int64
			for p.Step(want).Due <= e && !p.Step(want).End {
				want++
			}
			if got := p.DueBy(e); got != want {
				t.Errorf("%s: DueBy(%v) = %d, want %d", name, e, got, want)
			}
		}
	}
}

func reprisePeersFor(n int) repriseIdentity {
	return repriseIdentity{User: "replay-0", Room: "room-0", Peers: []string{"replay-1", "replay-2"}}
}

func decodeWire(t *testing.T, b []byte) wire.Frame {
	t.Helper()
	var f wire.Frame
	if _, err := wire.Decode(b, wire.DefaultMaxFrame, &f); err != nil {
		t.Fatalf("decode %x: %v", b, err)
	}
	return f
}

func TestRewrite(t *testing.T) {
	s := mustRepriseScript(t, "", 1, false)
	id := reprisePeersFor(0)
	secret := []byte("s3cret")
	id.Auth = auth.Sign(secret, id.User, time.Now().Add(time.Hour))
	e, err := s.Encode(id, s.Len())
	if err != nil {
		t.Fatal(err)
	}
	join := decodeWire(t, s.AppendFrame(nil, e, 0, 0))
	if string(join.User) != "replay-0" || string(join.Room) != "room-0" {
		t.Errorf("join as %s in %s", join.User, join.Room)
	}
	if err := auth.Verify(secret, "replay-0", join.Auth, time.Now()); err != nil {
		t.Errorf("join token: %v", err)
	}
	uni := decodeWire(t, s.AppendFrame(nil, e, 4, 0))
	var targets []string
	uni.Targets(func(id []byte) { targets = append(targets, string(id)) })
	many := decodeWire(t, s.AppendFrame(nil, e, 6, 0))
	many.Targets(func(id []byte) { targets = append(targets, string(id)) })
	if got := strings.Join(targets, ","); got != "replay-1,replay-1,replay-2" {
		t.Errorf("targets %s, want bob→replay-1 in both and carol→replay-2", got)
	}
	if string(uni.Payload) != "to bob from alice" {
		t.Errorf("payload rewritten without --rewrite-payload: %q", uni.Payload)
	}
	// Frames without ids are shared bytes, not copies.
	if s.frames[2].template {
		t.Errorf("a pose frame was templated")
	}
}

func TestRewritePayload(t *testing.T) {
	s := mustRepriseScript(t, "", 1, true)
	e, err := s.Encode(reprisePeersFor(0), s.Len())
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeWire(t, s.AppendFrame(nil, e, 4, 0)).Payload; string(got) != "to replay-1 from replay-0" {
		t.Errorf("unicast payload %q", got)
	}
	if got := decodeWire(t, s.AppendFrame(nil, e, 2, 0)).Payload; string(got) != "pose replay-0" {
		t.Errorf("pose payload %q", got)
	}
}

// TestMappingOneToOne replays a room of clients and checks that each
// client's recorded-id mapping is a bijection from {alice, bob, carol}
// onto distinct fleet ids, the same for every frame.
func TestMappingOneToOne(t *testing.T) {
	s := mustRepriseScript(t, "", 1, false)
	members := []string{"replay-0", "replay-1", "replay-2", "replay-3"}
	for i, me := range members {
		var peers []string
		for k := 1; k < len(members); k++ {
			peers = append(peers, members[(i+k)%len(members)])
		}
		e, err := s.Encode(repriseIdentity{User: me, Peers: peers}, s.Len())
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for fi := 0; fi < s.Len(); fi++ {
			f := decodeWire(t, s.AppendFrame(nil, e, fi, 0))
			if f.Type == wire.TypeJoin {
				got["alice"] = string(f.User)
			}
			var ts []string
			f.Targets(func(id []byte) { ts = append(ts, string(id)) })
			for k, tgt := range ts {
				rec := []string{"bob", "carol"}[k]
				if prev, ok := got[rec]; ok && prev != tgt {
					t.Errorf("%s: %s mapped to both %s and %s", me, rec, prev, tgt)
				}
				got[rec] = tgt
			}
		}
		seen := map[string]bool{}
		for _, v := range got {
			if seen[v] {
				t.Errorf("%s: mapping %v is not one-to-one", me, got)
			}
			seen[v] = true
		}
		if got["alice"] != me || len(got) != 3 {
			t.Errorf("%s: mapping %v", me, got)
		}
	}
	if _, err := s.Encode(repriseIdentity{User: "a", Peers: []string{"b", "b"}}, s.Len()); err == nil {
		t.Error("Encode accepted a peer used twice")
	}
	if _, err := s.Encode(repriseIdentity{User: "a", Peers: []string{"b"}}, s.Len()); err == nil {
		t.Error("Encode accepted too few peers")
	}
}

func TestAppendFrameStamps(t *testing.T) {
	s := mustRepriseScript(t, "", 1, false)
	e, err := s.Encode(reprisePeersFor(0), s.Len())
	if err != nil {
		t.Fatal(err)
	}
	pose := decodeWire(t, s.AppendFrame(nil, e, 2, 777))
	if !pose.HasTrace || pose.Trace != 777 || string(pose.Payload) != "pose alice" {
		t.Errorf("pose: trace %v %d payload %q", pose.HasTrace, pose.Trace, pose.Payload)
	}
	if hb := decodeWire(t, s.AppendFrame(nil, e, 1, 888)); hb.Timestamp != 888 {
		t.Errorf("heartbeat timestamp %d", hb.Timestamp)
	}
	// The shared bytes were copied, not stamped in place.
	if binary.BigEndian.Uint64(s.frames[2].bytes[6:]) != 42 {
		t.Error("AppendFrame stamped the shared frame")
	}
	buf := make([]byte, 0, 256)
	if n := testing.AllocsPerRun(100, func() { buf = s.AppendFrame(buf[:0], e, 4, 1) }); n != 0 {
		t.Errorf("AppendFrame allocates %v times per call", n)
	}
}

func TestJoinPadding(t *testing.T) {
	s := mustRepriseScript(t, "", 1, false)
	id := reprisePeersFor(0)
	id.JoinSize = wire.UDPJoinPad - wire.TokenSize
	e, err := s.Encode(id, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := s.AppendFrame(nil, e, 0, 0)
	if len(b) != wire.UDPJoinPad-wire.TokenSize {
		t.Errorf("padded join is %d bytes", len(b))
	}
	if f := decodeWire(t, b); string(f.User) != "replay-0" || !bytes.Equal(f.Room, []byte("room-0")) {
		t.Errorf("padded join %s %s", f.User, f.Room)
	}
	if want := wire.AppendJoin(nil, "room-0", "replay-0", nil, len(b)-len(wire.AppendJoin(nil, "room-0", "replay-0", nil, 0))); !bytes.Equal(b, want) {
		t.Error("padded join differs from wire.AppendJoin's")
	}
	if s.FrameLen(e, 0) != len(b) {
		t.Errorf("FrameLen %d, AppendFrame wrote %d", s.FrameLen(e, 0), len(b))
	}
	// The padding is written, not held: each client keeps the join's
	// bytes only (1 KiB per UDP client otherwise).
	if held := len(e.own[0]); held >= 100 {
		t.Errorf("the client holds %d bytes of its join", held)
	}
	// Into a buffer with stale bytes, the padding is still zeros.
	stale := bytes.Repeat([]byte{0xff}, 2*len(b))
	if got := s.AppendFrame(stale[:0], e, 0, 0); !bytes.Equal(got, b) {
		t.Error("padding over a reused buffer is not zeros")
	}
}

func BenchmarkAppendFrame(b *testing.B) {
	s, err := newRepriseScript(repriseRecording(), repriseOptions{})
	if err != nil {
		b.Fatal(err)
	}
	e, err := s.Encode(reprisePeersFor(0), s.Len())
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = s.AppendFrame(buf[:0], e, 2+i%6, int64(i))
	}
}
