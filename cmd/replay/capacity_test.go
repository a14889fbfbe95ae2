package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// bundledCapture is the repository's recorded VR session.
func bundledCapture(t *testing.T) string {
	t.Helper()
	root, err := testproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "captures", "vr-session.pcap")
}

// capacityRun is one `replay capacity` run: its output, its report and
// what the test saw of the relay child meanwhile.
type capacityRun struct {
	stdout, stderr string
	sum            report.Summary
	series         [][]string // series.csv rows, header first
	relayPID       int
	relayCPU       float64 // the child's CPU seconds, last read from /proc
}

// runCapacity runs replay capacity with args (no --target: replay starts
// the relay child), reads the child's CPU from /proc while it lives, and
// interrupts replay with SIGINT once stderr matches interruptAt (nil:
// never). It checks that the child is gone at the end.
func runCapacity(t *testing.T, interruptAt *regexp.Regexp, args ...string) capacityRun {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report")
	p := testproc.Start(t, bins["replay"], append([]string{"capacity", "--capture", bundledCapture(t), "--out", out,
		"--sample-interval", "500ms", "--progress-interval", "1m"}, args...)...)
	// The search ends by itself: wait as long as the test may (a fixed
	// bound measured the host: these runs took over 90 s at load 30).
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Patience(t))
	defer cancel()
	m, err := p.WaitOutput(ctx, p.Stderr, childLine)
	if err != nil {
		t.Fatal(err)
	}
	var res capacityRun
	res.relayPID, _ = strconv.Atoi(m[1])
	interrupted := false
	for !p.Exited() && ctx.Err() == nil {
		if cpu, err := procCPUSeconds(res.relayPID); err == nil {
			res.relayCPU = cpu
		}
		if interruptAt != nil && !interrupted && interruptAt.MatchString(p.Stderr.String()) {
			if err := p.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			interrupted = true
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.Wait(testproc.Patience(t)); err != nil {
		t.Fatalf("replay capacity: %v\nstdout:\n%s\nstderr:\n%s", err, p.Stdout, testproc.Tail(p.Stderr.String(), 40))
	}
	res.stdout, res.stderr = p.Stdout.String(), p.Stderr.String()
	checkRelayChildGone(t, res.stderr)
	b, err := os.ReadFile(filepath.Join(out, report.SummaryFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res.sum); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(out, report.SeriesFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if res.series, err = csv.NewReader(f).ReadAll(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "relay.log")); err != nil {
		t.Errorf("relay.log in the report folder: %v", err)
	}
	return res
}

// procCPUSeconds is a process's user plus system CPU from /proc.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Fields after the command (which may hold spaces) end with ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, err
	}
	const clockTicks = 100 // USER_HZ on Linux
	return (utime + stime) / clockTicks, nil
}

// column returns series.csv's column by name as floats (NaN when empty).
func (r capacityRun) column(t *testing.T, name string) []float64 {
	t.Helper()
	idx := -1
	for i, h := range r.series[0] {
		if h == name {
			idx = i
		}
	}
	if idx < 0 {
		t.Fatalf("series.csv has no column %s", name)
	}
	var out []float64
	for _, row := range r.series[1:] {
		v, err := strconv.ParseFloat(row[idx], 64)
		if err != nil {
			v = math.NaN()
		}
		out = append(out, v)
	}
	return out
}

// TestCapacityRoomCap: a relay capping rooms at 40 (its child started by
// replay with --relay-flags) refuses every login past 40; the search
// answers 40 for login failures, its series shows attempts going past 40
// while logged-in stays flat, and the relay CPU in the report is the
// child's own, as /proc saw it.
func TestCapacityRoomCap(t *testing.T) {
	t.Parallel()
	res := runCapacity(t, nil, "--senders", "2", "--loop=12s,48s", "--start", "20", "--step", "20", "--max", "80", "--hold", "3s",
		"--login-interval", "50ms", "--relay-flags", "--max-room-members 40",
		"--slo", "p99=off,idle=off,fleet_idle=off,lag=off")
	c := res.sum.Capacity
	if c == nil {
		t.Fatalf("no capacity in summary.json:\n%s", res.stdout)
	}
	if float64(c.Held) != 40 || c.Reason != report.ReasonLoginFailures || c.BrokeAt != 60 {
		t.Errorf("answer: held %v, reason %v, broke at %d; want 40, login failures, 60\n%s", c.Held, c.Reason, c.BrokeAt, res.stdout)
	}
	if !strings.HasPrefix(res.sum.Headline, "1:N: held 40 users") || !strings.Contains(res.stdout, res.sum.Headline) {
		t.Errorf("headline %q not the answer or not on stdout:\n%s", res.sum.Headline, res.stdout)
	}
	// The plateau as the chart draws it: attempts rise from 40 to past it
	// while logged-in stays at 40.
	att, in := res.column(t, "login_attempts"), res.column(t, "logged_in")
	plateau := false
	for i := range att {
		if in[i] != 40 || att[i] > 40 {
			continue
		}
		for j := i + 1; j < len(att) && in[j] == 40; j++ {
			plateau = plateau || att[j] > 40
		}
	}
	if !plateau {
		t.Errorf("no stretch with logged-in flat at 40 while attempts rise past it: attempts %v, logged in %v", att, in)
	}
	for i := range in {
		if in[i] > 40 {
			t.Errorf("logged in %v at sample %d: over the relay's cap", in[i], i)
		}
	}
	// Relay CPU in the report is the child's: over the run it used no more
	// than /proc says the child used in all (start-up and the stop
	// included), and most of it; the replay process's CPU (the fleet) is
	// reported apart.
	if len(res.sum.Runs) != 1 {
		t.Fatalf("runs in summary.json: %d", len(res.sum.Runs))
	}
	run := res.sum.Runs[0]
	relay := float64(run.RelayProcessCPUSeconds)
	if res.relayCPU <= 0 || relay > res.relayCPU+0.05 || relay < 0.6*res.relayCPU-0.2 {
		t.Errorf("relay CPU in summary.json %.2f s, the child (pid %d) used %.2f s per /proc", relay, res.relayPID, res.relayCPU)
	}
	if math.IsNaN(float64(run.FleetProcessCPUSeconds)) || len(res.column(t, "relay_process_cpu_pct")) == 0 {
		t.Errorf("no fleet CPU (%v) or no relay CPU series", run.FleetProcessCPUSeconds)
	}
	t.Logf("relay CPU: summary %.2f s, /proc %.2f s; fleet CPU %.2f s\n%s", relay, res.relayCPU, float64(run.FleetProcessCPUSeconds), res.stdout)
}

// TestCapacityLatency: an uncapped relay and a tight latency objective;
// the search stops at a level for latency or drops, and places the answer
// between the last two levels' clients. The first level is one client,
// alone in its room, with no deliveries to be late: it holds however
// loaded the host (a first level of a few clients broke for latency at a
// load of 30 on 2 CPUs).
func TestCapacityLatency(t *testing.T) {
	t.Parallel()
	res := runCapacity(t, nil, "--start", "1", "--step", "60", "--max", "121", "--hold", "3s", "--login-interval", "20ms",
		"--loop=12s,48s", "--slo", "p99<50ms,idle=off,fleet_idle=off,lag=off")
	c := res.sum.Capacity
	if c == nil {
		t.Fatalf("no capacity in summary.json:\n%s", res.stdout)
	}
	n := len(c.Levels)
	if c.Reason != report.ReasonLatency && c.Reason != report.ReasonDisconnects && !latencyBrokeOnStarvedHost(res.sum, c) {
		t.Fatalf("reason %v, want latency or disconnects\n%s", c.Reason, res.stdout)
	}
	if n < 2 {
		t.Fatalf("the first level (%d clients) already broke: %s\n%s", c.Levels[0].Clients, c.Answer, res.stdout)
	}
	lo, hi := float64(c.Levels[n-2].Clients), float64(c.Levels[n-1].Clients)
	if h := float64(c.Held); h < lo || h > hi {
		t.Errorf("held %v, want between the last two levels %v and %v\n%s", h, lo, hi, res.stdout)
	}
	t.Logf("%s", res.stdout)
}

// latencyBrokeOnStarvedHost reports whether the level that stopped the
// search broke for latency or disconnects as well as for login failures,
// on a host the fleet found busy with other work or itself saturated: a
// level's logins still pending at its hold's end count as failed, and
// login failures rank first (40 of 60 pending at load 29, the relay and
// the fleet at 6 % of a core each).
func latencyBrokeOnStarvedHost(s report.Summary, c *report.Capacity) bool {
	starved := false
	for _, r := range s.Runs {
		starved = starved || float64(r.HostBusyS) > 0 || float64(r.FleetSaturatedS) > 0
	}
	if c.Reason != report.ReasonLoginFailures || !starved || len(c.Levels) == 0 {
		return false
	}
	return slices.ContainsFunc(c.Levels[len(c.Levels)-1].Breaches, func(b report.Breach) bool {
		return b.Reason == report.ReasonLatency || b.Reason == report.ReasonDisconnects
	})
}

// TestCapacityInterrupt: SIGINT during a level stops the search, the report
// of the completed levels is written and the relay child is gone.
func TestCapacityInterrupt(t *testing.T) {
	t.Parallel()
	res := runCapacity(t, regexp.MustCompile(`capacity: level 5:`), "--receive-only", "--start", "5", "--step", "5",
		"--max", "100", "--hold", "2s", "--login-interval", "20ms", "--slo", "idle=off,fleet_idle=off,lag=off")
	c := res.sum.Capacity
	if c == nil || len(c.Levels) == 0 || len(c.Levels) > 3 {
		t.Fatalf("capacity after SIGINT: %+v\n%s", c, res.stdout)
	}
	found := false
	for _, w := range res.sum.Warnings {
		found = found || strings.Contains(w, "interrupted")
	}
	if !found {
		t.Errorf("no interruption warning: %q", res.sum.Warnings)
	}
}

// TestCapacityRoomCapShards: the search of TestCapacityRoomCap with its
// fleet run as 2 local shard processes started together: every shard
// waits at every level, the levels are judged on the sum of both shards'
// metrics, both stop at the deciding level, and the answer is the same
// (40, login failures); the shards' summaries merge into the report with
// each shard's CPU idle.
func TestCapacityRoomCapShards(t *testing.T) {
	t.Parallel()
	res := runCapacity(t, nil, "--shards", "2", "--local", "--senders", "2", "--loop=12s,48s",
		"--start", "20", "--step", "20", "--max", "80", "--hold", "3s",
		"--login-interval", "50ms", "--relay-flags", "--max-room-members 40",
		"--slo", "p99=off,idle=off,fleet_idle=off,lag=off")
	c := res.sum.Capacity
	if c == nil {
		t.Fatalf("no capacity in summary.json:\n%s", res.stdout)
	}
	if float64(c.Held) != 40 || c.Reason != report.ReasonLoginFailures || c.BrokeAt != 60 {
		t.Errorf("answer: held %v, reason %v, broke at %d; want 40, login failures, 60\n%s\n%s", c.Held, c.Reason, c.BrokeAt, res.stdout, testproc.Tail(res.stderr, 30))
	}
	// Judged on both shards: level 20 and 40 saw all their logins, though
	// each shard runs only half of them.
	for _, l := range c.Levels {
		if l.Clients <= 40 && float64(l.LoggedIn) != float64(l.Clients) {
			t.Errorf("level %d: %v logged in, want all (the shards' metrics summed)", l.Clients, l.LoggedIn)
		}
	}
	for i, in := range res.column(t, "logged_in") {
		if in > 40 {
			t.Errorf("logged in %v at sample %d: over the relay's cap", in, i)
		}
	}
	if len(res.sum.Runs) != 1 {
		t.Fatalf("%d runs in summary.json, want 1", len(res.sum.Runs))
	}
	var fs fleet.Summary
	if err := json.Unmarshal(res.sum.Runs[0].FleetSummary, &fs); err != nil {
		t.Fatalf("fleet summary: %v", err)
	}
	if len(fs.Shards) != 2 {
		t.Fatalf("fleet summary has %d shards, want 2: %+v", len(fs.Shards), fs.Shards)
	}
	var logins int64
	for _, s := range fs.Shards {
		logins += s.LoginsSucceeded
	}
	// Stopped at the deciding level 60: no shard went on to 80.
	if fs.LoginsSucceeded != 40 || logins != 40 || fs.LoginAttempts > 60 {
		t.Errorf("merged logins %d (shards %d), attempts %d; want 40, 40, at most 60", fs.LoginsSucceeded, logins, fs.LoginAttempts)
	}
	if !strings.Contains(res.stderr, "fleet ran as 2 shards") || !strings.Contains(res.stderr, "% idle") {
		t.Errorf("no line with each shard's CPU idle:\n%s", testproc.Tail(res.stderr, 30))
	}
	t.Logf("%s", res.stdout)
}
