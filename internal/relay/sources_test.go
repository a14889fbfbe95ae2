package relay

import (
	"net/netip"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/room"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestSourcesCaps: a source's connections and distinct rooms are capped;
// a room it is in already is no new room; what it gives back it can take
// again, and an address that holds nothing is forgotten.
func TestSourcesCaps(t *testing.T) {
	var ss sources
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("::1")
	steps := []struct {
		name string
		do   func() bool
		want bool
	}{
		{"a connects 1", func() bool { return ss.connect(a, 2) }, true},
		{"a connects 2", func() bool { return ss.connect(a, 2) }, true},
		{"a connects 3: over", func() bool { return ss.connect(a, 2) }, false},
		{"b connects", func() bool { return ss.connect(b, 2) }, true},
		{"a enters r1", func() bool { return ss.enter(a, "r1", 2) }, true},
		{"a enters r1 again", func() bool { return ss.enter(a, "r1", 2) }, true},
		{"a enters r2", func() bool { return ss.enter(a, "r2", 2) }, true},
		{"a enters r3: over", func() bool { return ss.enter(a, "r3", 2) }, false},
		{"a enters r2 again: no new room", func() bool { return ss.enter(a, "r2", 2) }, true},
		{"a exits r2 once, still in it", func() bool { ss.exit(a, "r2"); return ss.enter(a, "r3", 2) }, false},
		{"a exits r2 again, r3 fits", func() bool { ss.exit(a, "r2"); return ss.enter(a, "r3", 2) }, true},
		{"a disconnects, connects", func() bool { ss.disconnect(a); return ss.connect(a, 2) }, true},
		{"no cap", func() bool { return ss.enter(b, "x", 0) && ss.enter(b, "y", 0) && ss.connect(b, 0) }, true},
	}
	for _, st := range steps {
		if got := st.do(); got != st.want {
			t.Fatalf("%s: %v, want %v", st.name, got, st.want)
		}
	}
	for _, r := range []string{"r1", "r1", "r3"} {
		ss.exit(a, r)
	}
	ss.disconnect(a)
	ss.disconnect(a)
	if c, r := ss.count(a); c != 0 || r != 0 {
		t.Fatalf("a holds %d connections, %d rooms after giving all back", c, r)
	}
	if sh := ss.shard(a); len(sh.m) != 0 && sh.m[a] != nil {
		t.Fatal("an address that holds nothing is still kept")
	}
}

// TestAdmitRoom: a room's buckets pass a send only if both have room,
// charge both or neither, and refill with time.
func TestAdmitRoom(t *testing.T) {
	msgs, bytes := newGCRA(10, 5), newGCRA(1000, 1000)
	var m room.Meter
	now := int64(0)
	passed := 0
	for range 20 {
		if admitRoom(&m, now, 100, msgs, bytes) == 0 {
			passed++
		}
	}
	if passed != 5 {
		t.Fatalf("%d of 20 sends at once passed, want the burst of 5", passed)
	}
	if got := admitRoom(&m, now, 1, msgs, bytes); got != overMessages {
		t.Fatalf("over: %d, want overMessages", got)
	}
	now += int64(time.Second)
	if got := admitRoom(&m, now, 1100, msgs, bytes); got != overBytes {
		t.Fatalf("a second later, 1100 bytes (over the burst): %d, want overBytes", got)
	}
	if got := admitRoom(&m, now, 400, msgs, bytes); got != 0 {
		t.Fatalf("a second later, 400 bytes: %d, want passed", got)
	}
}

// TestDefaultRoomLimitsSpareACapturedRoom: the default room rate limits
// take a room of the default --max-room-members in which every member
// sends what the bundled captures' clients send in their busiest second.
func TestDefaultRoomLimitsSpareACapturedRoom(t *testing.T) {
	d := DefaultConfig()
	for _, path := range []string{"../../captures/vr-session.pcap", "../../captures/vr-session-udp.pcap"} {
		c, err := capture.ReadFile(path, capture.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var peakMsgs, peakBytes int
		for _, f := range c.Flows {
			msgs, bytes := map[int64]int{}, map[int64]int{}
			for _, fr := range f.ClientFrames {
				if fr.Type != wire.TypeSend {
					continue
				}
				s := int64(fr.Offset / time.Second)
				msgs[s]++
				bytes[s] += len(fr.Bytes)
				peakMsgs, peakBytes = max(peakMsgs, msgs[s]), max(peakBytes, bytes[s])
			}
		}
		room := d.MaxRoomMembers
		t.Logf("%s: busiest second %d sends, %d bytes; a room of %d: %d, %d", path, peakMsgs, peakBytes, room, peakMsgs*room, peakBytes*room)
		if peakMsgs*room > int(d.RoomRateMessages) || peakBytes*room > int(d.RoomRateBytes) {
			t.Errorf("default room limits %v frames/s, %v B/s: under a captured room's %d, %d", d.RoomRateMessages, d.RoomRateBytes, peakMsgs*room, peakBytes*room)
		}
		if peakMsgs > vrMessages || peakBytes > vrBytes {
			t.Errorf("vrMessages %d, vrBytes %d: under the captures' peak %d, %d", vrMessages, vrBytes, peakMsgs, peakBytes)
		}
	}
}
