package profile

import (
	"fmt"
	"strconv"
	"strings"
)

// FlowSet chooses several recorded flows to replay in one fleet (--flows):
// every usable flow (All), or the listed indexes of `replay inspect`, each
// with a weight (Weights, parallel to Indexes; nil: 1 each). The zero
// FlowSet chooses none: the fleet plays the one flow of Source.Flow or
// Source.Client.
type FlowSet struct {
	All     bool
	Indexes []int
	Weights []int
}

// Weight is the weight of the k-th listed flow.
func (s FlowSet) Weight(k int) int {
	if k < len(s.Weights) {
		return s.Weights[k]
	}
	return 1
}

// IsSet reports whether s chooses flows.
func (s FlowSet) IsSet() bool { return s.All || len(s.Indexes) > 0 }

// String is s as ParseFlowSet reads it.
func (s FlowSet) String() string {
	if s.All {
		return "all"
	}
	parts := make([]string, len(s.Indexes))
	for i, n := range s.Indexes {
		parts[i] = strconv.Itoa(n)
		if s.Weights != nil {
			parts[i] += ":" + strconv.Itoa(s.Weight(i))
		}
	}
	return strings.Join(parts, ",")
}

// maxWeight caps a flow's weight in --flows.
const maxWeight = 1_000_000

// ParseFlowSet reads "all" or a comma list of distinct flow indexes, each
// optionally with a weight ("0:3,1:1": three clients play flow 0 for each
// that plays flow 1); "" is the zero FlowSet.
func ParseFlowSet(text string) (FlowSet, error) {
	text = strings.TrimSpace(text)
	switch text {
	case "":
		return FlowSet{}, nil
	case "all":
		return FlowSet{All: true}, nil
	}
	var s FlowSet
	weighted := false
	for _, p := range strings.Split(text, ",") {
		idx, w, hasW := strings.Cut(strings.TrimSpace(p), ":")
		n, err := strconv.Atoi(strings.TrimSpace(idx))
		if err != nil || n < 0 {
			return FlowSet{}, fmt.Errorf("%q: want \"all\" or flow indexes like 0,2, optionally weighted like 0:3,1:1 (see replay inspect)", text)
		}
		weight := 1
		if hasW {
			weight, err = strconv.Atoi(strings.TrimSpace(w))
			if err != nil || weight < 1 || weight > maxWeight {
				return FlowSet{}, fmt.Errorf("%q: flow %d: weight %q is not a whole number from 1 to %d", text, n, w, maxWeight)
			}
			weighted = true
		}
		s.Weights = append(s.Weights, weight)
		for _, m := range s.Indexes {
			if m == n {
				return FlowSet{}, fmt.Errorf("%q: flow %d listed twice", text, n)
			}
		}
		s.Indexes = append(s.Indexes, n)
	}
	if !weighted {
		s.Weights = nil
	}
	return s, nil
}

// FlowSetValue is a FlowSet as a command-line flag (pflag.Value).
type FlowSetValue struct{ S *FlowSet }

func (v FlowSetValue) String() string {
	if v.S == nil {
		return ""
	}
	return v.S.String()
}

// Set parses text into the FlowSet.
func (v FlowSetValue) Set(text string) error {
	s, err := ParseFlowSet(text)
	if err != nil {
		return err
	}
	*v.S = s
	return nil
}

// Type names the flag's value in the usage.
func (FlowSetValue) Type() string { return "all|i[:w],j[:w],..." }
