package barrier

import (
	"context"
	"sync"
	"testing"
	"time"
)

// levelAnswer is one shard's answer at a level.
type levelAnswer struct {
	resume time.Time
	goOn   bool
	err    error
}

// atLevelAll has n shards wait at level attempts and returns their answers.
func atLevelAll(ctx context.Context, addr string, attempts, n int) <-chan []levelAnswer {
	out := make(chan []levelAnswer, 1)
	go func() {
		ans := make([]levelAnswer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				r, ok, err := AtLevel(ctx, addr, attempts, i, n)
				ans[i] = levelAnswer{r, ok, err}
			})
		}
		wg.Wait()
		out <- ans
	}()
	return out
}

// TestLevels: the coordinator hands a level on only once every shard
// waits there; Resume sends them all on at one instant, Halt stops them,
// and a shard that reaches a level after Halt is stopped at once.
func TestLevels(t *testing.T) {
	const n = 3
	c, addr := serve(t, n, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Two of three in: the level is not handed on.
	partial := make(chan levelAnswer, 2)
	for i := range 2 {
		go func() {
			r, ok, err := AtLevel(ctx, addr, 10, i, n)
			partial <- levelAnswer{r, ok, err}
		}()
	}
	select {
	case l := <-c.Levels():
		t.Fatalf("level %d handed on with 2 of %d shards in", l, n)
	case <-time.After(300 * time.Millisecond):
	}
	last := make(chan levelAnswer, 1)
	go func() {
		r, ok, err := AtLevel(ctx, addr, 10, 2, n)
		last <- levelAnswer{r, ok, err}
	}()
	select {
	case l := <-c.Levels():
		if l != 10 {
			t.Fatalf("level %d, want 10", l)
		}
	case <-ctx.Done():
		t.Fatal("level 10 never handed on")
	}
	before := time.Now()
	c.Resume(10)
	ans := []levelAnswer{<-partial, <-partial, <-last}
	for i, a := range ans {
		if a.err != nil || !a.goOn || !a.resume.Equal(ans[0].resume) || a.resume.Before(before) {
			t.Errorf("shard answer %d: %+v; want go, all at one instant after %v", i, a, before)
		}
	}

	// The next level: stopped.
	done := atLevelAll(ctx, addr, 20, n)
	if l := <-c.Levels(); l != 20 {
		t.Fatalf("level %d, want 20", l)
	}
	c.Halt()
	for i, a := range <-done {
		if a.err != nil || a.goOn {
			t.Errorf("shard %d after Halt: %+v, want stop", i, a)
		}
	}
	// After Halt, any level stops at once.
	if _, ok, err := AtLevel(ctx, addr, 30, 1, n); ok || err != nil {
		t.Errorf("a level after Halt: go %v, err %v; want stop", ok, err)
	}
}

// TestLevelRefusals: a level line for another count, or garbage, is
// answered with an error.
func TestLevelRefusals(t *testing.T) {
	_, addr := serve(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := AtLevel(ctx, addr, 10, 0, 3); err == nil {
		t.Error("shard 0/3 at a coordinator of 2: no error")
	}
}

func TestParseLevel(t *testing.T) {
	for _, tc := range []struct {
		line    string
		a, i, n int
		ok      bool
	}{
		{"level 60 1 2\n", 60, 1, 2, true},
		{"level 60 1", 0, 0, 0, false},
		{"level -1 0 2", 0, 0, 0, false},
		{"ready 0 2", 0, 0, 0, false},
		{"level x 0 2", 0, 0, 0, false},
	} {
		a, i, n, err := parseLevel(tc.line)
		if (err == nil) != tc.ok || a != tc.a || i != tc.i || n != tc.n {
			t.Errorf("parseLevel(%q) = %d %d %d %v", tc.line, a, i, n, err)
		}
	}
}
