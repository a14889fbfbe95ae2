package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestShardSet(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Shard
		ok   bool
	}{
		{"0/1", Shard{0, 1}, true},
		{"3/4", Shard{3, 4}, true},
		{" 2 / 16 ", Shard{2, 16}, true},
		{"4/4", Shard{}, false},
		{"-1/4", Shard{}, false},
		{"1/0", Shard{}, false},
		{"1", Shard{}, false},
		{"a/b", Shard{}, false},
	} {
		var s Shard
		err := s.Set(tc.in)
		if (err == nil) != tc.ok || (tc.ok && s != tc.want) {
			t.Errorf("Set(%q) = %v, %v; want %v ok=%v", tc.in, s, err, tc.want, tc.ok)
		}
	}
}

// clientID is what a client is, from its global index: the fields that
// must not depend on how many shards run the fleet.
type clientID struct {
	user, room string
	peers      string
	sender     bool
	at         time.Duration
}

func identity(c *Config, i int) clientID {
	return clientID{user: c.userID(i), room: c.roomName(i, "lobby"), peers: strings.Join(c.peers(i, 2), ","),
		sender: c.isSender(i), at: c.loginAt(i)}
}

// TestShardsPartitionTheFleet: for any shard count, the shards' clients are
// disjoint, together the whole fleet, each shard gets its share, and every
// client keeps the identity, room, peers, role and login time it has in
// one process (the ramp with pauses included).
func TestShardsPartitionTheFleet(t *testing.T) {
	c := DefaultConfig()
	c.Clients, c.Senders, c.RoomSize = 103, 7, 10
	c.LoginInterval, c.PauseEvery, c.Pause = 10*time.Millisecond, 25, time.Second
	whole := map[int]clientID{}
	for i := range (Shard{}).indexes(c.Clients) {
		whole[i] = identity(&c, i)
	}
	if len(whole) != c.Clients {
		t.Fatalf("unsharded ramp has %d clients, want %d", len(whole), c.Clients)
	}
	for n := 1; n <= 17; n++ {
		seen := map[int]bool{}
		for k := range n {
			sh := Shard{Index: k, Count: n}
			got := 0
			last := time.Duration(-1)
			for i := range sh.indexes(c.Clients) {
				if seen[i] {
					t.Fatalf("%d shards: client %d in two shards", n, i)
				}
				seen[i] = true
				got++
				if !sh.Owns(i) {
					t.Errorf("shard %v runs client %d it does not own", sh, i)
				}
				if id := identity(&c, i); id != whole[i] {
					t.Errorf("shard %v client %d: %+v, one process: %+v", sh, i, id, whole[i])
				}
				if at := c.loginAt(i); at <= last {
					t.Errorf("shard %v: login %d at %v not after the previous %v", sh, i, at, last)
				} else {
					last = at
				}
			}
			if got != sh.Clients(c.Clients) {
				t.Errorf("shard %v ran %d clients, Clients says %d", sh, got, sh.Clients(c.Clients))
			}
		}
		if len(seen) != c.Clients {
			t.Errorf("%d shards ran %d distinct clients, want %d", n, len(seen), c.Clients)
		}
	}
}

// TestLoginAt: the ramp's due times are the one-process ramp's: an
// interval between attempts, a pause instead after every K.
func TestLoginAt(t *testing.T) {
	c := Config{LoginInterval: 100 * time.Millisecond, PauseEvery: 3, Pause: time.Second}
	want := []time.Duration{0, 100, 200, 1200, 1300, 1400, 2400}
	for i, w := range want {
		if got := c.loginAt(i); got != w*time.Millisecond {
			t.Errorf("loginAt(%d) = %v, want %v", i, got, w*time.Millisecond)
		}
	}
}

// TestLevelsConfig: levels need a function to call at each, sharded or
// not (a shard's waits at its coordinator's level barrier).
func TestLevelsConfig(t *testing.T) {
	at := func(context.Context, int) bool { return true }
	sh := Shard{Index: 1, Count: 2}
	for _, tc := range []struct {
		name   string
		levels []int
		at     func(context.Context, int) bool
		shard  Shard
		ok     bool
	}{
		{"function", []int{5, 10}, at, Shard{}, true},
		{"function, sharded", []int{5, 10}, at, sh, true},
		{"no function", []int{5, 10}, nil, Shard{}, false},
		{"not increasing", []int{5, 5}, at, Shard{}, false},
		{"past clients", []int{5, 11}, at, Shard{}, false},
		{"no levels", nil, nil, Shard{}, true},
	} {
		c := DefaultConfig()
		c.Capture, c.Target, c.Clients = "x.pcap", "127.0.0.1:1", 10
		c.Levels, c.AtLevel, c.Shard = tc.levels, tc.at, tc.shard
		err := c.validate()
		if isLevelsErr := err != nil && strings.Contains(err.Error(), "levels"); isLevelsErr == tc.ok {
			t.Errorf("%s: validate() = %v", tc.name, err)
		}
	}
}

// TestSendersSpreadOverRooms: --senders with --room-size puts senders in
// every room as evenly as they go, the first clients of each room; fewer
// senders than rooms leaves rooms silent, which the fleet warns of.
func TestSendersSpreadOverRooms(t *testing.T) {
	tests := []struct {
		clients, senders, roomSize int
		want                       []int // senders per room
		silent                     int
	}{
		{200, 10, 50, []int{3, 3, 2, 2}, 0},
		{200, 10, 0, []int{10}, 0},
		{200, 3, 50, []int{1, 1, 1, 0}, 1},
		{10, 4, 3, []int{1, 1, 1, 1}, 0},
		{7, 0, 3, []int{3, 3, 1}, 0},
	}
	for _, tt := range tests {
		c := Config{Clients: tt.clients, Senders: tt.senders, RoomSize: tt.roomSize}
		got := make([]int, c.rooms())
		for i := range tt.clients {
			if c.isSender(i) {
				r := 0
				if tt.roomSize > 0 {
					r = i / tt.roomSize
					if i%tt.roomSize >= got[r]+1 {
						t.Errorf("%+v: client %d sends but an earlier one of its room does not", tt, i)
					}
				}
				got[r]++
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) || c.silentRooms() != tt.silent {
			t.Errorf("clients %d senders %d room size %d: senders per room %v, silent %d; want %v, %d", tt.clients, tt.senders, tt.roomSize, got, c.silentRooms(), tt.want, tt.silent)
		}
	}
}
