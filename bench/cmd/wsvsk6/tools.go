package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/reprise-harness/reprise/bench/internal/proc"
)

// tool is one load tool's process.
type tool struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	err  error
}

func startTool(name string, bin string, args ...string) (*tool, error) {
	t := &tool{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	t.cmd.Stdout, t.cmd.Stderr = &t.out, &t.out
	if err := t.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { t.err = t.cmd.Wait(); close(t.done) }() // owned by t: ends with the process
	return t, nil
}

// cpuTime is a process's CPU time from the kernel's accounting: all of
// it, and the part in user space (the tool's own code and runtime, what
// issue 34 counts per message; the rest is the kernel's, mostly its TCP).
type cpuTime struct{ total, user time.Duration }

// wait waits for the exit (ctx ending interrupts the tool first); it
// returns the process's CPU time.
func (t *tool) wait(ctx context.Context, limit time.Duration) (cpuTime, error) {
	select {
	case <-t.done:
	case <-ctx.Done():
		t.stop()
		return cpuTime{}, ctx.Err()
	case <-time.After(limit):
		t.stop()
		return cpuTime{}, fmt.Errorf("%s still running after %v", t.name, limit)
	}
	if t.err != nil {
		return cpuTime{}, fmt.Errorf("%s: %w\n%s", t.name, t.err, tail(t.out.String()))
	}
	ru := t.cmd.ProcessState.SysUsage().(*syscall.Rusage)
	user := time.Duration(ru.Utime.Nano())
	return cpuTime{total: user + time.Duration(ru.Stime.Nano()), user: user}, nil
}

// stop interrupts the tool (both print their summary on SIGINT) and
// waits, killing it after 20 s.
func (t *tool) stop() {
	t.cmd.Process.Signal(os.Interrupt)
	select {
	case <-t.done:
	case <-time.After(20 * time.Second):
		t.cmd.Process.Kill()
		<-t.done
	}
}

func tail(s string) string {
	if len(s) > 2000 {
		return s[len(s)-2000:]
	}
	return s
}

// loadRun is one tool's load run.
type loadRun struct {
	Tool       string  `json:"tool"`
	Rep        int     `json:"rep"`
	CPUSeconds float64 `json:"cpu_s"`
	// UserSeconds is the part of CPUSeconds in user space.
	UserSeconds float64 `json:"user_s"`
	Sent        int64   `json:"sent"`
	Received    int64   `json:"received"`
	ServerIn    int64   `json:"server_in"`
	ServerOut   int64   `json:"server_out"`
	P99MS       float64 `json:"p99_ms"`
	Offered     float64 `json:"offered_fraction"`
}

// CPUPerMillion is CPU seconds per million received.
func (r loadRun) CPUPerMillion() float64 { return r.CPUSeconds / float64(r.Received) * 1e6 }

// UserNSPerMessage is user-space CPU nanoseconds per message received.
func (r loadRun) UserNSPerMessage() float64 { return r.UserSeconds / float64(r.Received) * 1e9 }

func loadRuns(ctx context.Context, c config, addr, capPath string) ([]loadRun, error) {
	var runs []loadRun
	for rep := 1; rep <= c.reps; rep++ {
		order := []string{"fleet", "k6"}
		if rep%2 == 0 {
			order = []string{"k6", "fleet"}
		}
		for _, name := range order {
			if name == "k6" && c.k6 == "" {
				continue
			}
			r, err := loadRunOf(ctx, c, name, rep, addr, capPath)
			if err != nil {
				return nil, err
			}
			fmt.Printf("load\t%s\trep %d\tcpu %.2f s\tsent %d\treceived %d (server in %d out %d)\tp99 %.2f ms\toffered %.3f\tcpu/M %.3f s\tuser %.0f ns/msg\n",
				r.Tool, r.Rep, r.CPUSeconds, r.Sent, r.Received, r.ServerIn, r.ServerOut, r.P99MS, r.Offered, r.CPUPerMillion(), r.UserNSPerMessage())
			runs = append(runs, r)
		}
	}
	return runs, nil
}

func loadRunOf(ctx context.Context, c config, name string, rep int, addr, capPath string) (loadRun, error) {
	r := loadRun{Tool: name, Rep: rep}
	before, err := getStats(addr)
	if err != nil {
		return r, err
	}
	clients := c.rooms * c.roomSize
	sum := filepath.Join(c.out, fmt.Sprintf("%s-load-%d.json", name, rep))
	var t *tool
	if name == "fleet" {
		// Message #0 once, then #1..#198 in a loop (a loop cannot start
		// at the first message); the logins take 0.2 s of the duration.
		t, err = startTool(name, filepath.Join(c.bin, "replay"), "--profile", c.profile, "--capture", capPath,
			"--target", addr, "--clients", fmt.Sprint(clients), "--room-size", fmt.Sprint(c.roomSize),
			"--loop", "#1,#199", "--login-interval", "1ms", "--duration", c.duration.String(),
			"--heartbeat", "0", "--metrics", "", "--progress-interval", "1h", "--log-level", "warn", "--summary", sum)
	} else {
		t, err = startTool(name, c.k6, "run", "--quiet", "--no-color", "--summary-export", sum,
			"-e", "TARGET="+addr, "-e", fmt.Sprintf("ROOMS=%d", c.rooms), "-e", fmt.Sprintf("ROOM_SIZE=%d", c.roomSize),
			"-e", fmt.Sprintf("RATE=%g", c.rate), "-e", fmt.Sprintf("DURATION_S=%g", c.duration.Seconds()), c.script)
	}
	if err != nil {
		return r, err
	}
	cpu, err := t.wait(ctx, c.duration+3*time.Minute)
	if err != nil {
		return r, err
	}
	if err := waitConns(ctx, addr, 0, nil, 30*time.Second); err != nil {
		return r, err
	}
	after, err := getStats(addr)
	if err != nil {
		return r, err
	}
	r.CPUSeconds, r.UserSeconds = cpu.total.Seconds(), cpu.user.Seconds()
	r.ServerIn, r.ServerOut = after.In-before.In, after.Out-before.Out
	if name == "fleet" {
		err = readFleet(sum, &r)
	} else {
		err = readK6(sum, &r)
	}
	if err != nil {
		return r, err
	}
	if r.Received == 0 {
		return r, fmt.Errorf("%s rep %d received nothing\n%s", name, rep, tail(t.out.String()))
	}
	r.Offered = float64(r.Received) / (float64(clients) * c.rate * c.duration.Seconds() * float64(c.roomSize-1))
	return r, nil
}

func readFleet(path string, r *loadRun) error {
	var s struct {
		Sent     int64 `json:"messages_sent"`
		Received int64 `json:"messages_received"`
		Latency  struct {
			P99 float64 `json:"p99"`
		} `json:"latency_ms"`
	}
	if err := readJSON(path, &s); err != nil {
		return err
	}
	r.Sent, r.Received, r.P99MS = s.Sent, s.Received, s.Latency.P99
	return nil
}

func readK6(path string, r *loadRun) error {
	var s struct {
		Metrics struct {
			Sent     struct{ Count int64 } `json:"room_sent"`
			Received struct{ Count int64 } `json:"room_received"`
			Latency  struct {
				P99 float64 `json:"p(99)"`
			} `json:"room_latency"`
		} `json:"metrics"`
	}
	if err := readJSON(path, &s); err != nil {
		return err
	}
	r.Sent, r.Received, r.P99MS = s.Metrics.Sent.Count, s.Metrics.Received.Count, s.Metrics.Latency.P99
	return nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// idleRun is one tool's idle memory at n clients.
type idleRun struct {
	Tool      string  `json:"tool"`
	Rep       int     `json:"rep"`
	Clients   int     `json:"clients"`
	RSSKiB    float64 `json:"rss_kib"`
	BaseKiB   float64 `json:"base_kib"`
	PerClient float64 `json:"kib_per_client"`
}

func idleRuns(ctx context.Context, c config, addr, capPath string) ([]idleRun, error) {
	type job struct {
		tool string
		n    int
	}
	jobs := []job{{"fleet", c.idleK6}}
	if c.idleFleet != c.idleK6 {
		jobs = append(jobs, job{"fleet", c.idleFleet})
	}
	if c.k6 != "" {
		jobs = append(jobs, job{"k6", c.idleK6})
	}
	var runs []idleRun
	for rep := 1; rep <= c.reps; rep++ {
		for _, j := range jobs {
			r := idleRun{Tool: j.tool, Rep: rep, Clients: j.n}
			var err error
			// 1 and N alternate in order, as in scripts/fleet-idle.sh.
			if rep%2 == 1 {
				r.BaseKiB, err = idleRSS(ctx, c, j.tool, 1, addr, capPath)
				if err == nil {
					r.RSSKiB, err = idleRSS(ctx, c, j.tool, j.n, addr, capPath)
				}
			} else {
				r.RSSKiB, err = idleRSS(ctx, c, j.tool, j.n, addr, capPath)
				if err == nil {
					r.BaseKiB, err = idleRSS(ctx, c, j.tool, 1, addr, capPath)
				}
			}
			if err != nil {
				return nil, err
			}
			r.PerClient = (r.RSSKiB - r.BaseKiB) / float64(j.n-1)
			fmt.Printf("idle\t%s\trep %d\t%d clients\trss %.0f KiB\tbase %.0f KiB\t%.2f KiB per client\n",
				r.Tool, r.Rep, r.Clients, r.RSSKiB, r.BaseKiB, r.PerClient)
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// idleSettle is how long a tool holds its clients before its RSS is read:
// the ramp's garbage is returned by then.
const idleSettle = 3 * time.Second

// idleRSS starts the tool with n receive-only clients, reads its VmRSS in
// KiB once the server holds them all and idleSettle passed, and stops it.
func idleRSS(ctx context.Context, c config, name string, n int, addr, capPath string) (float64, error) {
	var t *tool
	var err error
	if name == "fleet" {
		t, err = startTool(name, filepath.Join(c.bin, "replay"), "--profile", c.profile, "--capture", capPath,
			"--target", addr, "--clients", fmt.Sprint(n), "--room-size", "100", "--receive-only", "--heartbeat", "0",
			"--login-interval", "150us", "--login-timeout", "60s", "--duration", "1h", "--metrics", "",
			"--progress-interval", "1h", "--log-level", "warn")
	} else {
		t, err = startTool(name, c.k6, "run", "--quiet", "--no-color", "--no-summary", "-e", "TARGET="+addr,
			"-e", "MODE=idle", "-e", fmt.Sprintf("CLIENTS=%d", n), "-e", "ROOM_SIZE=100",
			"-e", fmt.Sprintf("ROOMS=%d", (n+99)/100), "-e", "DURATION_S=3600", c.script)
	}
	if err != nil {
		return 0, err
	}
	defer t.stop()
	if err := waitConns(ctx, addr, int64(n), t.done, 5*time.Minute); err != nil {
		return 0, fmt.Errorf("%s idle %d: %w\n%s", name, n, err, tail(t.out.String()))
	}
	select {
	case <-time.After(idleSettle):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	rss, err := proc.RSS(t.cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	t.stop()
	if err := waitConns(ctx, addr, 0, nil, time.Minute); err != nil {
		return 0, err
	}
	return float64(rss) / 1024, nil
}
