package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/bench/internal/proc"
)

// config is the command line.
type config struct {
	bin, wsroom, k6, profile, script, out string
	reps, rooms, roomSize                 int
	rate                                  float64
	duration                              time.Duration
	idleFleet, idleK6                     int
	skipLoad, skipIdle                    bool
}

func parse(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("wsvsk6", flag.ContinueOnError)
	fs.StringVar(&c.bin, "bin", "../bin", "directory holding replay and record (make build)")
	fs.StringVar(&c.wsroom, "wsroom", "../bin/wsroom", "the room server (go build ./cmd/wsroom)")
	fs.StringVar(&c.k6, "k6", "", "the k6 binary (default: k6 on PATH; none: the k6 half is skipped)")
	fs.StringVar(&c.profile, "profile", "wsroom.yaml", "the fleet's profile for wsroom")
	fs.StringVar(&c.script, "script", "k6/wsroom.js", "k6's script")
	fs.StringVar(&c.out, "out", "", "directory for captures, summaries and results.json (default: a new one in /tmp)")
	fs.IntVar(&c.reps, "reps", 3, "interleaved fleet/k6 pairs")
	fs.IntVar(&c.rooms, "rooms", 10, "rooms")
	fs.IntVar(&c.roomSize, "room-size", 20, "clients per room")
	fs.Float64Var(&c.rate, "rate", 20, "messages per second per client (the recording's, and k6's)")
	fs.DurationVar(&c.duration, "duration", 30*time.Second, "sending time of each load run")
	fs.IntVar(&c.idleFleet, "idle-clients", 10000, "idle receive-only clients the fleet holds")
	fs.IntVar(&c.idleK6, "k6-idle-clients", 1000, "idle clients k6 holds (and the fleet again, for the same-N ratio)")
	fs.BoolVar(&c.skipLoad, "no-load", false, "skip the load runs")
	fs.BoolVar(&c.skipIdle, "no-idle", false, "skip the idle-memory runs")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.reps < 1 || c.rooms < 1 || c.roomSize < 2 || c.rate <= 0 || c.duration <= 0 {
		return c, fmt.Errorf("--reps, --rooms ≥ 1, --room-size ≥ 2, --rate and --duration > 0")
	}
	if c.k6 == "" {
		c.k6, _ = exec.LookPath("k6")
	}
	if c.out == "" {
		d, err := os.MkdirTemp("", "wsvsk6.")
		if err != nil {
			return c, err
		}
		c.out = d
	}
	return c, os.MkdirAll(c.out, 0o755)
}

func run(ctx context.Context, args []string) error {
	c, err := parse(args)
	if err != nil {
		return err
	}
	fmt.Printf("# %s load: %s out=%s\n", time.Now().UTC().Format(time.RFC3339), loadavg(), c.out)
	if c.k6 == "" {
		fmt.Println("k6: not installed (make deps-bench-fleet: go install go.k6.io/k6@v1.8.1): the fleet alone")
	}
	srv, addr, err := startRoom(ctx, c)
	if err != nil {
		return err
	}
	defer srv.Stop()
	capPath, err := record(ctx, c, addr)
	if err != nil {
		return err
	}
	var res results
	if !c.skipLoad {
		if res.Load, err = loadRuns(ctx, c, addr, capPath); err != nil {
			return err
		}
	}
	if !c.skipIdle {
		if res.Idle, err = idleRuns(ctx, c, addr, capPath); err != nil {
			return err
		}
	}
	res.print(os.Stdout, c.k6 != "")
	fmt.Printf("# load now: %s\n", loadavg())
	b, _ := json.MarshalIndent(res, "", "  ")
	return os.WriteFile(filepath.Join(c.out, "results.json"), b, 0o644)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// startRoom runs wsroom as its own process.
func startRoom(ctx context.Context, c config) (*proc.Server, string, error) {
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	s, err := proc.Start(ctx, "wsroom", c.wsroom, []string{"--listen", addr}, addr)
	return s, addr, err
}

// record makes the capture: wsroom's scripted client through record proxy.
func record(ctx context.Context, c config, addr string) (string, error) {
	capPath := filepath.Join(c.out, "wsroom.pcap")
	listen, err := proc.FreeAddr()
	if err != nil {
		return "", err
	}
	p, err := proc.Start(ctx, "record proxy", filepath.Join(c.bin, "record"),
		[]string{"proxy", "--listen", listen, "--upstream", addr, "--out", capPath}, listen)
	if err != nil {
		return "", err
	}
	out, cerr := exec.CommandContext(ctx, c.wsroom, "client", "--url", "ws://"+listen+"/ws?room=lobby&user=alice01",
		"--rate", fmt.Sprint(c.rate), "--duration", "10s").CombinedOutput()
	if err := p.Stop(); err != nil || cerr != nil {
		return "", fmt.Errorf("recording: client %v (%s), proxy %v", cerr, out, err)
	}
	return capPath, nil
}

// roomStats is wsroom's /stats.
type roomStats struct {
	Connections, In, Out, Dropped int64
}

func getStats(addr string) (roomStats, error) {
	var s roomStats
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		return s, fmt.Errorf("wsroom stats: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return s, fmt.Errorf("wsroom stats: %w", err)
	}
	return s, nil
}

// waitConns waits until the server holds n connections (or ctx ends, or
// the tool exits: done closes).
func waitConns(ctx context.Context, addr string, n int64, done <-chan struct{}, limit time.Duration) error {
	end := time.Now().Add(limit)
	for {
		s, err := getStats(addr)
		if err != nil {
			return err
		}
		if s.Connections == n {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("wsroom holds %d connections after %v, want %d", s.Connections, limit, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return fmt.Errorf("the tool exited with the server at %d connections, want %d", s.Connections, n)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
