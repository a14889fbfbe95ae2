package room

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/reprise-harness/reprise/internal/wire"
)

// ids encodes target ids as on the wire (one length byte each).
func ids(s ...string) []byte {
	var b []byte
	for _, id := range s {
		b = append(append(b, byte(len(id))), id...)
	}
	return b
}

// joined returns a registry and the room "r" with the given members in order.
func joined(t *testing.T, members ...string) (*Shard[string], *Room[string]) {
	t.Helper()
	g := NewRegistry[string](0)
	s := g.Shard("r")
	var r *Room[string]
	for _, m := range members {
		var err error
		if r, err = s.Join("r", m, m); err != nil {
			t.Fatalf("join %s: %v", m, err)
		}
	}
	return s, r
}

func TestRecipients(t *testing.T) {
	tests := []struct {
		name    string
		members []string
		mode    wire.Mode
		sender  string
		targets []byte
		want    []string
	}{
		{"broadcast includes sender", []string{"a", "b", "c"}, wire.Broadcast, "b", nil, []string{"a", "b", "c"}},
		{"othercast excludes sender", []string{"a", "b", "c"}, wire.Othercast, "b", nil, []string{"a", "c"}},
		{"othercast alone", []string{"a"}, wire.Othercast, "a", nil, nil},
		{"unicast present", []string{"a", "b", "c"}, wire.Unicast, "a", ids("c"), []string{"c"}},
		{"unicast absent", []string{"a", "b"}, wire.Unicast, "a", ids("zed"), nil},
		{"unicast to self", []string{"a", "b"}, wire.Unicast, "a", ids("a"), []string{"a"}},
		{"manycast target order", []string{"a", "b", "c", "d"}, wire.Manycast, "a", ids("d", "b"), []string{"d", "b"}},
		{"manycast each once", []string{"a", "b", "c"}, wire.Manycast, "a", ids("b", "c", "b", "c"), []string{"b", "c"}},
		{"manycast absent skipped", []string{"a", "b"}, wire.Manycast, "a", ids("x", "b", "y"), []string{"b"}},
		{"ownercast", []string{"a", "b", "c"}, wire.Ownercast, "c", nil, []string{"a"}},
		{"ownercast from owner", []string{"a", "b"}, wire.Ownercast, "a", nil, []string{"a"}},
		{"truncated targets stop", []string{"a", "b"}, wire.Manycast, "a", append(ids("b"), 5, 'x'), []string{"b"}},
		{"unknown mode", []string{"a", "b"}, wire.Mode(7), "a", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, r := joined(t, tt.members...)
			got := r.Recipients(nil, tt.mode, tt.sender, tt.targets)
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRecipientsAppendsWithoutAllocating(t *testing.T) {
	_, r := joined(t, "a", "b", "c", "d")
	dst := make([]string, 0, 8)
	targets := ids("b", "d")
	allocs := testing.AllocsPerRun(100, func() {
		dst = r.Recipients(dst[:0], wire.Manycast, "a", targets)
		dst = r.Recipients(dst[:0], wire.Othercast, "a", nil)
	})
	if allocs != 0 {
		t.Errorf("%v allocs per run, want 0", allocs)
	}
}

func TestOwnerHandOver(t *testing.T) {
	tests := []struct {
		name      string
		members   []string
		leave     []string
		wantOwner []string // owner after each leave
		wantMoved []bool   // ownerChanged after each leave
	}{
		{"owner leaves", []string{"a", "b", "c"}, []string{"a"}, []string{"b"}, []bool{true}},
		{"member leaves", []string{"a", "b", "c"}, []string{"b"}, []string{"a"}, []bool{false}},
		{"chain", []string{"a", "b", "c"}, []string{"b", "a", "c"}, []string{"a", "c", ""}, []bool{false, true, false}},
		{"last member", []string{"a"}, []string{"a"}, []string{""}, []bool{false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r := joined(t, tt.members...)
			for i, id := range tt.leave {
				left, moved := s.Leave(r, id)
				if !left {
					t.Fatalf("leave %s: not a member", id)
				}
				if r.Owner() != tt.wantOwner[i] || moved != tt.wantMoved[i] {
					t.Errorf("after %s left: owner %q moved %v, want %q %v", id, r.Owner(), moved, tt.wantOwner[i], tt.wantMoved[i])
				}
			}
		})
	}
}

func TestRejoinAfterHandOverKeepsJoinOrder(t *testing.T) {
	s, r := joined(t, "a", "b", "c")
	s.Leave(r, "a")
	if _, err := s.Join("r", "a", "a"); err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, m := range r.Members() {
		order = append(order, m.ID)
	}
	if want := []string{"b", "c", "a"}; !slices.Equal(order, want) {
		t.Errorf("order %q, want %q", order, want)
	}
}

func TestJoinErrors(t *testing.T) {
	tests := []struct {
		name    string
		max     int
		members []string
		join    string
		want    error
	}{
		{"duplicate", 0, []string{"a", "b"}, "b", ErrDuplicate},
		{"full", 2, []string{"a", "b"}, "c", ErrFull},
		{"duplicate wins over full", 2, []string{"a", "b"}, "a", ErrDuplicate},
		{"room below limit", 3, []string{"a", "b"}, "c", nil},
		{"unlimited", 0, []string{"a", "b", "c", "d"}, "e", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewRegistry[string](tt.max)
			s := g.Shard("r")
			for _, m := range tt.members {
				if _, err := s.Join("r", m, m); err != nil {
					t.Fatal(err)
				}
			}
			_, err := s.Join("r", tt.join, tt.join)
			if !errors.Is(err, tt.want) {
				t.Fatalf("join %s: %v, want %v", tt.join, err, tt.want)
			}
			wantLen := len(tt.members)
			if tt.want == nil {
				wantLen++
			}
			if got := s.Room("r").Len(); got != wantLen {
				t.Errorf("room has %d members, want %d", got, wantLen)
			}
		})
	}
}

func TestRoomLifetime(t *testing.T) {
	g := NewRegistry[string](0)
	s := g.Shard("lobby")
	r, err := s.Join("lobby", "a", "a")
	if err != nil {
		t.Fatal(err)
	}
	if g.Rooms() != 1 || g.Members() != 1 {
		t.Fatalf("rooms %d members %d, want 1 1", g.Rooms(), g.Members())
	}
	if left, _ := s.Leave(r, "nobody"); left {
		t.Error("leave of a non-member reported success")
	}
	s.Leave(r, "a")
	if g.Rooms() != 0 || g.Members() != 0 || s.Room("lobby") != nil {
		t.Fatalf("room not removed: rooms %d members %d", g.Rooms(), g.Members())
	}
	// A rejoin creates a fresh room with the rejoiner as owner.
	r2, err := s.Join("lobby", "b", "b")
	if err != nil || r2 == r || r2.Owner() != "b" {
		t.Fatalf("rejoin: room %p (old %p) owner %q err %v", r2, r, r2.Owner(), err)
	}
}

func TestShardsConcurrent(t *testing.T) {
	g := NewRegistry[string](0)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				name := fmt.Sprintf("room-%d", i%37)
				user := fmt.Sprintf("u%d-%d", w, i)
				s := g.Shard(name)
				s.Lock()
				r, err := s.Join(name, user, user)
				if err == nil {
					s.Leave(r, user)
				}
				s.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if g.Rooms() != 0 || g.Members() != 0 {
		t.Errorf("registry not empty: %d rooms, %d members", g.Rooms(), g.Members())
	}
}
