package relay

import (
	"net/netip"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
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
// charge both or neither, refill with time, give each member that sent in
// the last window its share, and charge a late reader's older clock
// reading at the latest time the room has seen.
func TestAdmitRoom(t *testing.T) {
	msgs, bytes := newGCRA(10, 5), newGCRA(1000, 1000)
	var m room.Meter
	a, b := int64(-1), int64(-1) // two members' sender windows
	now := int64(5 * time.Second)
	passed := 0
	for range 20 {
		if admitRoom(&m, &a, now, 100, msgs, bytes) == 0 {
			passed++
		}
	}
	if passed != 5 {
		t.Fatalf("%d of 20 sends at once passed, want the burst of 5", passed)
	}
	if got := admitRoom(&m, &a, now, 1, msgs, bytes); got != overMessages {
		t.Fatalf("over: %d, want overMessages", got)
	}
	// A second sender brings its share: the room's bucket is twice as
	// large and refills twice as fast.
	passed = 0
	for range 20 {
		if admitRoom(&m, &b, now, 1, msgs, bytes) == 0 {
			passed++
		}
	}
	if passed != 5 {
		t.Fatalf("a second sender: %d of 20 passed, want its burst of 5", passed)
	}
	now += int64(time.Second)
	if got := admitRoom(&m, &a, now, 2100, msgs, bytes); got != overBytes {
		t.Fatalf("a second later, 2100 bytes (over two bursts): %d, want overBytes", got)
	}
	if got := admitRoom(&m, &a, now, 900, msgs, bytes); got != 0 {
		t.Fatalf("a second later, 900 bytes: %d, want passed", got)
	}
	// A reader whose clock reading is a second old charges at the room's
	// latest time, not a second before the room's buckets.
	if got := admitRoom(&m, &b, now-int64(time.Second), 1, msgs, bytes); got != 0 {
		t.Fatalf("a late reader's send: %d, want passed", got)
	}
	// Windows later, only a has sent: its share alone.
	now += 3 * int64(time.Second)
	passed = 0
	for range 20 {
		if admitRoom(&m, &a, now, 1, msgs, bytes) == 0 {
			passed++
		}
	}
	if passed != 5 {
		t.Fatalf("one sender left: %d of 20 passed, want its burst of 5", passed)
	}
}

// TestDefaultRoomLimitsSpareACapturedRoom: the default room rate limits
// give each sender of a room what the bundled captures' clients send in
// their busiest second, so a room of them is never limited.
func TestDefaultRoomLimitsSpareACapturedRoom(t *testing.T) {
	d := DefaultConfig()
	for _, path := range []string{"../../captures/vr-session.pcap", "../../captures/vr-session-udp.pcap"} {
		c, err := capture.ReadFile(path, capture.Options{Framer: profile.RepriseFramer(0), ServerPort: wire.DefaultPort})
		if err != nil {
			t.Fatal(err)
		}
		var peakMsgs, peakBytes int
		for _, f := range c.Flows {
			msgs, bytes := map[int64]int{}, map[int64]int{}
			for _, fr := range f.ClientFrames {
				if wire.Type(fr.Bytes[wire.LenSize]) != wire.TypeSend {
					continue
				}
				s := int64(fr.Offset / time.Second)
				msgs[s]++
				bytes[s] += len(fr.Bytes)
				peakMsgs, peakBytes = max(peakMsgs, msgs[s]), max(peakBytes, bytes[s])
			}
		}
		t.Logf("%s: busiest second %d sends, %d bytes", path, peakMsgs, peakBytes)
		if peakMsgs > int(d.RoomRateMessages) || peakBytes > int(d.RoomRateBytes) {
			t.Errorf("default room limits %v frames/s, %v B/s per sender: under a captured client's %d, %d", d.RoomRateMessages, d.RoomRateBytes, peakMsgs, peakBytes)
		}
		if peakMsgs > vrMessages || peakBytes > vrBytes {
			t.Errorf("vrMessages %d, vrBytes %d: under the captures' peak %d, %d", vrMessages, vrBytes, peakMsgs, peakBytes)
		}
	}
}
