package profile

import (
	"testing"

	"github.com/reprise-harness/reprise/internal/wire"
)

// TestRepriseDatagram: a client datagram is a token and one frame; a
// relay datagram is one or more whole server→client frames.
func TestRepriseDatagram(t *testing.T) {
	deliver := wire.AppendDeliver(nil, wire.Othercast, "alice", true, 42, []byte("pose"))
	joined := wire.AppendJoined(nil, 7, "alice", []string{"alice"})
	two := append(append([]byte(nil), joined...), deliver...)
	join := wire.AppendJoin(wire.AppendDatagram(nil, 0), "lobby", "alice", nil, 0)
	for _, tt := range []struct {
		name   string
		d      []byte
		frames int
	}{
		{"client join", join, 1},
		{"one relay frame", deliver, 1},
		{"two relay frames", two, 2},
		{"relay frames then a cut one", append(append([]byte(nil), two...), deliver[:5]...), 0},
		{"a client frame without token", wire.AppendLeave(nil), 0},
		{"garbage", []byte("hello world"), 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			frames, ok := RepriseFramer(wire.DefaultMaxFrame).Datagram(tt.d)
			if ok != (tt.frames > 0) || len(frames) != tt.frames {
				t.Fatalf("got %d frames, ok %v; want %d", len(frames), ok, tt.frames)
			}
			if tt.frames == 2 && (string(frames[0]) != string(joined) || string(frames[1]) != string(deliver)) {
				t.Errorf("frames %x, want %x and %x", frames, joined, deliver)
			}
		})
	}
}
