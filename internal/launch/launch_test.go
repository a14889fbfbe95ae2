package launch

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

var bins map[string]string

func TestMain(m *testing.M) {
	os.Exit(testproc.Main(m, &bins, testproc.Options{CheckLeaks: true}, "relay"))
}

// poseConfig is a fleet of n clients looping a join and a pose every
// 14 ms against target.
func poseConfig(target string, n int) fleet.Config {
	fr := []session.Frame{{Offset: 0, Bytes: wire.AppendJoin(nil, "lobby", "alice", nil, 0)}}
	pose := bytes.Repeat([]byte{0x5a}, 100)
	for t := 100 * time.Millisecond; t < 600*time.Millisecond; t += 14 * time.Millisecond {
		fr = append(fr, session.Frame{Offset: t, Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, Payload: pose})})
	}
	c := fleet.DefaultConfig()
	c.Frames, c.Capture, c.Target = fr, "synthetic", target
	c.Clients, c.Loop, c.LoginInterval, c.Duration = n, "100ms,600ms", 20*time.Millisecond, time.Minute
	return c
}

// TestInProcessLevels: the fleet waits at each level for the driver's
// word; Resume goes on, Stop ends the run there, with no attempt past the
// deciding level, long before the run's duration.
func TestInProcessLevels(t *testing.T) {
	r := testproc.StartRelay(t, bins["relay"], "--log-level", "warn")
	cfg := poseConfig(r.TCP, 9)
	cfg.Levels = []int{3, 6, 9}
	// Without Stop the fleet would wait at its level until ctx ends: the
	// run ending before ctx is the stop's doing, however slow the host.
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Patience(t))
	defer cancel()
	f, err := InProcess{}.Prepare(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	start, err := f.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// StartLead from the instant of the call, whenever the host ran it.
	if after := time.Now(); start.Before(before.Add(StartLead)) || start.After(after.Add(StartLead)) {
		t.Errorf("start %v after the call began and %v after it returned, want %v from within the call", start.Sub(before), start.Sub(after), StartLead)
	}
	var seen []Level
	for l := range f.Levels() {
		seen = append(seen, l)
		if l.Attempts < 6 {
			f.Resume(l)
			continue
		}
		// Hold the deciding level until its logins are in, as a capacity
		// search holds it: the level comes one login interval after the
		// last attempt, and a loaded host may not have answered it yet
		// (a Stop then cuts it: attempts 6, logins 5).
		waitLoggedIn(ctx, t, f, 6)
		f.Stop()
	}
	sum, err := f.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0].Index != 0 || seen[0].Attempts != 3 || seen[1].Index != 1 || seen[1].Attempts != 6 {
		t.Errorf("levels %+v, want 3 (index 0) then 6 (index 1)", seen)
	}
	if sum.LoginAttempts != 6 || sum.LoginsSucceeded != 6 {
		t.Errorf("attempts %d, logins %d: want 6 and 6 (stopped at level 6)", sum.LoginAttempts, sum.LoginsSucceeded)
	}
	if ctx.Err() != nil {
		t.Errorf("ran %v, until the test's context ended: the stop did not end the run", time.Since(before).Round(time.Millisecond))
	}
}

// waitLoggedIn waits until f's replay_clients_logged_in reaches n (or ctx
// ends).
func waitLoggedIn(ctx context.Context, t *testing.T, f Fleet, n float64) {
	t.Helper()
	for ctx.Err() == nil {
		mfs, err := f.Targets()[0].Gatherer.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "replay_clients_logged_in" && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge().GetValue() >= n {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestInProcessStopBeforeLevels: a fleet stopped by its context ends with
// its summary and closes Levels.
func TestInProcessStopBeforeLevels(t *testing.T) {
	r := testproc.StartRelay(t, bins["relay"], "--log-level", "warn")
	cfg := poseConfig(r.TCP, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := InProcess{}.Prepare(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	if _, err := f.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(StartLead+500*time.Millisecond, stop)
	for range f.Levels() {
		t.Error("a level without levels")
	}
	sum, err := f.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if sum.LoginAttempts == 0 || sum.LoginAttempts > 4 {
		t.Errorf("attempts %d, want 1 to 4", sum.LoginAttempts)
	}
}

func TestPrefixed(t *testing.T) {
	var b bytes.Buffer
	w := Prefixed(&b, "[x] ")
	for _, s := range []string{"one\ntw", "o\n", "three\n"} {
		if _, err := w.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := b.String(), "[x] one\n[x] two\n[x] three\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
