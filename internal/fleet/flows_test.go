package fleet

import (
	"errors"
	"slices"
	"testing"
)

func TestParseFlowSet(t *testing.T) {
	for _, tc := range []struct {
		text string
		want FlowSet
		bad  bool
	}{
		{text: "", want: FlowSet{}},
		{text: "all", want: FlowSet{All: true}},
		{text: " all ", want: FlowSet{All: true}},
		{text: "0", want: FlowSet{Indexes: []int{0}}},
		{text: "2,0, 5", want: FlowSet{Indexes: []int{2, 0, 5}}},
		{text: "1,1", bad: true},
		{text: "-1", bad: true},
		{text: "a", bad: true},
		{text: "0,", bad: true},
		{text: "all,1", bad: true},
	} {
		got, err := ParseFlowSet(tc.text)
		if (err != nil) != tc.bad {
			t.Errorf("ParseFlowSet(%q) error %v, want bad=%v", tc.text, err, tc.bad)
			continue
		}
		if tc.bad {
			continue
		}
		if got.All != tc.want.All || !slices.Equal(got.Indexes, tc.want.Indexes) {
			t.Errorf("ParseFlowSet(%q) = %+v, want %+v", tc.text, got, tc.want)
		}
		if back, err := ParseFlowSet(got.String()); err != nil || back.All != got.All || !slices.Equal(back.Indexes, got.Indexes) {
			t.Errorf("ParseFlowSet(%q).String() = %q does not read back (%v)", tc.text, got.String(), err)
		}
	}
}

// TestFlowAssignment: client i plays flow i mod F, the counts per flow
// add up to the fleet and differ by at most one, the first flows taking
// the remainder.
func TestFlowAssignment(t *testing.T) {
	for _, tc := range []struct {
		clients, flows int
		first          []int // flowOf for clients 0..len-1
		counts         []int
	}{
		{clients: 20, flows: 2, first: []int{0, 1, 0, 1}, counts: []int{10, 10}},
		{clients: 7, flows: 3, first: []int{0, 1, 2, 0, 1, 2, 0}, counts: []int{3, 2, 2}},
		{clients: 1, flows: 3, first: []int{0}, counts: []int{1, 0, 0}},
		{clients: 5, flows: 1, first: []int{0, 0, 0, 0, 0}, counts: []int{5}},
		{clients: 50, flows: 50, first: []int{0, 1, 2}, counts: slices.Repeat([]int{1}, 50)},
	} {
		for i, want := range tc.first {
			if got := flowOf(i, tc.flows); got != want {
				t.Errorf("flowOf(%d, %d) = %d, want %d", i, tc.flows, got, want)
			}
		}
		counts := flowClients(tc.clients, tc.flows)
		if !slices.Equal(counts, tc.counts) {
			t.Errorf("flowClients(%d, %d) = %v, want %v", tc.clients, tc.flows, counts, tc.counts)
		}
		// The counts are what flowOf gives, client by client.
		byClient := make([]int, tc.flows)
		for i := range tc.clients {
			byClient[flowOf(i, tc.flows)]++
		}
		if !slices.Equal(byClient, counts) {
			t.Errorf("%d clients over %d flows: flowOf gives %v, flowClients %v", tc.clients, tc.flows, byClient, counts)
		}
	}
}

func TestFlowsExcludeFlow(t *testing.T) {
	c := DefaultConfig()
	c.Capture, c.Target = "x.pcap", "127.0.0.1:1"
	c.Flows = FlowSet{All: true}
	if err := c.Validate(); err != nil {
		t.Fatalf("--flows all: %v", err)
	}
	c.Flow = 1
	if err := c.Validate(); !errors.Is(err, ErrBadConfig) {
		t.Errorf("--flows with --flow: %v, want a bad configuration", err)
	}
}
