package fleet

import (
	"testing"
	"unsafe"
)

// TestCountersApart checks the layout the hot paths rely on: what a
// scheduler writes and what its poller writes on every read never share
// a cache line (64 bytes), whatever the struct's alignment in memory.
func TestCountersApart(t *testing.T) {
	var c counters
	var h hists
	for _, tc := range []struct {
		name        string
		end, start  uintptr // end of the last field of one side, start of the first of the other
		first, last string
	}{
		{"counters: send, then receive", unsafe.Offsetof(c.castsUnknown) + unsafe.Sizeof(c.castsUnknown), unsafe.Offsetof(c.recvMsgs), "castsUnknown", "recvMsgs"},
		{"counters: receive, then the next scheduler's", unsafe.Offsetof(c.lost) + unsafe.Sizeof(c.lost), unsafe.Sizeof(c), "lost", "the next sentFrames"},
		{"hists: latency, then lag", unsafe.Offsetof(h.latency) + unsafe.Sizeof(h.latency), unsafe.Offsetof(h.lagMu), "latency", "lagMu"},
		{"hists: lag, then the next hists", unsafe.Offsetof(h.lag) + unsafe.Sizeof(h.lag), unsafe.Sizeof(h), "lag", "the next latMu"},
	} {
		if gap := tc.start - tc.end; tc.start < tc.end || gap < 64 {
			t.Errorf("%s: %s ends at %d, %s starts at %d: %d bytes apart, want >= 64", tc.name, tc.first, tc.end, tc.last, tc.start, int(tc.start)-int(tc.end))
		}
	}
}

// TestClientLines checks the client's layout by cache line (see client):
// what both sides read, what the reader writes at each read and what a
// send touches sit on lines of their own, the send's on two.
func TestClientLines(t *testing.T) {
	var c client
	for _, tc := range []struct {
		field      string
		off, size  uintptr
		line       uintptr
		whoTouches string
	}{
		{"f", unsafe.Offsetof(c.f), unsafe.Sizeof(c.f), 0, "both"},
		{"tlsOn", unsafe.Offsetof(c.tlsOn), unsafe.Sizeof(c.tlsOn), 0, "both"},
		{"casts", unsafe.Offsetof(c.casts), unsafe.Sizeof(c.casts), 1, "the reader"},
		{"inst", unsafe.Offsetof(c.inst), unsafe.Sizeof(c.inst), 1, "the reader"},
		{"plan", unsafe.Offsetof(c.plan), unsafe.Sizeof(c.plan), 2, "a send"},
		{"due", unsafe.Offsetof(c.due), unsafe.Sizeof(c.due), 2, "a send"},
		{"player", unsafe.Offsetof(c.player), unsafe.Sizeof(c.player), 3, "a send"},
		{"backlog", unsafe.Offsetof(c.backlog), unsafe.Sizeof(c.backlog), 3, "a send"},
		{"ownOthers", unsafe.Offsetof(c.ownOthers), unsafe.Sizeof(c.ownOthers), 4, "a cast's send"},
		{"loops", unsafe.Offsetof(c.loops), unsafe.Sizeof(c.loops), 4, "a loop's send"},
	} {
		first, last := tc.off/64, (tc.off+tc.size-1)/64
		if first != tc.line || last != tc.line {
			t.Errorf("client.%s (%s's) spans lines %d-%d, want line %d", tc.field, tc.whoTouches, first, last, tc.line)
		}
	}
	// The allocator's size classes over 512 bytes are multiples of 64,
	// so every client starts on a line boundary.
	if n := unsafe.Sizeof(c); n <= 512 {
		t.Errorf("client is %d bytes: its size class may not keep it on line boundaries", n)
	}
}

// TestCastRoomStripes: a room's count is the sum of what every scheduler
// added, whichever stripe each went to (indexes past castStripes share).
func TestCastRoomStripes(t *testing.T) {
	for _, tc := range []struct {
		name string
		adds [][2]int64 // scheduler index, casts
		want int64
	}{
		{"none", nil, 0},
		{"one scheduler", [][2]int64{{0, 3}, {0, 4}}, 7},
		{"two schedulers", [][2]int64{{0, 3}, {1, 5}}, 8},
		{"more schedulers than stripes", [][2]int64{{0, 1}, {castStripes, 2}, {castStripes + 1, 4}, {2*castStripes - 1, 8}}, 15},
	} {
		var r castRoom
		for _, a := range tc.adds {
			r.add(int(a[0]), a[1])
		}
		if got := r.count(); got != tc.want {
			t.Errorf("%s: count %d, want %d", tc.name, got, tc.want)
		}
	}
	if n := unsafe.Sizeof(castRoom{}.by[0]); n != 64 {
		t.Errorf("a castRoom stripe is %d bytes, want a line (64)", n)
	}
}
