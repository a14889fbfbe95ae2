package barrier

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func serve(t *testing.T, count int, lead time.Duration) (*Coordinator, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := NewCoordinator(count, lead)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return c, ln.Addr().String()
}

// TestAllStartTogether: shards that become ready at different times (one
// before the coordinator listens) all get the same start instant, after
// the last one was ready; one that comes after the start learns it is late.
func TestAllStartTogether(t *testing.T) {
	const n = 4
	// Reserve an address, then let shard 0 dial before anyone listens.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	starts := make([]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			time.Sleep(time.Duration(i) * 60 * time.Millisecond)
			starts[i], errs[i] = Wait(ctx, addr, i, n)
		})
	}
	time.Sleep(100 * time.Millisecond)
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("address %s taken meanwhile: %v", addr, err)
	}
	c := NewCoordinator(n, 300*time.Millisecond)
	sctx, scancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Serve(sctx, ln) }()
	defer func() { scancel(); <-done }()
	wg.Wait()
	lastReady := time.Now()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
	}
	for i, s := range starts {
		if d := s.Sub(starts[0]).Abs(); d > 20*time.Millisecond {
			t.Errorf("shard %d starts %v away from shard 0", i, d)
		}
	}
	if !starts[0].After(lastReady.Add(-time.Millisecond)) {
		t.Errorf("start %v is before the last shard was answered (%v)", starts[0], lastReady)
	}
	// The coordinator closes Started after it wrote the last start, so a
	// shard may have read its start a moment before: wait for it.
	select {
	case <-c.Started():
	case <-time.After(5 * time.Second):
		t.Error("Started not closed within 5 s of every shard getting its start")
	}
	time.Sleep(time.Until(starts[0]) + 50*time.Millisecond)
	late, err := Wait(ctx, addr, 2, n)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(late); d < 40*time.Millisecond {
		t.Errorf("a shard restarted after the start got a start %v ago, want it in the past by at least 40ms", d)
	}
	if d := late.Sub(starts[2]).Abs(); d > 20*time.Millisecond {
		t.Errorf("the late shard's start is %v away from the others'", d)
	}
}

func TestRefusals(t *testing.T) {
	_, addr := serve(t, 2, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		index, count int
		want         string
	}{
		{0, 3, "waits for 2 shards"},
		{2, 2, "waits for 2 shards"},
	} {
		_, err := Wait(ctx, addr, tc.index, tc.count)
		if !errors.Is(err, ErrBarrier) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Wait(%d/%d): %v, want %q", tc.index, tc.count, err, tc.want)
		}
	}
}

// TestWaitEndsWithContext: a shard whose peers never come gives up with
// its context, and one whose coordinator never listens too.
func TestWaitEndsWithContext(t *testing.T) {
	_, addr := serve(t, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := Wait(ctx, addr, 0, 3); !errors.Is(err, ErrBarrier) || !strings.Contains(err.Error(), "no start") {
		t.Errorf("Wait without peers: %v", err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	if _, err := Wait(ctx2, dead, 0, 1); !errors.Is(err, ErrBarrier) || !strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("Wait without coordinator: %v", err)
	}
}

// TestStartInstant: an answer that arrives late on a host whose clock
// agrees keeps the coordinator's instant; a host whose clock is far off
// uses the delay from receipt.
func TestStartInstant(t *testing.T) {
	start := time.Date(2026, 11, 22, 18, 0, 0, 0, time.UTC)
	delay := 500 * time.Millisecond
	sent := start.Add(-delay)
	for _, tc := range []struct {
		name string
		got  time.Time // receipt on the shard's clock
		want time.Time
	}{
		{"same clock, prompt", sent.Add(time.Millisecond), start},
		{"same clock, answer read 80 ms late", sent.Add(80 * time.Millisecond), start},
		{"clock 10 s ahead", sent.Add(10 * time.Second), sent.Add(10*time.Second + delay)},
		{"clock 3 s behind", sent.Add(-3 * time.Second), sent.Add(-3*time.Second + delay)},
	} {
		if got := startInstant(tc.got, int64(delay), start.UnixNano()); !got.Equal(tc.want) {
			t.Errorf("%s: start %v, want %v", tc.name, got, tc.want)
		}
	}
}
