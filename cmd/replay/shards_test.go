package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// shardNet is where the shards run: with root, one network namespace per
// shard (its own address on a bridge) and one for the relay, so each
// shard's traffic comes from its own host as on a cluster; without root,
// local processes on 127.0.0.1.
type shardNet struct {
	relayNS string   // "" without namespaces
	hosts   []string // per shard (and one more for the single run): namespace name
	addrs   []string // its address
	relayIP string
}

// Addresses of the test's private network inside its namespaces (nothing
// outside them sees it).
const netPrefix = "10.231.0."

// newShardNet makes n+1 hosts (n shards and the single run) around a relay
// host, in namespaces when root may, else on loopback.
func newShardNet(t *testing.T, n int) *shardNet {
	t.Helper()
	sn := &shardNet{}
	if os.Geteuid() != 0 || exec.Command("ip", "netns", "list").Run() != nil {
		t.Log("no network namespaces here (needs root and iproute2): shards run as local processes")
		sn.relayIP = "127.0.0.1"
		for range n + 1 {
			sn.hosts, sn.addrs = append(sn.hosts, ""), append(sn.addrs, "127.0.0.1")
		}
		return sn
	}
	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	add := func(name string) {
		ip("netns", "add", name)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
		ip("-n", name, "link", "set", "lo", "up")
	}
	sn.relayNS, sn.relayIP = "rp"+tag+"-relay", netPrefix+"1"
	add(sn.relayNS)
	ip("-n", sn.relayNS, "link", "add", "br0", "type", "bridge")
	ip("-n", sn.relayNS, "addr", "add", sn.relayIP+"/24", "dev", "br0")
	ip("-n", sn.relayNS, "link", "set", "br0", "up")
	for i := range n + 1 {
		ns, addr := fmt.Sprintf("rp%s-%d", tag, i), fmt.Sprintf("%s%d", netPrefix, 10+i)
		add(ns)
		port := fmt.Sprintf("h%d", i)
		ip("-n", sn.relayNS, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
		ip("-n", sn.relayNS, "link", "set", port, "master", "br0", "up")
		ip("-n", ns, "addr", "add", addr+"/24", "dev", "eth0")
		ip("-n", ns, "link", "set", "eth0", "up")
		sn.hosts, sn.addrs = append(sn.hosts, ns), append(sn.addrs, addr)
	}
	return sn
}

// cmd runs a program on host ns ("" here).
func (sn *shardNet) cmd(ns, bin string, args ...string) *exec.Cmd {
	if ns == "" {
		return exec.Command(bin, args...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
}

// startRelay starts the relay on the relay host; at debug it logs one
// "joined" line per login, with the user id.
func (sn *shardNet) startRelay(t *testing.T, bin, logLevel string) (*testproc.Proc, string) {
	t.Helper()
	addr := sn.relayIP + ":7400"
	if sn.relayNS == "" {
		r := testproc.StartRelay(t, bin, "--log-level", logLevel)
		return r.Proc, r.TCP
	}
	p := testproc.StartCmd(t, sn.cmd(sn.relayNS, bin, "--listen", addr, "--metrics", "", "--log-level", logLevel))
	ctx, cancel := context.WithTimeout(context.Background(), testproc.RelayStartTimeout)
	defer cancel()
	if _, err := p.WaitOutput(ctx, p.Stdout, regexp.MustCompile(`listening`)); err != nil {
		t.Fatalf("relay did not start: %v\n%s", err, p.Stderr)
	}
	return p, addr
}

var (
	loginUser  = regexp.MustCompile(`login attempt.*"user": "([^"]+)"`)
	joinedUser = regexp.MustCompile(`"msg":"joined".*"user":"([^"]+)"`)
)

func matches(re *regexp.Regexp, s string) []string {
	var out []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestShardsMatchOneProcess runs the same replay once as one process and
// once as 4 shards (each in its own network namespace with root) against
// one relay: logins, sends and deliveries agree within 1%, the merged
// percentiles are exactly those of the union of the shards' histograms, the
// shards' user ids are disjoint and together the single run's (as the
// relay saw them join), and the shards started within 50 ms of the
// common start, less what the host kept them waiting for a CPU.
func TestShardsMatchOneProcess(t *testing.T) {
	// Not parallel: not yet tried beside the parallel pool under load.
	const shards = 4
	sn := newShardNet(t, shards)
	relay, target := sn.startRelay(t, bins["relay"], "debug")
	path := writeCapture(t, castScript())
	dir := t.TempDir()
	// 80 clients in rooms of 8, every one sending its script once, at a
	// quarter speed (the sends from 800 ms after each join, when the whole
	// room, in by 160 ms, has joined even on a busy host): the counts are
	// the same however the fleet is split.
	run := []string{"--capture", path, "--target", target, "--clients", "80", "--room-size", "8", "--speed", "0.25",
		"--login-interval", "2ms", "--after-logins", "2500ms", "--heartbeat", "0", "--metrics", "", "--log-level", "debug"}

	one := filepath.Join(dir, "one.json")
	out, err := sn.cmd(sn.hosts[shards], bins["replay"], append(run, "--summary", one)...).CombinedOutput()
	if err != nil {
		t.Fatalf("single run: %v\n%s", err, testproc.Tail(string(out), 30))
	}
	single, _ := readSummary(t, one)
	singleUsers := matches(loginUser, string(out))
	relayBefore := len(relay.Stderr.String())

	barrier := sn.addrs[0] + ":7402"
	cmds := make([]*exec.Cmd, shards)
	for i := range shards {
		args := append(slices.Clone(run), "--shard", fmt.Sprintf("%d/%d", i, shards), "--barrier", barrier,
			"--summary", filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		cmds[i] = sn.cmd(sn.hosts[i], bins["replay"], args...)
	}
	outs := runShards(t, cmds)
	mergedPath := filepath.Join(dir, "merged.json")
	args := []string{"merge", "--summary", mergedPath}
	for i := range shards {
		args = append(args, filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
	}
	if out, err := exec.Command(bins["replay"], args...).CombinedOutput(); err != nil {
		t.Fatalf("replay merge: %v\n%s", err, out)
	}
	merged, _ := readSummary(t, mergedPath)

	t.Logf("one process: logins %d, sent %d, received %d, latency p50 %.3f p99 %.3f ms",
		single.LoginsSucceeded, single.MessagesSent, single.MessagesReceived, single.LatencyMS.P50, single.LatencyMS.P99)
	t.Logf("%d shards:    logins %d, sent %d, received %d, latency p50 %.3f p99 %.3f ms, start skew %s ms",
		shards, merged.LoginsSucceeded, merged.MessagesSent, merged.MessagesReceived, merged.LatencyMS.P50, merged.LatencyMS.P99, ptrText(merged.StartSkewMS))
	for _, c := range []struct {
		what     string
		one, got int64
	}{
		{"logins", single.LoginsSucceeded, merged.LoginsSucceeded},
		{"messages sent", single.MessagesSent, merged.MessagesSent},
		{"messages received", single.MessagesReceived, merged.MessagesReceived},
	} {
		if c.one == 0 || abs(c.got-c.one)*100 > c.one {
			t.Errorf("%s: %d as shards, %d as one process (want within 1%%, and not 0)", c.what, c.got, c.one)
		}
	}

	// The merged percentiles are the union of the shards' histograms'.
	union := hdrhistogram.New(1, int64(5*time.Minute/time.Microsecond), 3)
	var shardUsers [][]string
	for i := range shards {
		s, _ := readSummary(t, filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		h, err := hdrhistogram.Decode([]byte(s.Histograms.LatencyUS))
		if err != nil {
			t.Fatalf("shard %d histogram: %v", i, err)
		}
		union.Merge(h)
		shardUsers = append(shardUsers, matches(loginUser, outs[i]))
	}
	p50, p99 := float64(union.ValueAtQuantile(50))/1000, float64(union.ValueAtQuantile(99))/1000
	if union.TotalCount() == 0 || merged.LatencyMS.P50 != p50 || merged.LatencyMS.P99 != p99 {
		t.Errorf("merged p50/p99 %.3f/%.3f ms, the union of the shards' histograms (%d values) %.3f/%.3f ms",
			merged.LatencyMS.P50, merged.LatencyMS.P99, union.TotalCount(), p50, p99)
	}

	// User ids: disjoint across shards, together the single run's, and
	// what the relay saw join.
	seen := map[string]int{}
	for i, us := range shardUsers {
		for _, u := range us {
			if j, dup := seen[u]; dup {
				t.Errorf("user %s in shards %d and %d", u, j, i)
			}
			seen[u] = i
		}
	}
	all := slices.Sorted(maps.Keys(seen))
	slices.Sort(singleUsers)
	if len(singleUsers) != 80 || !slices.Equal(all, singleUsers) {
		t.Errorf("the shards' users (%d) are not the single run's (%d)", len(all), len(singleUsers))
	}
	joined := matches(joinedUser, relay.Stderr.String()[relayBefore:])
	slices.Sort(joined)
	if !slices.Equal(joined, singleUsers) {
		t.Errorf("the relay saw %d users join from the shards, want the single run's %d", len(joined), len(singleUsers))
	}

	// The shards begin within 50 ms of the common start, but for the time
	// their threads waited for a CPU that other work held (a host busy at
	// several times its cores delays a wake-up by 100 ms and more, which
	// no barrier can make up; each shard measures that share itself).
	if merged.StartSkewMS == nil {
		t.Errorf("no start skew in the merged summary")
	}
	startedTogether(t, dir, shards, merged)
	for _, r := range merged.Shards {
		own := r.StartLateMS - max(0, min(r.StartCPUWaitMS, r.StartLateMS))
		t.Logf("shard %s: late %.2f ms (%.2f ms of it waiting for a CPU), cpu idle %.0f%%, saturated %v",
			r.Shard, r.StartLateMS, r.StartCPUWaitMS, r.CPUIdlePct, r.Saturated)
		if own >= 50 {
			t.Errorf("shard %s began %.2f ms after the common start, %.2f ms of it its own (start skew %s ms), want under 50",
				r.Shard, r.StartLateMS, own, ptrText(merged.StartSkewMS))
		}
	}
}

// startedTogether checks the barrier's part of a common start: every
// shard was given one start instant, the merged skew is the spread of
// the instants the shards really began (that instant plus each one's own
// lateness), and a shard that began more than 20 ms late (the fleet's
// lateStart) says so in its warnings. How late a process wakes from its
// sleep to that instant is largely the host's scheduler's (at load 18 one
// shard woke 213 ms late, count10 session 7, to an instant the barrier
// had sent 500 ms ahead): the figures and the warning must tell it.
func startedTogether(t *testing.T, dir string, shards int, merged fleet.Summary) {
	t.Helper()
	var instant int64
	first, last := math.Inf(1), math.Inf(-1)
	for i := range shards {
		s, _ := readSummary(t, filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		if i == 0 {
			instant = s.StartUnixNS
		}
		if s.StartUnixNS != instant || instant == 0 {
			t.Errorf("shard %d started its clock at %d, shard 0 at %d: the barrier gave one instant", i, s.StartUnixNS, instant)
		}
		began := float64(s.StartUnixNS-instant)/1e6 + s.StartLateMS
		first, last = min(first, began), max(last, began)
		warned := slices.ContainsFunc(s.Warnings, func(w string) bool { return strings.Contains(w, "after the common start") })
		if late := s.StartLateMS > 20; late != warned {
			t.Errorf("shard %d began %.2f ms late, warned %v: want a warning exactly when later than 20 ms (%q)", i, s.StartLateMS, warned, s.Warnings)
		}
	}
	if merged.StartSkewMS == nil || math.Abs(*merged.StartSkewMS-(last-first)) > 0.001 {
		t.Errorf("merged start skew %s ms, the shards began %.3f ms apart", ptrText(merged.StartSkewMS), last-first)
	}
}

func abs(v int64) int64 { return max(v, -v) }

func ptrText(p *float64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("%.2f", *p)
}

// TestShardsScale (opt-in: REPRISE_SHARD_SCALE=clients, e.g. 19000) holds
// that many receive-only clients across 4 shards in network namespaces
// against one relay and prints logins, heartbeats, the merged summary and
// each shard's peak memory per client.
func TestShardsScale(t *testing.T) {
	clients, _ := strconv.Atoi(os.Getenv("REPRISE_SHARD_SCALE"))
	if clients <= 0 {
		t.Skip("opt-in: REPRISE_SHARD_SCALE=19000")
	}
	// Without -race: these are the figures of the real binaries.
	plain, cleanup, err := testproc.Build("relay", "replay")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	const shards = 4
	sn := newShardNet(t, shards)
	_, target := sn.startRelay(t, plain["relay"], "info")
	dur := 20*time.Second + time.Duration(clients)*time.Millisecond
	if v := os.Getenv("REPRISE_SHARD_SCALE_DURATION"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		dur = d
	}
	path := writeCapture(t, castScript())
	dir := t.TempDir()
	run := []string{"--capture", path, "--target", target, "--clients", strconv.Itoa(clients), "--receive-only", "--room-size", "100",
		"--login-interval", "1ms", "--heartbeat", "5s", "--duration", dur.String(), "--metrics", "",
		"--progress-interval", "10s", "--barrier", sn.addrs[0] + ":7402"}
	var wg sync.WaitGroup
	peak := make([]int, shards)
	outs := make([]string, shards)
	errs := make([]error, shards)
	for i := range shards {
		cmd := sn.cmd(sn.hosts[i], plain["replay"], append(slices.Clone(run), "--shard", fmt.Sprintf("%d/%d", i, shards),
			"--summary", filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))...)
		var out testproc.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case err := <-done:
					outs[i], errs[i] = out.String(), err
					return
				case <-tick.C:
					peak[i] = max(peak[i], rssKiB(cmd.Process.Pid))
				}
			}
		})
	}
	wg.Wait()
	args := []string{"merge"}
	for i := range shards {
		if errs[i] != nil {
			t.Fatalf("shard %d: %v\n%s", i, errs[i], testproc.Tail(outs[i], 20))
		}
		args = append(args, filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
	}
	out, err := exec.Command(plain["replay"], args...).CombinedOutput()
	if err != nil {
		t.Fatalf("merge: %v\n%s", err, out)
	}
	t.Logf("merged:\n%s", out)
	for i := range shards {
		s, _ := readSummary(t, filepath.Join(dir, fmt.Sprintf("shard-%d.json", i)))
		t.Logf("shard %d/%d: logged in %d of %d, heartbeats %d, peak RSS %d KiB = %.1f KiB per client",
			i, shards, s.LoginsSucceeded, s.ClientsRequested, s.FramesSent["heartbeat"], peak[i], float64(peak[i])/float64(max(s.LoginsSucceeded, 1)))
	}
}

// TestMergeFromPodLogs: two shards with --summary - write their summary as
// one JSON line among their log lines (as `kubectl logs` of a shard's pod
// shows them), and `replay merge` reads those logs as they are.
func TestMergeFromPodLogs(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	path := writeCapture(t, castScript())
	dir := t.TempDir()
	shards := func(barrier string) []*exec.Cmd {
		cmds := make([]*exec.Cmd, 2)
		for i := range cmds {
			cmds[i] = exec.Command(bins["replay"], "--capture", path, "--target", r.TCP, "--clients", "6", "--room-size", "3",
				"--login-interval", "10ms", "--after-logins", "1s", "--heartbeat", "0", "--metrics", "",
				"--shard", fmt.Sprintf("%d/2", i), "--barrier", barrier, "--summary", "-")
		}
		return cmds
	}
	// stdout and stderr in one stream, as a pod's log
	for i, out := range runShardsAt(t, shards) {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%d.log", i)), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	out, err := exec.Command(bins["replay"], "merge", filepath.Join(dir, "shard-0.log"), filepath.Join(dir, "shard-1.log"),
		"--summary", filepath.Join(dir, "merged.json")).CombinedOutput()
	if err != nil {
		t.Fatalf("replay merge: %v\n%s", err, out)
	}
	m, _ := readSummary(t, filepath.Join(dir, "merged.json"))
	if m.LoginsSucceeded != 6 || m.MessagesSent != 6*8 || len(m.Shards) != 2 || m.Shards[1].ClientsRequested != 3 {
		t.Errorf("merged: logins %d, sent %d, shards %+v", m.LoginsSucceeded, m.MessagesSent, m.Shards)
	}
	// Each shard's log (its table and card on stderr) and the merge.
	shard, err := os.ReadFile(filepath.Join(dir, "shard-1.log"))
	if err != nil {
		t.Fatal(err)
	}
	goldenAnswer(t, "merged", answerCard(string(shard), false)+answerCard(string(out), false))
	// replay k8s run reads the same pod logs, merges them as replay merge
	// does and prints the same card, with the same verdict.
	var sums []fleet.Summary
	for i := range 2 {
		s, err := loadSummary(filepath.Join(dir, fmt.Sprintf("shard-%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, s)
	}
	var k8sOut strings.Builder
	km, err := fleet.Merge(sums)
	if err != nil {
		t.Fatal(err)
	}
	if err := printMerged(&state{stdout: &k8sOut, stderr: io.Discard}, km, t.TempDir(), "", fleet.DefaultMaxLoss); err != nil {
		t.Fatalf("k8s run's merge: %v\n%s", err, k8sOut.String())
	}
	if got, want := answerCard(k8sOut.String(), false), answerCard(string(out), false); got != want {
		t.Errorf("k8s run's card:\n%s\nreplay merge's:\n%s", got, want)
	}
}

// runShards runs one process per shard and returns each one's combined
// output. When one fails, the others are killed at once (they would wait
// at the barrier for it until --barrier-timeout) and the test fails on the
// first failure, with that shard's output.
func runShards(t *testing.T, cmds []*exec.Cmd) []string {
	t.Helper()
	outs, err := runShardsErr(cmds)
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// runShardsErr is runShards returning the first shard's failure.
func runShardsErr(cmds []*exec.Cmd) ([]string, error) {
	outs := make([]strings.Builder, len(cmds))
	type result struct {
		i   int
		err error
	}
	done := make(chan result, len(cmds))
	pending := 0
	for i, c := range cmds {
		c.Stdout, c.Stderr = &outs[i], &outs[i]
		pending++
		if err := c.Start(); err != nil {
			done <- result{i, err}
			break
		}
		go func() { done <- result{i, c.Wait()} }()
	}
	first := result{i: -1}
	for range pending {
		r := <-done
		if r.err == nil || first.i >= 0 {
			continue
		}
		first = r
		for _, c := range cmds {
			if c.Process != nil {
				c.Process.Kill() // an exited one answers "process already finished"
			}
		}
	}
	texts := make([]string, len(cmds))
	for i := range outs {
		texts[i] = outs[i].String()
	}
	if first.i >= 0 {
		return texts, fmt.Errorf("shard %d: %v\n%s", first.i, first.err, testproc.Tail(texts[first.i], 30))
	}
	return texts, nil
}

// runShardsAt runs the shards cmds makes for a barrier on 127.0.0.1 (shard
// 0 serves it) and returns each one's combined output, as runShards. The
// barrier's port is bound here on port 0 and shard 0 serves that listener
// (--barrier-fd): no port is chosen here and bound in another process.
func runShardsAt(t *testing.T, cmds func(barrier string) []*exec.Cmd) []string {
	t.Helper()
	addr, f := testproc.Inherit(t)
	cs := cmds(addr)
	cs[0].Args = append(cs[0].Args, "--barrier-fd", testproc.InheritArg(cs[0], f))
	return runShards(t, cs)
}
