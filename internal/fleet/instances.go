package fleet

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/reprise-harness/reprise/internal/profile"
)

// Room instances the server assigns (profile rooms.assigned_by: server):
// every client asks for the recorded room, and the server, not the
// fleet, puts it in an instance (networked-aframe splits a room at 50
// members in join order). The profile's client names its instance once
// its login is done (profile.Instancer); here the fleet places it: the
// instance's casts count its expected deliveries (deliveries.go), and
// whether it sends is decided then, by how many of the instance's
// clients already send, since join order on the server is not the
// fleet's index order. This file knows no protocol: instances are
// names.

// instances are the room instances the server put this process's
// clients in, in the order the fleet learnt them.
type instances struct {
	mu     sync.Mutex
	byName map[string]*instance
	order  []*instance
}

// instance is one server-assigned room instance.
type instance struct {
	name string
	ord  int      // its place in the order learnt
	room castRoom // its casts (deliveries.go)
	// clients and senders are its logged-in clients and how many of them
	// send (under instances.mu); quota is how many of the whole fleet's
	// should (senderQuota), mine how many of this shard's; received sums
	// its clients' received casts as they go (untrack).
	clients, senders int
	quota, mine      int
	received         atomic.Int64
}

// senderQuota is how many of the ord-th instance's clients send: with
// --room-size (the server's split size) the senders are spread over the
// instances it foresees as over rooms (roomSenders; instances past them
// get none, and the fleet warns); without it, the first Senders clients
// of every instance send.
func (c *Config) senderQuota(ord int) int {
	switch {
	case c.ReceiveOnly:
		return 0
	case c.Senders == 0:
		return c.Clients
	case c.RoomSize <= 0:
		return c.Senders
	case ord < c.rooms():
		return c.roomSenders(ord)
	}
	return 0
}

// shardShare is this shard's part of a quota over the whole fleet: the
// quota spread over the shards as evenly as it goes (all of it when the
// fleet is one process).
func (c *Config) shardShare(quota int) int {
	n := c.Shard.count()
	share := quota / n
	if c.Shard.Index < quota%n {
		share++
	}
	return share
}

// place puts a client that just logged in into the instance its server
// named and decides whether it sends; nothing when the fleet's rooms are
// not server-assigned.
func (f *Fleet) place(c *client) {
	if f.insts == nil {
		return
	}
	in, ok := c.pc.(profile.Instancer)
	if !ok {
		return
	}
	name := in.Instance()
	is := f.insts
	is.mu.Lock()
	inst := is.byName[name]
	if inst == nil {
		inst = &instance{name: name, ord: len(is.order)}
		inst.quota = f.cfg.senderQuota(inst.ord)
		inst.mine = f.cfg.shardShare(inst.quota)
		is.byName[name] = inst
		is.order = append(is.order, inst)
	}
	inst.clients++
	sender := inst.senders < inst.mine
	if sender {
		inst.senders++
	}
	is.mu.Unlock()
	c.inst, c.room, c.sender = inst, &inst.room, sender
	if !sender {
		c.plan = c.player.Timeline().ReceiveOnlyPlan(f.cfg.Heartbeat)
	}
}

// InstanceCount is one server-assigned room instance: the clients the
// server put in it, how many of them sent, the casts they sent and the
// casts its clients received.
type InstanceCount struct {
	Name     string `json:"name"`
	Clients  int    `json:"clients"`
	Senders  int    `json:"senders"`
	Sent     int64  `json:"casts_sent"`
	Received int64  `json:"casts_received"`
}

// instanceCounts lists the instances in the order learnt (nil when the
// rooms are not server-assigned).
func (f *Fleet) instanceCounts() []InstanceCount {
	if f.insts == nil {
		return nil
	}
	f.insts.mu.Lock()
	defer f.insts.mu.Unlock()
	out := make([]InstanceCount, 0, len(f.insts.order))
	for _, in := range f.insts.order {
		out = append(out, InstanceCount{Name: in.name, Clients: in.clients, Senders: in.senders, Sent: in.room.count(), Received: in.received.Load()})
	}
	return out
}

// warnSilentInstances warns of instances that hold listeners but no
// sender: they received nothing, whatever the server can do. A shard
// judges by the whole fleet's quota, its own clients being only a part
// of each instance's.
func (f *Fleet) warnSilentInstances() {
	if f.insts == nil || f.cfg.ReceiveOnly {
		return
	}
	f.insts.mu.Lock()
	silent, n := 0, len(f.insts.order)
	for _, in := range f.insts.order {
		if in.clients > in.senders && (in.quota == 0 || !f.cfg.Shard.Sharded() && in.senders == 0) {
			silent++
		}
	}
	f.insts.mu.Unlock()
	if silent > 0 {
		f.warn("WARNING: %d of %d room instances the server assigned hold listeners but no sender (--senders %d, --room-size %d): they receive nothing; give more senders, or --room-size the server's instance size", silent, n, f.cfg.Senders, f.cfg.RoomSize)
	}
}

// line is the text summary's row for the instance.
func (in InstanceCount) line() string {
	return fmt.Sprintf("%d clients, %d senders, %d casts sent, %d received", in.Clients, in.Senders, in.Sent, in.Received)
}

// mergeInstances adds a shard's instances to out's, by name.
func mergeInstances(out, add []InstanceCount) []InstanceCount {
	for _, in := range add {
		found := false
		for i := range out {
			if out[i].Name == in.Name {
				out[i].Clients += in.Clients
				out[i].Senders += in.Senders
				out[i].Sent += in.Sent
				out[i].Received += in.Received
				found = true
				break
			}
		}
		if !found {
			out = append(out, in)
		}
	}
	return out
}
