package finetimer

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// timers are the two kinds a test runs against: a timerfd where the
// kernel has one, and the Go timer a Timer falls back to.
func timers(t *testing.T) map[string]*Timer {
	fine := New()
	if !fine.Fine() {
		t.Fatal("no timerfd: every Linux since 2.6.25 has one")
	}
	slow := &Timer{kick: make(chan struct{}, 1), slow: time.NewTimer(time.Hour)} // as New without a timerfd
	t.Cleanup(func() { fine.Close(); slow.Close() })
	return map[string]*Timer{"timerfd": fine, "go timer": slow}
}

// TestWait: a wait lasts at least its duration, on either timer, fine or
// coarse, and reports no kick.
func TestWait(t *testing.T) {
	for name, tm := range timers(t) {
		for _, d := range []time.Duration{0, -time.Second, 200 * time.Microsecond, time.Millisecond, 3 * time.Millisecond} {
			start := time.Now()
			kicked := tm.Wait(d)
			if d > 0 && d < time.Millisecond {
				kicked = tm.WaitCoarse(d)
			}
			took := time.Since(start)
			if kicked {
				t.Errorf("%s: Wait(%v) kicked, never kicked", name, d)
			}
			if took < d {
				t.Errorf("%s: Wait(%v) returned after %v: early", name, d, took)
			}
			if d <= 0 && took > 50*time.Millisecond {
				t.Errorf("%s: Wait(%v) took %v, want at once", name, d, took)
			}
		}
	}
}

// TestKick: a kick ends a wait in progress, or the next one, at once,
// whichever path the wait takes; two kicks before a wait are one.
func TestKick(t *testing.T) {
	for name, tm := range timers(t) {
		for _, wait := range []func(time.Duration) bool{tm.Wait, tm.WaitCoarse} {
			// Before the wait: it returns at once, kicked.
			tm.Kick()
			tm.Kick()
			if !wait(time.Hour) {
				t.Errorf("%s: a wait after Kick not kicked", name)
			}
			// The second kick was the first's: the next wait is a wait.
			if wait(500 * time.Microsecond) {
				t.Errorf("%s: two kicks woke two waits", name)
			}
		}
		// During a wait of an hour, fine and coarse.
		for _, wait := range []func(time.Duration) bool{tm.Wait, tm.WaitCoarse} {
			var wg sync.WaitGroup
			wg.Go(func() {
				time.Sleep(20 * time.Millisecond)
				tm.Kick()
			})
			start := time.Now()
			kicked := wait(time.Hour)
			wg.Wait()
			if !kicked || time.Since(start) > time.Minute {
				t.Errorf("%s: an hour's wait with a Kick during it: kicked %v after %v", name, kicked, time.Since(start))
			}
		}
	}
}

// TestKickRace: kicks from other goroutines at any moment are never lost:
// each round's kick ends a wait of an hour (a lost one would hang the
// test, and the race detector watches the rest).
func TestKickRace(t *testing.T) {
	tm := New()
	defer tm.Close()
	const rounds = 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
				tm.Kick()
			}
		}
	})
	for range rounds {
		if !tm.Wait(time.Hour) {
			t.Fatal("an hour's wait returned without a kick")
		}
	}
	close(done)
	wg.Wait()
}

// TestKickAfterClose: a kick after Close does nothing (and touches no
// descriptor that may have been reused).
func TestKickAfterClose(t *testing.T) {
	tm := New()
	if err := tm.Close(); err != nil {
		t.Fatal(err)
	}
	tm.Kick()
	tm.Kick()
}

// BenchmarkLateness reports how late a 2 ms wait returns, at the median,
// on the timerfd and on a Go timer, in an otherwise idle process: the
// figure this package exists for (issue 34: 21-30 µs against 650 µs and
// more).
func BenchmarkLateness(b *testing.B) {
	const d = 2 * time.Millisecond
	fine := New()
	defer fine.Close()
	slow := time.NewTimer(time.Hour)
	for _, c := range []struct {
		name string
		wait func()
	}{
		{"timerfd", func() { fine.Wait(d) }},
		{"go-timer", func() { slow.Reset(d); <-slow.C }},
	} {
		b.Run(c.name, func(b *testing.B) {
			late := make([]time.Duration, 0, b.N)
			for b.Loop() {
				start := time.Now()
				c.wait()
				late = append(late, time.Since(start)-d)
			}
			slices.Sort(late)
			b.ReportMetric(float64(late[len(late)/2].Microseconds()), "µs-late-p50")
		})
	}
}

// TestWaitAllocs: a wait on the timerfd allocates nothing (the scheduler
// waits thousands of times a second).
func TestWaitAllocs(t *testing.T) {
	tm := New()
	defer tm.Close()
	if a := testing.AllocsPerRun(20, func() { tm.Wait(time.Millisecond) }); a > 0 {
		t.Errorf("Wait allocates %.1f times", a)
	}
}
