package relay

import (
	"net/netip"
	"sync"
)

// Per-source caps: what one source address may hold at once, over TCP and
// UDP together: connections (TCP connections plus UDP sessions) and rooms
// (distinct rooms its connections are in). One client with many sockets
// cannot take the relay's connections or rooms from everyone else
// (Config.MaxConnectionsPerSource, Config.MaxRoomsPerSource).
//
// The counts are kept in shards by address, each under its own mutex, a
// leaf: it is taken with nothing else locked, once per connect,
// disconnect, join and leave, never per frame.
type sources struct {
	shards [16]sourceShard
}

type sourceShard struct {
	mu   sync.Mutex
	m    map[netip.Addr]*source
	size shrinking
}

type source struct {
	conns int
	rooms map[string]int // connections in each room
}

func (ss *sources) shard(a netip.Addr) *sourceShard {
	b := a.As16()
	h := uint32(2166136261)
	for _, x := range b {
		h ^= uint32(x)
		h *= 16777619
	}
	return &ss.shards[h%uint32(len(ss.shards))]
}

// get returns a's entry, made if missing; sh must be locked.
func (sh *sourceShard) get(a netip.Addr) *source {
	if sh.m == nil {
		sh.m = make(map[netip.Addr]*source)
	}
	src := sh.m[a]
	if src == nil {
		src = &source{}
		sh.m[a] = src
		sh.size.grew(len(sh.m))
	}
	return src
}

// connect counts a connection from a, unless a holds max already (max <= 0:
// no cap); it reports whether it counted it.
func (ss *sources) connect(a netip.Addr, max int) bool {
	sh := ss.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	src := sh.get(a)
	if max > 0 && src.conns >= max {
		sh.forget(a, src)
		return false
	}
	src.conns++
	return true
}

// disconnect uncounts a connection from a.
func (ss *sources) disconnect(a netip.Addr) {
	sh := ss.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if src := sh.m[a]; src != nil {
		src.conns--
		sh.forget(a, src)
	}
}

// enter counts a connection from a in room, unless that makes a's rooms
// more than max (a room a is in already is no new room); it reports
// whether it counted it.
func (ss *sources) enter(a netip.Addr, room string, max int) bool {
	sh := ss.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	src := sh.get(a)
	if src.rooms == nil {
		src.rooms = make(map[string]int)
	}
	if n := src.rooms[room]; n == 0 && max > 0 && len(src.rooms) >= max {
		sh.forget(a, src)
		return false
	}
	src.rooms[room]++
	return true
}

// exit uncounts a connection from a in room.
func (ss *sources) exit(a netip.Addr, room string) {
	sh := ss.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	src := sh.m[a]
	if src == nil {
		return
	}
	if src.rooms[room]--; src.rooms[room] <= 0 {
		delete(src.rooms, room)
	}
	sh.forget(a, src)
}

// forget drops a's entry once it holds nothing.
func (sh *sourceShard) forget(a netip.Addr, src *source) {
	if src.conns <= 0 && len(src.rooms) == 0 {
		delete(sh.m, a)
		sh.m = shrunk(&sh.size, sh.m)
	}
}

// count is what a holds: connections and rooms (for tests).
func (ss *sources) count(a netip.Addr) (conns, rooms int) {
	sh := ss.shard(a)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if src := sh.m[a]; src != nil {
		return src.conns, len(src.rooms)
	}
	return 0, 0
}
