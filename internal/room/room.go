// Package room decides who is in which room and who gets which frame: join
// order and ownership, duplicate and size checks, and the recipients of each
// cast mode, as plain data. It opens no sockets and encodes no bytes; the
// relay holds a Registry of rooms and does the I/O.
//
// Locking: a Registry is split into shards by room-name hash, each with its
// own mutex, so rooms on different shards never contend. A Room is only
// touched with its shard locked; callers lock the shard, act, and unlock.
package room

import (
	"errors"

	"github.com/reprise-harness/reprise/internal/wire"
)

// Errors Join returns.
var (
	ErrDuplicate = errors.New("room: user id already in the room")
	ErrFull      = errors.New("room: room is full")
)

// Member is one member of a room: its user id and the caller's handle for it
// (the relay's connection).
type Member[T comparable] struct {
	ID    string
	Value T
}

// Room is a room's members in join order. The owner is always the first
// member: the first to join, and after the owner leaves the longest-present
// member, which is the next one in join order.
type Room[T comparable] struct {
	name    string
	members []Member[T]
	byID    map[string]T
	meter   Meter
}

// Meter is the state of a room's own rate limits, kept with the room so it
// lives and dies with it: the levels of the caller's (the relay's) token
// buckets of what is sent into the room and the latest time they were
// charged at; and how many members sent in the current window (from
// Window) and the one before. Touched with the shard locked.
type Meter struct {
	Msgs, Bytes, Charged int64
	Window               int64
	Senders, Before      int
}

// Meter returns the room's meter.
func (r *Room[T]) Meter() *Meter { return &r.meter }

func newRoom[T comparable](name string) *Room[T] {
	return &Room[T]{name: name, byID: make(map[string]T)}
}

// Name is the room's name.
func (r *Room[T]) Name() string { return r.name }

// Len is the number of members.
func (r *Room[T]) Len() int { return len(r.members) }

// Members returns the members in join order. The slice is the room's own:
// read it only with the shard locked and do not keep it.
func (r *Room[T]) Members() []Member[T] { return r.members }

// Owner returns the owner's id, or "" for an empty room.
func (r *Room[T]) Owner() string {
	if len(r.members) == 0 {
		return ""
	}
	return r.members[0].ID
}

// Has reports whether id is a member.
func (r *Room[T]) Has(id string) bool { _, ok := r.byID[id]; return ok }

// Member returns the handle of member id, if id is a member.
func (r *Room[T]) Member(id string) (T, bool) { v, ok := r.byID[id]; return v, ok }

// add appends a member; maxMembers 0 means no limit.
func (r *Room[T]) add(id string, v T, maxMembers int) error {
	if _, ok := r.byID[id]; ok {
		return ErrDuplicate
	}
	if maxMembers > 0 && len(r.members) >= maxMembers {
		return ErrFull
	}
	r.members = append(r.members, Member[T]{ID: id, Value: v})
	r.byID[id] = v
	return nil
}

// remove takes id out, keeping join order, and reports whether it was there.
func (r *Room[T]) remove(id string) bool {
	if _, ok := r.byID[id]; !ok {
		return false
	}
	delete(r.byID, id)
	for i := range r.members {
		if r.members[i].ID == id {
			copy(r.members[i:], r.members[i+1:])
			r.members[len(r.members)-1] = Member[T]{}
			r.members = r.members[:len(r.members)-1]
			break
		}
	}
	return true
}

// Recipients appends to dst the members a send from sender with mode goes
// to, and returns the extended slice. targets is the unicast or manycast
// target list encoded as on the wire (each id behind a one-byte length, as
// wire.Frame.TargetsRaw returns it); absent targets are skipped and a
// manycast naming a member twice reaches it once. The order is join order
// for broadcast and othercast, target order for unicast and manycast.
func (r *Room[T]) Recipients(dst []T, mode wire.Mode, sender string, targets []byte) []T {
	switch mode {
	case wire.Broadcast:
		for i := range r.members {
			dst = append(dst, r.members[i].Value)
		}
	case wire.Othercast:
		for i := range r.members {
			if r.members[i].ID != sender {
				dst = append(dst, r.members[i].Value)
			}
		}
	case wire.Ownercast:
		if len(r.members) > 0 {
			dst = append(dst, r.members[0].Value)
		}
	case wire.Unicast, wire.Manycast:
		start := len(dst)
		for len(targets) > 0 {
			n := int(targets[0])
			if 1+n > len(targets) {
				break // not from the decoder; stop rather than read past the end
			}
			id := targets[1 : 1+n]
			targets = targets[1+n:]
			v, ok := r.byID[string(id)]
			if ok && !contains(dst[start:], v) {
				dst = append(dst, v)
			}
		}
	}
	return dst
}

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
