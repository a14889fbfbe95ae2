package session

import (
	"strings"
	"testing"
	"time"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestParseLoop(t *testing.T) {
	tests := []struct {
		in      string
		want    Loop
		ok      bool
		wantErr string
	}{
		{"", Loop{}, false, ""},
		{"12s,48s", Loop{A: Point{Offset: 12 * time.Second}, B: Point{Offset: 48 * time.Second}}, true, ""},
		{"1m30s, 2m", Loop{A: Point{Offset: 90 * time.Second}, B: Point{Offset: 120 * time.Second}}, true, ""},
		{"#120,#900", Loop{A: Point{Index: 120, IsIndex: true}, B: Point{Index: 900, IsIndex: true}}, true, ""},
		{"#3,5s", Loop{A: Point{Index: 3, IsIndex: true}, B: Point{Offset: 5 * time.Second}}, true, ""},
		{"12s", Loop{}, false, "want A,B"},
		{"48s,12s", Loop{}, false, "B must come after A"},
		{"#5,#5", Loop{}, false, "B must come after A"},
		{"#x,#5", Loop{}, false, "frame index"},
		{"-1s,5s", Loop{}, false, "negative"},
		{"soon,later", Loop{}, false, "want an offset"},
	}
	for _, tt := range tests {
		got, ok, err := ParseLoop(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseLoop(%q) error %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || ok != tt.ok || got != tt.want {
			t.Errorf("ParseLoop(%q) = %+v, %v, %v; want %+v, %v", tt.in, got, ok, err, tt.want, tt.ok)
		}
	}
}

// TestLoopValue: --loop parses when set; a bad value is the flag's error
// and keeps the previous value.
func TestLoopValue(t *testing.T) {
	var text string
	var pts *Loop
	v := LoopValue{Text: &text, Points: &pts}
	if err := v.Set("12s,#40"); err != nil || pts == nil || pts.A.Offset != 12*time.Second || !pts.B.IsIndex || pts.B.Index != 40 || v.String() != "12s,#40" {
		t.Fatalf("Set: %v %+v %q", err, pts, text)
	}
	if err := v.Set("5s"); err == nil || !strings.Contains(err.Error(), "want A,B") || v.String() != "12s,#40" {
		t.Fatalf("bad loop: %v, kept %q", err, text)
	}
	if err := v.Set(""); err != nil || pts != nil || v.Type() != "A,B" {
		t.Fatalf("empty: %v %+v", err, pts)
	}
}

// TestReceiveOnlyPlanNoLoginFrames: a login that sends nothing (a
// WebSocket upgrade that is the join, the first message already a send)
// gives a receive-only client no frame to play and heartbeats from the
// join; it panicked on an index of -1.
func TestReceiveOnlyPlanNoLoginFrames(t *testing.T) {
	tl, err := NewTimeline(TimelineInput{Flow: []time.Duration{ms(1), ms(51), ms(101)}, Last: 3, FirstSend: 0,
		Loop: &Loop{A: Point{Index: 1, IsIndex: true}, B: Point{Index: 2, IsIndex: true}}})
	if err != nil {
		t.Fatal(err)
	}
	p := tl.ReceiveOnlyPlan(time.Second)
	if got := p.Frames(); got != 0 {
		t.Errorf("Frames = %d, want 0", got)
	}
	for n, want := range []Step{{Frame: Heartbeat, Due: time.Second}, {Frame: Heartbeat, Due: 2 * time.Second}} {
		if got := p.Step(int64(n)); got != want {
			t.Errorf("Step(%d) = %+v, want %+v", n, got, want)
		}
	}
}

// TestReceiveOnlyHeartbeatAfterHandshake: a receive-only client's first
// heartbeat is one interval after the last handshake frame it plays, at
// that frame's recorded offset (a keepalive counts from the last packet
// sent), however late the recording put it: a SUBSCRIBE recorded 1.5 s
// after the CONNECT gives a first heartbeat at 2.5 s, not 1 s.
func TestReceiveOnlyHeartbeatAfterHandshake(t *testing.T) {
	// CONNECT at 0, SUBSCRIBE at 1.5 s, the first PUBLISH (a send) at 1.7 s.
	tl, err := NewTimeline(TimelineInput{Flow: []time.Duration{ms(0), ms(1500), ms(1700)}, Last: 3, FirstSend: 2})
	if err != nil {
		t.Fatal(err)
	}
	p := tl.ReceiveOnlyPlan(time.Second)
	want := []Step{{Frame: 0}, {Frame: 1, Due: ms(1500)}, {Frame: Heartbeat, Due: ms(2500)}, {Frame: Heartbeat, Due: ms(3500)}}
	for n, w := range want {
		if got := p.Step(int64(n)); got != w {
			t.Errorf("Step(%d) = %+v, want %+v", n, got, w)
		}
	}
	if got := p.DueBy(ms(2499)); got != 2 {
		t.Errorf("DueBy(2.499 s) = %d, want 2 (no heartbeat before 2.5 s)", got)
	}
}

// TestPlanUntil: a plan cut at d plays the steps due by d, then a
// Handover due at d, then ends, whether it loops, heartbeats, ends
// before d or has no step at all; DueBy agrees with Step.
func TestPlanUntil(t *testing.T) {
	// Messages at 0, 50, 100 ms; loop [50, 100] (period 50 ms).
	loop := &Loop{A: Point{Index: 1, IsIndex: true}, B: Point{Index: 2, IsIndex: true}}
	tl, err := NewTimeline(TimelineInput{Flow: []time.Duration{ms(0), ms(50), ms(100)}, Last: 3, FirstSend: 1, Loop: loop})
	if err != nil {
		t.Fatal(err)
	}
	once, err := NewTimeline(TimelineInput{Flow: []time.Duration{ms(0), ms(50), ms(100)}, Last: 3, FirstSend: 1})
	if err != nil {
		t.Fatal(err)
	}
	ho := func(d time.Duration) Step { return Step{End: true, Frame: Handover, Due: d} }
	for _, tc := range []struct {
		name string
		p    Plan
		want []Step
	}{
		{"looping", tl.Plan(0).Until(ms(160)), []Step{{Frame: 0}, {Frame: 1, Due: ms(50)}, {Frame: 1, Due: ms(100), Loops: 1}, {Frame: 1, Due: ms(150), Loops: 2}, ho(ms(160)), ho(ms(160))}},
		{"played once, then heartbeats", once.Plan(ms(40)).Until(ms(185)), []Step{{Frame: 0}, {Frame: 1, Due: ms(50)}, {Frame: 2, Due: ms(100)}, {Frame: Heartbeat, Due: ms(140)}, {Frame: Heartbeat, Due: ms(180)}, ho(ms(185)), ho(ms(185))}},
		{"ended before the cut", once.Plan(0).Until(time.Second), []Step{{Frame: 0}, {Frame: 1, Due: ms(50)}, {Frame: 2, Due: ms(100)}, ho(time.Second), ho(time.Second)}},
		{"cut on a step", once.Plan(0).Until(ms(50)), []Step{{Frame: 0}, {Frame: 1, Due: ms(50)}, ho(ms(50)), ho(ms(50))}},
		{"receive-only, no heartbeat", once.ReceiveOnlyPlan(0).Until(ms(70)), []Step{{Frame: 0}, ho(ms(70)), ho(ms(70))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for n, want := range tc.want {
				if got := tc.p.Step(int64(n)); got != want {
					t.Errorf("Step(%d) = %+v, want %+v", n, got, want)
				}
			}
			// DueBy counts the steps whose due has come, never past the
			// cut.
			for _, at := range []time.Duration{0, ms(49), ms(50), ms(120), ms(500), time.Hour} {
				var n int64
				for n < int64(len(tc.want)) && !tc.want[n].End && tc.want[n].Due <= at {
					n++
				}
				if got := tc.p.DueBy(at); got != n {
					t.Errorf("DueBy(%v) = %d, want %d", at, got, n)
				}
			}
		})
	}
}
