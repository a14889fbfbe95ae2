package main

import (
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestFlooderHurtsOnlyItself: a member of a room of 20 listeners floods
// 1 KiB broadcasts as fast as TCP takes them, 10 s in all. No listener is
// disconnected, the listeners' p99 latency of a 50 Hz talker in the same
// room stays within 2× of its value without the flood, the flooder is
// throttled to its rate limit and disconnected with rate_limited (it
// rejoins), and its dropped frames are counted.
//
// The machine is shared and noisy (other builds come and go, for seconds
// at a time), so quiet and flood alternate second by second, ten times
// each, and each side's p99 is the median of its one-second windows' p99s:
// load from elsewhere hits both sides alike, and a minority of bad seconds
// decides nothing. A p99 under a 2 ms floor counts as 2 ms (loopback
// latency below that is scheduler noise, not the relay). Under -race the
// ratio is logged, not checked: the test's own clients are what the race
// detector slows (`make timing` checks it).
func TestFlooderHurtsOnlyItself(t *testing.T) {
	const (
		listeners = 20
		cycles    = 10
		window    = time.Second
		payload   = 1024
		floor     = 2 * time.Millisecond
	)
	// A short grace, so that the flooder is cut within each flood second.
	p := startRelay(t, "--log-level", "info", "--rate-limit-grace", "500ms")
	total := 2 * cycles * window
	var (
		flooding  atomic.Bool
		mu        sync.Mutex
		lat       [2][][]time.Duration // quiet, flood; by cycle
		cycle     atomic.Int32
		fromFlood atomic.Int64
		lost      atomic.Int32
		done      atomic.Bool
		wg        sync.WaitGroup
	)
	record := func(d time.Duration) {
		side := 0
		if flooding.Load() {
			side = 1
		}
		mu.Lock()
		defer mu.Unlock()
		for c := int(cycle.Load()); len(lat[side]) <= c; {
			lat[side] = append(lat[side], nil)
		}
		c := int(cycle.Load())
		lat[side][c] = append(lat[side][c], d)
	}
	var ls []*client.Conn
	for i := 0; i < listeners; i++ {
		c := join(t, p.TCP, "flood", "listener"+string(rune('a'+i)))
		c.SetDeadline(time.Now().Add(total + 30*time.Second))
		ls = append(ls, c)
	}
	for _, c := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				f, err := c.Recv()
				if err != nil {
					if !done.Load() {
						lost.Add(1)
						t.Errorf("listener lost: %v", err)
					}
					return
				}
				switch {
				case f.Type == wire.TypeDeliver && string(f.User) == "talker":
					record(time.Duration(time.Now().UnixNano() - f.Trace))
				case f.Type == wire.TypeDeliver:
					fromFlood.Add(1)
				case f.Type == wire.TypeError:
					t.Errorf("listener got error %s", f.Code)
					return
				}
			}
		}()
	}
	talker := join(t, p.TCP, "flood", "talker")
	talker.SetDeadline(time.Now().Add(total + 30*time.Second))
	stopTalk := make(chan struct{})
	var talkWG sync.WaitGroup
	talkWG.Add(2)
	go func() {
		defer talkWG.Done()
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		pl := make([]byte, 200)
		for {
			select {
			case <-stopTalk:
				return
			case <-tk.C:
			}
			if err := talker.Send(wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: time.Now().UnixNano(), Payload: pl}); err != nil {
				t.Errorf("talker: %v", err)
				return
			}
		}
	}()
	go func() { // the talker reads its notices
		defer talkWG.Done()
		for {
			if _, err := talker.Recv(); err != nil {
				return
			}
		}
	}()

	// One write carries 64 frames: the flooder is as fast as TCP lets it.
	var burst []byte
	for len(burst) < 64<<10 {
		burst = wire.AppendSend(burst, wire.Send{Mode: wire.Broadcast, Payload: make([]byte, payload)})
	}
	frame := len(wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast, Payload: make([]byte, payload)}))
	joins, written := 0, 0
	flood := func(until time.Time) {
		nc, err := net.Dial("tcp", p.TCP)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fc := client.New(nc)
		fc.SetDeadline(until.Add(time.Second))
		if _, err := fc.Join("flood", "flooder", nil); err != nil {
			t.Fatalf("flooder join %d: %v", joins, err)
		}
		joins++
		go func() { // drain what the flooder gets, so only its sending counts
			for {
				if _, err := fc.Recv(); err != nil {
					return
				}
			}
		}()
		nc.SetWriteDeadline(until)
		for {
			n, err := nc.Write(burst)
			written += n
			if err != nil {
				return
			}
		}
	}
	for c := 0; c < cycles; c++ {
		cycle.Store(int32(c))
		time.Sleep(window)
		flooding.Store(true)
		flood(time.Now().Add(window))
		flooding.Store(false)
	}
	done.Store(true)
	close(stopTalk)
	for _, c := range ls {
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	}
	talker.SetDeadline(time.Now().Add(500 * time.Millisecond))
	talkWG.Wait()
	wg.Wait()
	if lost.Load() > 0 {
		t.Fatalf("%d listeners lost", lost.Load())
	}

	// p99 of each window, then the median of those.
	p99 := func(windows [][]time.Duration) (time.Duration, []time.Duration) {
		var each []time.Duration
		for _, d := range windows {
			if len(d) < listeners*25 { // a window cut short
				continue
			}
			slices.Sort(d)
			each = append(each, d[len(d)*99/100].Round(10*time.Microsecond))
		}
		if len(each) < cycles/2 {
			t.Fatalf("%d full one-second windows of latencies, want %d", len(each), cycles)
		}
		sorted := slices.Clone(each)
		slices.Sort(sorted)
		return sorted[len(sorted)/2], each
	}
	mu.Lock()
	pQuiet, wQuiet := p99(lat[0])
	pFlood, wFlood := p99(lat[1])
	mu.Unlock()
	perListener := float64(fromFlood.Load()) / listeners
	limited := p.metric(t, `relay_rate_limited_frames_total{limit="bytes"}`) + p.metric(t, `relay_rate_limited_frames_total{limit="messages"}`)
	t.Logf("p99 without the flood %v (median of %v), with it %v (median of %v)", pQuiet, wQuiet, pFlood, wFlood)
	t.Logf("flooder: %d joins, %.1f MB written (%d frames); each listener got %.0f of them; %v dropped by the relay",
		joins, float64(written)/1e6, written/frame, perListener, limited)
	switch {
	case raceEnabled:
		t.Log("p99 ratio not checked under -race (make timing checks it)")
	case max(pFlood, floor) > 2*max(pQuiet, floor):
		t.Errorf("listeners' p99 %v with the flood, %v without: over 2×", pFlood, pQuiet)
	}
	// What passes is at most the byte bucket: its rate for the flood, and
	// a full bucket for each connection the flooder joined with.
	allowed := (64<<10*(cycles*window).Seconds() + float64(joins)*(128<<10)) / float64(frame)
	if perListener > allowed*1.1 {
		t.Errorf("each listener got %.0f flood frames, the limits allow %.0f", perListener, allowed)
	}
	if limited == 0 {
		t.Error("no frame counted as rate limited")
	}
	if got := p.metric(t, `relay_disconnects_total{reason="rate_limited"}`); got < cycles/2 {
		t.Errorf("flooder disconnected %v times for rate_limited in %d floods; want it cut after the grace", got, cycles)
	}
	if got := p.metric(t, "relay_slow_consumer_disconnects_total"); got != 0 {
		t.Errorf("%v slow-consumer disconnects", got)
	}
}

// TestDefaultLimitsSpareAVRClient: with the default limits, clients sending
// what a VR client sends (72 Hz poses, 50 Hz voice, a heartbeat a second,
// and a burst of 200 object syncs at the start), over TCP and UDP, lose
// nothing to the rate limits.
func TestDefaultLimitsSpareAVRClient(t *testing.T) {
	p := startRelay(t)
	tcp := join(t, p.TCP, "vr", "tcp")
	u := dialUDP(t, p.UDP)
	if _, err := u.Join("vr", "udp", nil); err != nil {
		t.Fatal(err)
	}
	const run = 3 * time.Second
	var wg sync.WaitGroup
	sent := make([]int, 2)
	for i, c := range []*client.Conn{tcp, u} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			go func() { // read what comes, so nothing backs up
				for {
					if _, err := c.Recv(); err != nil {
						return
					}
				}
			}()
			for range 200 { // object syncs at the start
				if err := c.Send(wire.Send{Mode: wire.Othercast, Payload: make([]byte, 100)}); err != nil {
					t.Error(err)
					return
				}
				sent[i]++
			}
			pose, voice, beat := time.NewTicker(time.Second/72), time.NewTicker(time.Second/50), time.NewTicker(time.Second)
			defer pose.Stop()
			defer voice.Stop()
			defer beat.Stop()
			end := time.After(run)
			for {
				var err error
				select {
				case <-end:
					return
				case <-pose.C:
					err = c.Send(wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: 1, Payload: make([]byte, 130)})
				case <-voice.C:
					err = c.Send(wire.Send{Mode: wire.Othercast, Payload: make([]byte, 160)})
				case <-beat.C:
					err = c.Heartbeat(1)
				}
				if err != nil {
					t.Error(err)
					return
				}
				sent[i]++
			}
		}()
	}
	wg.Wait()
	t.Logf("sent %v frames", sent)
	p.waitMetric(t, "relay_received_messages_total", float64(sent[0]+sent[1]))
	for _, limit := range []string{"messages", "bytes"} {
		if got := p.metric(t, `relay_rate_limited_frames_total{limit="`+limit+`"}`); got != 0 {
			t.Errorf("%v frames over the %s limit", got, limit)
		}
	}
}
