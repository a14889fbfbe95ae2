package fleet

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckTurns: a later connection of clients playing flows in turn
// that every client tried and none reached fails the run as one that
// logged in nothing there; one not reached before the run ended, or
// reached by some, does not.
func TestCheckTurns(t *testing.T) {
	flows := func(next int64) []FlowClients {
		return []FlowClients{{Flow: 0, Clients: 5, Logins: 5}, {Flow: 3, Clients: 5, Logins: next, Then: true}}
	}
	for _, tc := range []struct {
		name   string
		s      Summary
		failed string // "" when nil
	}{
		{"none reached", Summary{LoginsSucceeded: 5, Flows: flows(0), LoginsFailed: map[string]int64{"flow3_connect_refused": 5, "timeout": 1}},
			"no client's next connection (flow 3) logged in (flow3_connect_refused 5)"},
		{"some reached", Summary{LoginsSucceeded: 7, Flows: flows(2), LoginsFailed: map[string]int64{"flow3_connect_refused": 3}}, ""},
		{"run ended first", Summary{LoginsSucceeded: 5, Flows: flows(0)}, ""},
		{"no turns", Summary{LoginsSucceeded: 5, Flows: []FlowClients{{Flow: 0, Logins: 5}}, LoginsFailed: map[string]int64{"flow0_x": 1}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.CheckLoggedIn()
			switch {
			case tc.failed == "" && err != nil:
				t.Errorf("error %v; want none", err)
			case tc.failed != "" && (err == nil || !errors.Is(err, ErrNothingLoggedIn) || !strings.Contains(err.Error(), tc.failed)):
				t.Errorf("error %v; want %q", err, tc.failed)
			}
		})
	}
}
