package fleet

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckNamesWhatFailed: Check's verdict matches the objective that
// failed (ErrNothingLoggedIn, ErrAllCut, ErrDeliveriesLost) beside
// ErrBrokenServer, so a caller (replay's answer card) needs not read its
// line; the line is the same words.
func TestCheckNamesWhatFailed(t *testing.T) {
	held := Summary{Target: "127.0.0.1:7400", ClientsRequested: 4, LoginAttempts: 4, LoginsSucceeded: 4, PeakLoggedIn: 4,
		Deliveries: Deliveries{Expected: 100, Received: 100, Receivers: 4}}
	with := func(f func(*Summary)) Summary { s := held; f(&s); return s }
	cases := []struct {
		name string
		sum  Summary
		is   []error
		line string
	}{
		{"held", held, nil, ""},
		{"nothing logged in", with(func(s *Summary) { s.LoginsSucceeded, s.LoginsFailed = 0, map[string]int64{"refused": 4} }),
			[]error{ErrNothingLoggedIn}, "no client logged in: 4 attempts to 127.0.0.1:7400 (refused 4)"},
		{"every client cut", with(func(s *Summary) { s.Disconnects = map[string]int64{"reset": 4} }),
			[]error{ErrBrokenServer, ErrAllCut}, "the server failed the run: every logged-in client was cut (reset=4)"},
		{"none arrived", with(func(s *Summary) { s.Deliveries = Deliveries{Expected: 100, Receivers: 4, Lost: 100, LossPercent: 100} }),
			[]error{ErrBrokenServer, ErrDeliveriesLost}, "the server failed the run: 100 deliveries were owed to 4 clients and none arrived"},
		{"lost over --max-loss", with(func(s *Summary) {
			s.Deliveries = Deliveries{Expected: 100, Received: 90, Lost: 10, LossPercent: 10, Receivers: 4}
		}),
			[]error{ErrBrokenServer, ErrDeliveriesLost}, "the server failed the run: 10 of 100 deliveries owed were lost (10.000% > --max-loss 1%); 0 of 4 receivers got none"},
	}
	all := []error{ErrNothingLoggedIn, ErrBrokenServer, ErrAllCut, ErrDeliveriesLost}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.sum.Check(DefaultMaxLoss)
			if tc.is == nil {
				if err != nil {
					t.Fatalf("a run that held: %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.line {
				t.Fatalf("verdict %v, want %q", err, tc.line)
			}
			for _, target := range all {
				want := false
				for _, e := range tc.is {
					want = want || e == target
				}
				if got := errors.Is(err, target); got != want {
					t.Errorf("errors.Is(%v) = %v, want %v", target, got, want)
				}
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("more than one line: %q", err)
			}
		})
	}
}
