package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestRoomLimitBoundsManySenders: ten senders, each under its own rate
// limit (200 of 250 frames a second), in one room: together they are over
// the room's limit of 100 a second per sender, which drops and counts the
// excess; the listener gets about the room's rate, and no sender is cut.
func TestRoomLimitBoundsManySenders(t *testing.T) {
	const (
		senders  = 10
		perSec   = 200
		share    = 100
		burst    = 20
		roomRate = senders * share
		run      = 3 * time.Second
	)
	p := startRelay(t, "--log-level", "info", "--room-rate-messages", fmt.Sprint(share), "--room-rate-messages-burst", fmt.Sprint(burst))
	listener := join(t, p.TCP, "crowd", "listener")
	listener.SetDeadline(time.Now().Add(run + 20*time.Second))
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			f, err := listener.Recv()
			if err != nil {
				return
			}
			if f.Type == wire.TypeDeliver {
				got.Add(1)
			}
		}
	}()
	var ss []*client.Conn
	for i := range senders {
		c := join(t, p.TCP, "crowd", fmt.Sprintf("sender-%d", i))
		c.SetDeadline(time.Now().Add(run + 20*time.Second))
		go func() { // drain what a sender gets
			for {
				if _, err := c.Recv(); err != nil {
					return
				}
			}
		}()
		ss = append(ss, c)
	}
	var wg sync.WaitGroup
	var sent atomic.Int64
	start := time.Now()
	for _, c := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := time.NewTicker(time.Second / perSec)
			defer tk.Stop()
			for time.Since(start) < run {
				<-tk.C
				if err := c.Send(wire.Send{Mode: wire.Othercast, Payload: []byte("pose")}); err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	p.waitMetric(t, "relay_received_messages_total", float64(sent.Load()))
	time.Sleep(200 * time.Millisecond)
	allowed := roomRate*elapsed.Seconds() + senders*burst
	roomLimited := p.metric(t, `relay_rate_limited_frames_total{limit="room_messages"}`)
	t.Logf("%d sends in %v, the listener got %d (the room allows %.0f), %v dropped by the room's limit", sent.Load(), elapsed.Round(time.Millisecond), got.Load(), allowed, roomLimited)
	if float64(got.Load()) > allowed*1.05 {
		t.Errorf("listener got %d deliveries, the room's limit allows %.0f", got.Load(), allowed)
	}
	if roomLimited == 0 || roomLimited+float64(got.Load()) < float64(sent.Load())*0.99 {
		t.Errorf("%v counted as over the room's limit; %d sent, %d delivered", roomLimited, sent.Load(), got.Load())
	}
	for _, l := range []string{"messages", "bytes"} {
		if n := p.metric(t, `relay_rate_limited_frames_total{limit="`+l+`"}`); n != 0 {
			t.Errorf("%v frames over the senders' own %s limit: they were under it", n, l)
		}
	}
	if n := p.metric(t, `relay_disconnects_total{reason="rate_limited"}`); n != 0 {
		t.Errorf("%v senders disconnected: the room's limit cuts no one", n)
	}
}

// TestPerSourceCaps: one source address holds at most
// --max-connections-per-source connections and sessions (TCP and UDP
// together) and its connections are in at most --max-rooms-per-source
// rooms; past either, server_full, counted by cap. --max-rooms caps rooms
// for everyone.
func TestPerSourceCaps(t *testing.T) {
	p := startRelay(t, "--max-connections-per-source", "3", "--max-rooms-per-source", "2")
	a := join(t, p.TCP, "one", "a")
	join(t, p.TCP, "one", "b")
	u := dialUDP(t, p.UDP)
	if _, err := u.Join("two", "c", nil); err != nil { // a UDP session counts too
		t.Fatal(err)
	}
	expectError(t, dial(t, p.TCP), wire.ErrServerFull) // a fourth connection
	u2 := dialUDP(t, p.UDP)
	if _, err := u2.Join("two", "d", nil); !isCode(err, wire.ErrServerFull) {
		t.Fatalf("fourth session's join: %v, want server_full", err)
	}
	p.waitMetric(t, `relay_limit_refusals_total{limit="connections_per_source"}`, 2)
	// Room cap: in "one" and "two" already; a third room is refused, a
	// room it is in is not.
	if err := a.Leave(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Join("three", "a", nil); !isCode(err, wire.ErrServerFull) {
		t.Fatalf("third room: %v, want server_full", err)
	}
	p.waitMetric(t, `relay_limit_refusals_total{limit="rooms_per_source"}`, 1)
	a.Close() // refused: the relay closes it too
	p.waitMetricEq(t, `relay_connections{transport="tcp"}`, 1)
	c := dial(t, p.TCP)
	if _, err := c.Join("two", "e", nil); err != nil {
		t.Fatalf("a room the source is in: %v", err)
	}

	q := startRelay(t, "--max-rooms", "2")
	join(t, q.TCP, "r1", "x")
	join(t, q.TCP, "r2", "x")
	join(t, q.TCP, "r2", "y") // an existing room is no new one
	if _, err := dial(t, q.TCP).Join("r3", "x", nil); !isCode(err, wire.ErrServerFull) {
		t.Fatalf("third room: %v, want server_full", err)
	}
	q.waitMetric(t, `relay_limit_refusals_total{limit="rooms"}`, 1)
}

// TestAcceptRefusalCounted: a connection refused at accept by
// --max-connections gets server_full before it sends anything, and is
// counted: relay_limit_refusals_total{limit="connections"} and
// relay_rejected_frames_total{reason="server_full"}.
func TestAcceptRefusalCounted(t *testing.T) {
	p := startRelay(t, "--max-connections", "2")
	join(t, p.TCP, "full", "a")
	join(t, p.TCP, "full", "b")
	expectError(t, dial(t, p.TCP), wire.ErrServerFull)
	p.waitMetricEq(t, `relay_limit_refusals_total{limit="connections"}`, 1)
	p.waitMetricEq(t, `relay_rejected_frames_total{reason="server_full"}`, 1)
}
