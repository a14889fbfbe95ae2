package fleet

import (
	"errors"
	"slices"
	"testing"

	"github.com/reprise-harness/reprise/internal/profile"
)

// TestFlowAssignment: client i plays flow i mod F (weights 1), or by
// weights in blocks of their sum; the counts per flow add up to the fleet
// and are what flowOf gives client by client.
func TestFlowAssignment(t *testing.T) {
	ones := func(n int) []int { return slices.Repeat([]int{1}, n) }
	for _, tc := range []struct {
		clients int
		weights []int
		first   []int // flowOf for clients 0..len-1
		counts  []int
	}{
		{clients: 20, weights: ones(2), first: []int{0, 1, 0, 1}, counts: []int{10, 10}},
		{clients: 7, weights: ones(3), first: []int{0, 1, 2, 0, 1, 2, 0}, counts: []int{3, 2, 2}},
		{clients: 1, weights: ones(3), first: []int{0}, counts: []int{1, 0, 0}},
		{clients: 5, weights: ones(1), first: []int{0, 0, 0, 0, 0}, counts: []int{5}},
		{clients: 50, weights: ones(50), first: []int{0, 1, 2}, counts: ones(50)},
		{clients: 20, weights: []int{3, 1}, first: []int{0, 0, 0, 1, 0, 0, 0, 1}, counts: []int{15, 5}},
		{clients: 6, weights: []int{3, 1}, first: []int{0, 0, 0, 1, 0, 0}, counts: []int{5, 1}},
		{clients: 7, weights: []int{1, 2, 3}, first: []int{0, 1, 1, 2, 2, 2, 0}, counts: []int{2, 2, 3}},
		{clients: 2, weights: []int{1, 5}, first: []int{0, 1}, counts: []int{1, 1}},
	} {
		for i, want := range tc.first {
			if got := flowOf(i, tc.weights); got != want {
				t.Errorf("flowOf(%d, %v) = %d, want %d", i, tc.weights, got, want)
			}
		}
		counts := flowClients(tc.clients, tc.weights)
		if !slices.Equal(counts, tc.counts) {
			t.Errorf("flowClients(%d, %v) = %v, want %v", tc.clients, tc.weights, counts, tc.counts)
		}
		// The counts are what flowOf gives, client by client.
		byClient := make([]int, len(tc.weights))
		for i := range tc.clients {
			byClient[flowOf(i, tc.weights)]++
		}
		if !slices.Equal(byClient, counts) {
			t.Errorf("%d clients over weights %v: flowOf gives %v, flowClients %v", tc.clients, tc.weights, byClient, counts)
		}
	}
}

func TestFlowsExcludeFlow(t *testing.T) {
	c := DefaultConfig()
	c.Capture, c.Target = "x.pcap", "127.0.0.1:1"
	c.Flows = profile.FlowSet{All: true}
	if err := c.Validate(); err != nil {
		t.Fatalf("--flows all: %v", err)
	}
	c.Flow = 1
	if err := c.Validate(); !errors.Is(err, ErrBadConfig) {
		t.Errorf("--flows with --flow: %v, want a bad configuration", err)
	}
}
