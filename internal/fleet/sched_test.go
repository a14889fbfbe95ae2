package fleet

import "testing"

// TestNudge: a reader wakes a scheduler only once it sleeps more than
// nudgeSlack past its due time, and of several readers only the first
// sends the wake-up.
func TestNudge(t *testing.T) {
	const due = int64(1_000_000)
	tests := []struct {
		name      string
		sleeping  int64 // sleepUntil
		now       int64
		wantWake  bool
		wantUntil int64
	}{
		{"running scheduler", never, due, false, never},
		{"not due yet", due, due - 1, false, due},
		{"due within the slack", due, due + nudgeSlack, false, due},
		{"overdue", due, due + nudgeSlack + 1, true, never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &Fleet{}
			s := newShard(f, &counters{}, newHists())
			f.shards = []*shard{s}
			s.sleepUntil.Store(tt.sleeping)
			f.nudge(tt.now)
			f.nudge(tt.now) // a second reader
			woke := len(s.wake) == 1
			if woke != tt.wantWake || s.sleepUntil.Load() != tt.wantUntil {
				t.Errorf("woke %v sleepUntil %d, want %v and %d", woke, s.sleepUntil.Load(), tt.wantWake, tt.wantUntil)
			}
		})
	}
}
