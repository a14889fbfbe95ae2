package fleet

import (
	"errors"
	"fmt"
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
	next := func(tried, ok int64, failed map[string]int64) *NextConnections {
		return &NextConnections{Tried: tried, LoggedIn: ok, Failed: failed}
	}
	for _, tc := range []struct {
		name   string
		s      Summary
		failed string // "" when nil
	}{
		{"none reached", Summary{LoginAttempts: 6, LoginsSucceeded: 5, Flows: flows(0), LoginsFailed: map[string]int64{"timeout": 1},
			NextConnections: next(5, 0, map[string]int64{"flow3_connect_refused": 5})},
			"no client's next connection (flow 3) logged in (flow3_connect_refused 5); their first connections logged in 5 of 6"},
		{"some reached", Summary{LoginsSucceeded: 5, Flows: flows(2), NextConnections: next(5, 2, map[string]int64{"flow3_connect_refused": 3})}, ""},
		{"run ended first", Summary{LoginsSucceeded: 5, Flows: flows(0), NextConnections: next(0, 0, nil)}, ""},
		{"no turns", Summary{LoginsSucceeded: 5, Flows: []FlowClients{{Flow: 0, Logins: 5}}, LoginsFailed: map[string]int64{"flow0_x": 1}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.CheckLoggedIn()
			switch {
			case tc.failed == "" && err != nil:
				t.Errorf("error %v; want none", err)
			case tc.failed != "" && (err == nil || !errors.Is(err, ErrNothingLoggedIn) || err.Error() != tc.failed):
				t.Errorf("error %v; want %q", err, tc.failed)
			}
		})
	}
}

// TestMergeNextConnections: replay merge adds the shards' next
// connections (tried, logged in, failures by reason) and leaves the
// logins each client's one; shards without turns add nothing.
func TestMergeNextConnections(t *testing.T) {
	var sums []Summary
	for i, n := range []*NextConnections{
		{Tried: 5, LoggedIn: 4, Failed: map[string]int64{"flow1_connect_refused": 1}},
		{Tried: 6, LoggedIn: 3, Failed: map[string]int64{"flow1_connect_refused": 1, "flow1_timeout": 1}, Stopped: 1},
	} {
		s := shardSummary(t, fmt.Sprintf("%d/2", i), []int64{1000}, []int64{10})
		s.LoginAttempts, s.LoginsSucceeded, s.NextConnections = 5, 5, n
		sums = append(sums, s)
	}
	m, err := Merge(sums)
	if err != nil {
		t.Fatal(err)
	}
	want := "11 tried, 7 logged in, 1 stopped by the run's end, failed: flow1_connect_refused=2 flow1_timeout=1"
	if m.LoginsSucceeded != 10 || m.LoginAttempts != 10 || m.NextConnections == nil || m.NextConnections.line() != want {
		t.Errorf("merged logins %d of %d, next connections %+v; want 10 of 10 and %q", m.LoginsSucceeded, m.LoginAttempts, m.NextConnections, want)
	}
	plain, err := Merge([]Summary{shardSummary(t, "0/1", []int64{1000}, []int64{10})})
	if err != nil || plain.NextConnections != nil {
		t.Errorf("a fleet without turns merged next connections %+v (%v)", plain.NextConnections, err)
	}
}
