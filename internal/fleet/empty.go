package fleet

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrNothingLoggedIn marks a run in which no client ever logged in: it
// measured nothing, whatever its duration.
var ErrNothingLoggedIn = errors.New("no client logged in")

// CheckLoggedIn is nil when a client logged in; otherwise an error of one
// line naming the attempts and how they failed.
func (s Summary) CheckLoggedIn() error {
	switch {
	case s.LoginsSucceeded > 0:
		return nil
	case s.LoginAttempts == 0:
		return fmt.Errorf("%w: no login was attempted", ErrNothingLoggedIn)
	}
	var why []string
	for _, k := range slices.Sorted(maps.Keys(s.LoginsFailed)) {
		why = append(why, fmt.Sprintf("%s %d", k, s.LoginsFailed[k]))
	}
	if len(why) == 0 {
		why = append(why, "none failed: the run ended before any answer")
	}
	return fmt.Errorf("%w: %d attempts to %s (%s)", ErrNothingLoggedIn, s.LoginAttempts, s.Target, strings.Join(why, ", "))
}
