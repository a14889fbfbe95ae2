package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

func TestPlanDeterministic(t *testing.T) {
	cfg := planConfig{Seed: 7, Duration: 20 * time.Second, Heartbeat: 5 * time.Second}
	a, b := plan(cfg), plan(cfg)
	if len(a) != len(b) {
		t.Fatalf("%d events then %d", len(a), len(b))
	}
	for i := range a {
		if a[i].at != b[i].at || a[i].kind != b[i].kind || a[i].mode != b[i].mode || !bytes.Equal(a[i].payload, b[i].payload) {
			t.Fatalf("event %d differs", i)
		}
	}
	cfg.Seed = 8
	if c := plan(cfg); len(c) == len(a) && bytes.Equal(c[len(c)/2].payload, a[len(a)/2].payload) {
		t.Fatal("another seed gave the same session")
	}
}

func TestPlanShape(t *testing.T) {
	for _, udp := range []bool{false, true} {
		cfg := planConfig{Seed: 1, Duration: 60 * time.Second, Heartbeat: 20 * time.Second, UDP: udp}
		evs := plan(cfg)
		var n [4]int
		modes := map[wire.Mode]int{}
		for i, ev := range evs {
			n[ev.kind]++
			if i > 0 && ev.at < evs[i-1].at {
				t.Fatal("events out of order")
			}
			size := len(wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Payload: ev.payload}))
			switch ev.kind {
			case kindPose:
				if size < 100 || size > 150 {
					t.Fatalf("pose frame of %d bytes", size)
				}
			case kindVoice:
				if size < 70 || size > 90 {
					t.Fatalf("voice frame of %d bytes", size)
				}
			case kindObject:
				modes[ev.mode]++
				if len(ev.payload) < 300 || len(ev.payload) > 2048 || (udp && size > 1400) {
					t.Fatalf("object of %d bytes (udp %v)", len(ev.payload), udp)
				}
			}
		}
		if n[kindPose] < 71*60 || n[kindPose] > 72*60 {
			t.Fatalf("%d poses in 60 s", n[kindPose])
		}
		if n[kindVoice] < 500 || n[kindVoice] > 2500 {
			t.Fatalf("%d voice frames in 60 s", n[kindVoice])
		}
		if n[kindObject] < 8 || modes[wire.Unicast] == 0 || modes[wire.Ownercast] == 0 {
			t.Fatalf("%d objects, modes %v", n[kindObject], modes)
		}
		if n[kindHeartbeat] != 2 {
			t.Fatalf("%d heartbeats", n[kindHeartbeat])
		}
	}
}
