package compare

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/bench/internal/load"
	"github.com/reprise-harness/reprise/bench/internal/proc"
)

// Main is benchcompare's command line: flags, building both servers,
// running the comparison, printing and writing the results.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchcompare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workloads := fs.String("workloads", "4x32,8x32,16x32,1:1000", "comma-separated workloads: RxM (R rooms of M members, all sending) or 1:N (one sender, N receivers)")
	servers := fs.String("servers", "reprise,reprise-udp,floor,nats", "servers to compare, in the order each repetition runs them: reprise (the relay over TCP), reprise-udp (the same relay over UDP), floor (bench/cmd/udpfloor: the least UDP fan-out, one sendmmsg of the same datagram to all), nats")
	reps := fs.Int("reps", 2, "repetitions of each workload per server (A B A B …); medians are reported")
	rate := fs.Float64("rate", 72, "sends per second per sender")
	payload := fs.Int("payload", 200, "payload bytes per message")
	duration := fs.Duration("duration", 10*time.Second, "measurement window per run")
	warmup := fs.Duration("warmup", 2*time.Second, "sending before the window opens")
	drain := fs.Duration("drain", 3*time.Second, "longest wait for in-flight deliveries after sending stops")
	spread := fs.Bool("spread", false, "give each sender of a room its own phase in the period (independent clients) instead of one burst per room per tick")
	cooldown := fs.Duration("cooldown", time.Second, "pause between runs")
	idle := fs.Int("idle", 10000, "connections for the idle-RSS test (0 skips it)")
	idleRoom := fs.Int("idle-room", 32, "members per room in the idle-RSS test")
	fleet := fs.Int("fleet-idle", 10000, "receive-only cmd/replay clients for the fleet-RSS test (0 skips it; needs ../cmd/replay)")
	fleetLoads := fs.String("fleet-load", "8x32,16x32", "N:N workloads replayed by cmd/replay itself to measure the fleet's CPU per message (empty skips)")
	repo := fs.String("repo", "..", "the reprise repository (cmd/relay is built from it)")
	relayBin := fs.String("relay-bin", "", "a relay binary to use instead of building ../cmd/relay")
	relayArgs := fs.String("relay-args", "--log-level warn", "extra relay flags")
	profile := fs.String("profile", "", "perf-record each server during its first run of --profile-workload into PREFIX-<server>.perf.data and .stat (needs perf)")
	profileWorkload := fs.String("profile-workload", "8x32", "workload to profile the servers under")
	jsonOut := fs.String("json", "", "write the report as JSON to this file (default results/<time>.json)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := Options{Reps: *reps, Rate: *rate, Payload: *payload, Warmup: *warmup, Duration: *duration,
		Drain: *drain, Cooldown: *cooldown, Spread: *spread, IdleConns: *idle, IdleRoom: *idleRoom, Log: stderr}
	for _, s := range strings.Split(*workloads, ",") {
		if strings.TrimSpace(s) == "" {
			continue // --workloads "" runs only the idle tests
		}
		w, err := ParseWorkload(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		o.Workloads = append(o.Workloads, w)
	}
	dir, err := os.MkdirTemp("", "benchcompare")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	for _, name := range strings.Split(*servers, ",") {
		t, err := target(ctx, strings.TrimSpace(name), dir, *repo, *relayBin, *relayArgs)
		if err != nil {
			return err
		}
		o.Targets = append(o.Targets, t)
	}
	o.TempDir = dir
	for _, s := range strings.Split(*fleetLoads, ",") {
		if strings.TrimSpace(s) == "" {
			continue
		}
		w, err := ParseWorkload(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--fleet-load: %w", err)
		}
		o.FleetLoads = append(o.FleetLoads, w)
	}
	if *fleet > 1 || len(o.FleetLoads) > 0 {
		o.FleetClients = *fleet
		o.ReplayBin = filepath.Join(dir, "replay")
		if err := goBuild(ctx, *repo, o.ReplayBin, "./cmd/replay"); err != nil {
			return fmt.Errorf("--fleet-idle and --fleet-load need cmd/replay (--fleet-idle 0 --fleet-load '' skip them): %w", err)
		}
	}
	if *profile != "" {
		o.OnRun = profiler(*profile, *profileWorkload, stderr)
	}
	rep, err := Compare(ctx, o)
	if rep == nil {
		return err
	}
	path := *jsonOut
	if path == "" {
		path = filepath.Join("results", rep.Started.Format("20060102-150405")+".json")
	}
	if dir := filepath.Dir(path); dir != "." {
		if merr := os.MkdirAll(dir, 0o755); merr != nil {
			return errors.Join(err, fmt.Errorf("results dir: %w", merr))
		}
	}
	pacing := "one burst per room per tick"
	if o.Spread {
		pacing = "senders spread over the period"
	}
	fmt.Fprintf(stdout, "\n%s; %g Hz, %d-byte payloads, %s, %s window, medians of %d\n", rep.Machine, o.Rate, o.Payload, pacing, o.Duration, o.Reps)
	err = errors.Join(err, WriteTable(stdout, rep), WriteJSON(path, rep))
	fmt.Fprintln(stdout, "json:", path)
	if err == nil && len(rep.Failures) > 0 {
		err = fmt.Errorf("%d runs failed", len(rep.Failures))
	}
	return err
}

// target builds (or takes) a server binary and says how to start it.
func target(ctx context.Context, name, dir, repo, relayBin, relayArgs string) (Target, error) {
	switch name {
	case "reprise", "reprise-udp":
		bin := relayBin
		if bin == "" {
			bin = filepath.Join(dir, "relay")
			if err := goBuild(ctx, repo, bin, "./cmd/relay"); err != nil {
				return Target{}, err
			}
		}
		extra := strings.Fields(relayArgs)
		var proto load.Protocol = load.Reprise{}
		udp := "off"
		if name == "reprise-udp" {
			proto, udp = load.RepriseUDP{}, "" // "": UDP on the TCP address
		}
		return Target{Name: name, Bin: bin, Proto: proto, Args: func(addr string) ([]string, error) {
			metrics, err := proc.FreeAddr()
			if err != nil {
				return nil, err
			}
			args := []string{"--listen", addr, "--metrics", metrics}
			if udp == "off" {
				args = append(args, "--udp", "off")
			}
			return append(args, extra...), nil
		}}, nil
	case "floor":
		bin := filepath.Join(dir, "udpfloor")
		if err := goBuild(ctx, ".", bin, "./cmd/udpfloor"); err != nil {
			return Target{}, err
		}
		return Target{Name: name, Bin: bin, Proto: load.RepriseUDP{}, Args: func(addr string) ([]string, error) {
			return []string{"--addr", addr}, nil
		}}, nil
	case "nats":
		bin := filepath.Join(dir, "natsserver")
		if err := goBuild(ctx, ".", bin, "./cmd/natsserver"); err != nil {
			return Target{}, err
		}
		return Target{Name: name, Bin: bin, Proto: load.NATS{}, Args: func(addr string) ([]string, error) {
			return []string{"--addr", addr}, nil
		}}, nil
	}
	return Target{}, fmt.Errorf("server %q: want reprise, reprise-udp, floor or nats", name)
}

func goBuild(ctx context.Context, dir, out, pkg string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, b)
	}
	return nil
}
