package profile

import (
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/session"
)

// TestSuggestedLoopKeepsTheRhythm: a 20 Hz recording's suggested loop
// starts at the first send exactly (not rounded to before it) and ends one
// period after the last, so a replay wraps 50 ms after the last send, at
// 20 Hz, not 1 ms later.
func TestSuggestedLoopKeepsTheRhythm(t *testing.T) {
	var msgs []Message
	for i := 0; i < 20; i++ {
		msgs = append(msgs, Message{Offset: 172456789*time.Nanosecond + time.Duration(i)*50*time.Millisecond})
	}
	got := suggestLoop(msgs)
	if want := "172.456ms,1.172456s"; got != want {
		t.Fatalf("loop %s, want %s", got, want)
	}
	l, _, err := session.ParseLoop(got)
	if err != nil {
		t.Fatal(err)
	}
	if l.A.Offset > msgs[0].Offset || l.B.Offset-l.A.Offset != 20*50*time.Millisecond {
		t.Fatalf("loop %v..%v: starts after the first send or lasts %v, not 20 periods", l.A.Offset, l.B.Offset, l.B.Offset-l.A.Offset)
	}
}
