package barrier

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// TestRemoteControl: a coordinator that holds its start starts only once
// its controller says so, however long every shard has been ready; the
// controller then gets the start and each level, and its resume and halt
// reach the shards; a controller that hangs up halts the levels.
func TestRemoteControl(t *testing.T) {
	const n = 3
	c, addr := serve(t, n, 100*time.Millisecond)
	c.HoldStart()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	starts := make(chan time.Time, n)
	for i := range n {
		go func() {
			s, err := Wait(ctx, addr, i, n)
			if err != nil {
				t.Errorf("shard %d: %v", i, err)
			}
			starts <- s
		}()
	}
	r, err := Dial(ctx, addr, n)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	select {
	case <-r.Started():
		t.Fatal("started before the controller said start")
	case <-time.After(400 * time.Millisecond):
	}
	if err := r.Begin(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Started():
	case <-ctx.Done():
		t.Fatal("no start after Begin")
	}
	for range n {
		if s := <-starts; !s.Equal(r.Start()) {
			t.Errorf("a shard starts at %v, the controller was told %v", s, r.Start())
		}
	}

	// Level 10: handed to the controller; resume sends all on.
	ans := atLevelAll(ctx, addr, 10, n)
	if l := <-r.Levels(); l != 10 {
		t.Fatalf("level %d, want 10", l)
	}
	r.Resume(10)
	for i, a := range <-ans {
		if !a.goOn || a.err != nil {
			t.Errorf("shard %d at level 10: go %v, err %v", i, a.goOn, a.err)
		}
	}
	// Level 20: the controller hangs up: every shard is stopped.
	ans = atLevelAll(ctx, addr, 20, n)
	if l := <-r.Levels(); l != 20 {
		t.Fatalf("level %d, want 20", l)
	}
	r.Close()
	for i, a := range <-ans {
		if a.goOn {
			t.Errorf("shard %d went on after its controller hung up", i)
		}
	}
}

// TestRemoteRefused: a second controller, or one for another fleet, is
// told why, at Dial.
func TestRemoteRefused(t *testing.T) {
	_, addr := serve(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first, err := Dial(ctx, addr, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	var wg sync.WaitGroup
	for _, count := range []int{2, 5} {
		wg.Go(func() {
			if count == 2 {
				time.Sleep(200 * time.Millisecond) // the first is registered
			}
			r, err := Dial(ctx, addr, count)
			if err == nil {
				r.Close()
				t.Errorf("count %d: a second controller was not refused", count)
			}
		})
	}
	wg.Wait()
}

// TestRemoteWaitsForCoordinator: an address that accepts and hangs up
// (a port-forward whose pod does not listen yet) is dialled again until
// the coordinator answers.
func TestRemoteWaitsForCoordinator(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The first three connections are accepted and closed unanswered.
	go func() {
		for range 3 {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
		c := NewCoordinator(1, 0)
		c.Serve(ctx, ln)
	}()
	r, err := Dial(ctx, addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	r.Close()
}
