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
