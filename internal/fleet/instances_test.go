package fleet

import (
	"reflect"
	"testing"
)

// TestSenderQuota: with --room-size the senders spread over the
// instances the server is foreseen to make, as over rooms; without it
// every instance's first Senders clients send.
func TestSenderQuota(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want []int // by instance, in the order learnt
	}{
		{"6 over 3 of 50", Config{Clients: 120, Senders: 6, RoomSize: 50}, []int{2, 2, 2, 0}},
		{"10 over 4 of 50", Config{Clients: 200, Senders: 10, RoomSize: 50}, []int{3, 3, 2, 2, 0}},
		{"1 over 2 of 50", Config{Clients: 60, Senders: 1, RoomSize: 50}, []int{1, 0}},
		{"no room size", Config{Clients: 120, Senders: 2}, []int{2, 2, 2}},
		{"all send", Config{Clients: 120}, []int{120, 120}},
		{"receive-only", Config{Clients: 120, Senders: 3, ReceiveOnly: true}, []int{0, 0}},
	} {
		var got []int
		for ord := range tc.want {
			got = append(got, tc.cfg.senderQuota(ord))
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: quotas %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestShardShare: each shard sends its part of an instance's quota, so
// that the shards together send what one process would.
func TestShardShare(t *testing.T) {
	for _, tc := range []struct {
		shard Shard
		quota int
		want  int
	}{
		{Shard{}, 5, 5},
		{Shard{Index: 0, Count: 2}, 5, 3},
		{Shard{Index: 1, Count: 2}, 5, 2},
		{Shard{Index: 2, Count: 3}, 2, 0},
		{Shard{Index: 1, Count: 3}, 0, 0},
	} {
		c := Config{Shard: tc.shard}
		if got := c.shardShare(tc.quota); got != tc.want {
			t.Errorf("shard %+v, quota %d: share %d, want %d", tc.shard, tc.quota, got, tc.want)
		}
	}
}

// TestMergeInstances: shards' instances add up by name, in the order
// first seen.
func TestMergeInstances(t *testing.T) {
	a := []InstanceCount{{Name: "x", Clients: 25, Senders: 1, Sent: 20, Received: 480}, {Name: "y", Clients: 5, Received: 3}}
	b := []InstanceCount{{Name: "y", Clients: 5, Senders: 1, Sent: 20, Received: 90}, {Name: "z", Clients: 1}}
	got := mergeInstances(mergeInstances(nil, a), b)
	want := []InstanceCount{{Name: "x", Clients: 25, Senders: 1, Sent: 20, Received: 480}, {Name: "y", Clients: 10, Senders: 1, Sent: 20, Received: 93}, {Name: "z", Clients: 1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("merged %+v, want %+v", got, want)
	}
}
