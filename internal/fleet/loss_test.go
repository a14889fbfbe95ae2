package fleet

import (
	"testing"
	"time"
)

func TestLossPercent(t *testing.T) {
	for _, tt := range []struct {
		recv, lost int64
		want       float64
	}{{0, 0, 0}, {100, 0, 0}, {99, 1, 1}, {0, 5, 100}, {10, -2, 0}} {
		if got := lossPercent(tt.recv, tt.lost); got != tt.want {
			t.Errorf("lossPercent(%d, %d) = %v, want %v", tt.recv, tt.lost, got, tt.want)
		}
	}
}

func TestJoinRetryBacksOffWithinTheLoginTimeout(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := newJoinRetry(now.Add(10*time.Second), nil)
	var waits []time.Duration
	for t0 := now; ; {
		d := r.readDeadline(t0)
		waits = append(waits, d.Sub(t0))
		if d.After(r.deadline) {
			t.Fatalf("read deadline %v past the login deadline", d)
		}
		if !r.again(d) {
			break
		}
		t0 = d
	}
	if len(waits) < 6 || len(waits) > 12 {
		t.Fatalf("%d tries in 10 s (waits %v); want the join sent 6-12 times", len(waits), waits)
	}
	if w := waits[0]; w < 200*time.Millisecond || w > 300*time.Millisecond {
		t.Errorf("first wait %v, want 250 ms ±20%%", w)
	}
	for _, w := range waits[:len(waits)-1] {
		if w > joinRetryMax*12/10 {
			t.Errorf("wait %v over the %v cap (+20%%)", w, joinRetryMax)
		}
	}
}
