package profile

import (
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
		{text: "0:3,1:1", want: FlowSet{Indexes: []int{0, 1}, Weights: []int{3, 1}}},
		{text: "0:3,1", want: FlowSet{Indexes: []int{0, 1}, Weights: []int{3, 1}}},
		{text: "2 : 5", want: FlowSet{Indexes: []int{2}, Weights: []int{5}}},
		{text: "0:0", bad: true},
		{text: "0:-1", bad: true},
		{text: "0:", bad: true},
		{text: "0:x", bad: true},
		{text: "0:2000000", bad: true},
		{text: "0:1,0:2", bad: true},
		{text: "all:2", bad: true},
	} {
		got, err := ParseFlowSet(tc.text)
		if (err != nil) != tc.bad {
			t.Errorf("ParseFlowSet(%q) error %v, want bad=%v", tc.text, err, tc.bad)
			continue
		}
		if tc.bad {
			continue
		}
		if got.All != tc.want.All || !slices.Equal(got.Indexes, tc.want.Indexes) || !slices.Equal(got.Weights, tc.want.Weights) {
			t.Errorf("ParseFlowSet(%q) = %+v, want %+v", tc.text, got, tc.want)
		}
		if back, err := ParseFlowSet(got.String()); err != nil || back.All != got.All || !slices.Equal(back.Indexes, got.Indexes) || !slices.Equal(back.Weights, got.Weights) {
			t.Errorf("ParseFlowSet(%q).String() = %q does not read back (%v)", tc.text, got.String(), err)
		}
	}
}
