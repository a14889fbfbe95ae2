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
