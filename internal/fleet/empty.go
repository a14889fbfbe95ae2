package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
)

// ErrNothingLoggedIn marks a run in which no client ever logged in: it
// measured nothing, whatever its duration.
var ErrNothingLoggedIn = errors.New("no client logged in")

// CheckLoggedIn is nil when a client logged in; otherwise an error of one
// line naming the attempts and how they failed.
func (s Summary) CheckLoggedIn() error {
	switch {
	case s.LoginsSucceeded > 0:
		return s.checkTurns()
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

// checkTurns is CheckLoggedIn's for the later connections of clients
// playing flows in turn (turns.go): one that every client tried and none
// reached measured nothing of its server.
func (s Summary) checkTurns() error {
	for _, f := range s.Flows {
		if !f.Then || f.Logins > 0 {
			continue
		}
		prefix := fmt.Sprintf("flow%d_", f.Flow)
		var why []string
		if n := s.NextConnections; n != nil {
			for _, k := range slices.Sorted(maps.Keys(n.Failed)) {
				if strings.HasPrefix(k, prefix) {
					why = append(why, fmt.Sprintf("%s %d", k, n.Failed[k]))
				}
			}
		}
		if len(why) > 0 {
			return nextNotReached(fmt.Sprintf("no client's next connection (flow %d) logged in (%s); their first connections logged in %d of %d",
				f.Flow, strings.Join(why, ", "), s.LoginsSucceeded, s.LoginAttempts))
		}
	}
	return nil
}

// nextNotReached is checkTurns' error: a case of ErrNothingLoggedIn (the
// run logged in nowhere it came to measure) whose line says which
// connection did not, never "no client logged in": every client did, on
// its first connection.
type nextNotReached string

func (e nextNotReached) Error() string { return string(e) }

func (e nextNotReached) Is(target error) bool { return target == ErrNothingLoggedIn }

// DefaultMaxLoss is the loss share, in percent, over which a run fails
// (replay --max-loss), like a k6 threshold.
const DefaultMaxLoss = 1.0

// ErrBrokenServer marks a run that logged in and then found the server
// broken: every client cut, deliveries lost past --max-loss, or none of
// the deliveries owed arriving. The error is one line naming the cause.
var ErrBrokenServer = errors.New("the server failed the run")

// What a broken server failed: Check's error wraps one of these beside
// ErrBrokenServer (its words unchanged), so a caller tells the objective
// without reading the line (replay's answer card).
var (
	ErrAllCut         = errors.New("every logged-in client was cut")
	ErrDeliveriesLost = errors.New("deliveries owed were lost")
)

// brokenBy is a Check error that also matches its objective (kind).
type brokenBy struct {
	error
	kind error
}

func (e brokenBy) Unwrap() []error { return []error{e.error, e.kind} }

// Check is the run's verdict: nil when it measured a server that held;
// otherwise one line naming why not. maxLoss is in percent (negative: no
// loss threshold). A shard's loss is judged on the merged figures, never
// alone: Check of a shard's summary judges its logins and cuts only.
func (s Summary) Check(maxLoss float64) error {
	if err := s.CheckLoggedIn(); err != nil {
		return err
	}
	if cut := sumValues(s.Disconnects); cut >= s.LoginsSucceeded {
		first := ""
		if s.FirstProtocolError != "" {
			first = "; the first protocol error: " + s.FirstProtocolError
		}
		return brokenBy{fmt.Errorf("%w: every logged-in client was cut (%s)%s", ErrBrokenServer, byReason(s.Disconnects), first), ErrAllCut}
	}
	if s.Shard != "" {
		return nil
	}
	d := s.Deliveries
	var err error
	switch {
	case d.Measured() && d.Expected > 0 && d.Received == 0:
		err = fmt.Errorf("%w: %d deliveries were owed to %d clients and none arrived", ErrBrokenServer, d.Expected, d.Receivers)
	case maxLoss < 0:
	case d.Measured() && d.LossPercent > maxLoss:
		err = fmt.Errorf("%w: %d of %d deliveries owed were lost (%.3f%% > --max-loss %g%%); %d of %d receivers got none",
			ErrBrokenServer, d.Lost, d.Expected, d.LossPercent, maxLoss, d.Starved, d.Receivers)
	case !d.Measured() && s.NumberedReceived > 0 && s.LossPercent > maxLoss:
		err = fmt.Errorf("%w: %d numbered deliveries were lost (gaps in their senders' sequences: %.3f%% > --max-loss %g%%)",
			ErrBrokenServer, s.MessagesLost, s.LossPercent, maxLoss)
	}
	if err != nil {
		return brokenBy{err, ErrDeliveriesLost}
	}
	return nil
}

func sumValues(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// protocolError keeps the first protocol error that cut a logged-in
// client (the bytes read, quoted, and the profile's reason) and logs each
// at debug.
func (f *Fleet) protocolError(client int, b []byte, err error) {
	q := quoteBytes(b[:min(len(b), firstBytes)]) + ": " + err.Error()
	f.protoErr.CompareAndSwap(nil, &q)
	f.log.Debug("protocol error", zap.Int("client", client), zap.String("read", q))
}

func (f *Fleet) firstProtocolError() string {
	if p := f.protoErr.Load(); p != nil {
		return *p
	}
	return ""
}

// ErrNoLogin marks a run in which no login completed within the login
// timeout of the first attempt's due time: the target accepted (or
// ignored) the clients and never let one in. The run ends there, with or
// without --duration. It is a case of ErrNothingLoggedIn.
var ErrNoLogin = fmt.Errorf("%w: no login completed", ErrNothingLoggedIn)

// watchFirstLogin ends the run (stop) when no login has completed by the
// login timeout after this process's first attempt was due, and a little
// more for the attempt to report: a target that never answers would keep
// a run without --duration waiting for good.
func (f *Fleet) watchFirstLogin(ctx context.Context, stop context.CancelCauseFunc) {
	first := f.cfg.Shard.Index
	if first >= f.cfg.Clients {
		return
	}
	for {
		if f.stats.succeed.Load() > 0 {
			return
		}
		// The ramp's waits at levels shift its schedule.
		due := f.epoch.Add(f.cfg.loginAt(first) + time.Duration(f.rampShift.Load()) + f.cfg.LoginTimeout + time.Second)
		if wait := time.Until(due); wait > 0 || f.holding.Load() {
			if !sleep(ctx, max(wait, 100*time.Millisecond)) {
				return
			}
			continue
		}
		failed := f.stats.failed.snapshot()
		why := "none failed yet: no answer at all"
		if len(failed) > 0 {
			why = "failed: " + byReason(failed)
		}
		stop(fmt.Errorf("%w within --login-timeout %v of the first attempt: %d attempts to %s, %s", ErrNoLogin, f.cfg.LoginTimeout, f.stats.attempts.Load(), f.target, why))
		return
	}
}
