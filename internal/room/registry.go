package room

import (
	"sync"
	"sync/atomic"
)

// NumShards is how many independently locked parts a Registry has.
const NumShards = 64

// Registry holds every room of a relay. A room exists while it has members:
// Join creates it, and the Leave that removes its last member deletes it.
type Registry[T comparable] struct {
	maxMembers int
	rooms      atomic.Int64
	members    atomic.Int64
	shards     [NumShards]Shard[T]
}

// NewRegistry returns an empty registry whose rooms hold at most maxMembers
// members each (0: no limit).
func NewRegistry[T comparable](maxMembers int) *Registry[T] {
	g := &Registry[T]{maxMembers: maxMembers}
	for i := range g.shards {
		g.shards[i].g = g
		g.shards[i].rooms = make(map[string]*Room[T])
	}
	return g
}

// Rooms is the number of rooms that exist.
func (g *Registry[T]) Rooms() int { return int(g.rooms.Load()) }

// Members is the number of members over all rooms.
func (g *Registry[T]) Members() int { return int(g.members.Load()) }

// Shard returns the shard that holds the room named name.
func (g *Registry[T]) Shard(name string) *Shard[T] {
	// FNV-1a: cheap, no allocation, spreads short similar names well.
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	return &g.shards[h%NumShards]
}

// Shard is one independently locked part of a Registry. Every method of a
// Shard, and of the Rooms it returns, needs the shard locked.
type Shard[T comparable] struct {
	mu    sync.Mutex
	g     *Registry[T]
	rooms map[string]*Room[T]
}

// Lock locks the shard.
func (s *Shard[T]) Lock() { s.mu.Lock() }

// Unlock unlocks the shard.
func (s *Shard[T]) Unlock() { s.mu.Unlock() }

// Room returns the room named name, or nil if it does not exist.
func (s *Shard[T]) Room(name string) *Room[T] { return s.rooms[name] }

// Join adds user with handle v to the room named name, creating the room if
// needed. It returns ErrDuplicate if the user id is in the room already and
// ErrFull if the room is at its member limit; the room is unchanged then.
func (s *Shard[T]) Join(name, user string, v T) (*Room[T], error) {
	r := s.rooms[name]
	created := r == nil
	if created {
		r = newRoom[T](name)
	}
	if err := r.add(user, v, s.g.maxMembers); err != nil {
		return nil, err
	}
	if created {
		s.rooms[name] = r
		s.g.rooms.Add(1)
	}
	s.g.members.Add(1)
	return r, nil
}

// Leave removes user from r. It reports whether the user was a member and
// whether the owner changed; the room is deleted when its last member left.
func (s *Shard[T]) Leave(r *Room[T], user string) (left, ownerChanged bool) {
	wasOwner := r.Owner() == user
	if !r.remove(user) {
		return false, false
	}
	s.g.members.Add(-1)
	if r.Len() == 0 && s.rooms[r.name] == r {
		delete(s.rooms, r.name)
		s.g.rooms.Add(-1)
		return true, false
	}
	return true, wasOwner
}
