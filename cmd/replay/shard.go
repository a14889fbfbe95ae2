package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/reprise-harness/reprise/internal/barrier"
	"github.com/reprise-harness/reprise/internal/cli"
	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/launch"
)

// shardFlags say which shard of a fleet this process runs and how the
// shards start together.
type shardFlags struct {
	shard          fleet.Shard
	startAt        string
	barrier        string
	barrierTimeout time.Duration
	barrierLead    time.Duration
	barrierServe   bool
	barrierHold    bool
	levels         []int
	metricsFD      int
	barrierFD      int
}

func addShardFlags(fs *pflag.FlagSet, sf *shardFlags) {
	fs.Var(&sf.shard, "shard", "run shard i of n: the clients whose index is i mod n, with the ids, rooms and login times they have in one process")
	fs.StringVar(&sf.startAt, "start-at", "", "start the run's clock at this instant (RFC 3339, e.g. 2026-11-22T18:00:00Z): for shards on hosts with synchronised clocks")
	fs.Var(cli.Addr{P: &sf.barrier, Off: true}, "barrier", "host:port of shard 0's start barrier: shard 0 listens on its port, every shard reports ready there, and all start at the instant shard 0 sends")
	fs.DurationVar(&sf.barrierTimeout, "barrier-timeout", 10*time.Minute, "give up when not every shard is ready at the barrier within this")
	fs.DurationVar(&sf.barrierLead, "barrier-lead", barrier.Lead, "time between the last shard's ready and the start")
	// Hidden: `replay compare --shards N` coordinates its shards itself.
	fs.BoolVar(&sf.barrierServe, "barrier-serve", true, "shard 0 serves the barrier (false: another program coordinates)")
	fs.MarkHidden("barrier-serve")
	// Hidden: `replay compare/capacity --k8s` controls shard 0's barrier
	// from the user's machine and starts the fleet after its baseline.
	fs.BoolVar(&sf.barrierHold, "barrier-hold", false, "shard 0's barrier starts the fleet only when its controller says so")
	fs.MarkHidden("barrier-hold")
	// Hidden: `replay capacity --shards` has its shards wait at its levels.
	fs.IntSliceVar(&sf.levels, "levels", nil, "client counts where the ramp waits at --barrier for the coordinator's go or stop (a capacity search's levels)")
	fs.MarkHidden("levels")
	// Listeners inherited from the program that starts the replay (local
	// shards from launch.Shards, a test, a supervisor): it binds them, on
	// port 0 if it likes, and knows the port, so no port is chosen in one
	// process and bound in another (where something else may take it in
	// between).
	fs.IntVar(&sf.metricsFD, "metrics-fd", 0, "serve /metrics on the listening socket inherited as this descriptor (bound by the program that starts the replay, e.g. on port 0) instead of binding --metrics")
	fs.IntVar(&sf.barrierFD, "barrier-fd", 0, "shard 0 serves the start barrier on the listening socket inherited as this descriptor (bound by the program that starts it, e.g. on port 0) instead of binding --barrier's port; every shard still reaches it at --barrier")
}

// metricsListener is the /metrics listener inherited as --metrics-fd;
// nil without it.
func (sf *shardFlags) metricsListener() (net.Listener, error) {
	return inheritedListener("--metrics-fd", sf.metricsFD)
}

// inheritedListener is the listening socket inherited as descriptor fd
// (named by its flag in errors); nil when fd is 0.
func inheritedListener(flag string, fd int) (net.Listener, error) {
	if fd <= 0 {
		return nil, nil
	}
	f := os.NewFile(uintptr(fd), flag)
	if f == nil {
		return nil, fmt.Errorf("%s %d: not a descriptor", flag, fd)
	}
	defer f.Close() // FileListener holds its own copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("%s %d: not a listening socket: %w", flag, fd, err)
	}
	return ln, nil
}

// shardCommand builds the command line of a shard process of a compare or
// capacity fleet: this replay binary (exe) with the fleet flags given
// (given: shardRunArgs), the run's own clients, senders, target and
// duration, and the shard's metrics, barrier, levels and summary file,
// as addFleetFlags and addShardFlags define them.
func shardCommand(exe string, given []string) func(launch.ShardRun) (string, []string) {
	return func(r launch.ShardRun) (string, []string) {
		f := r.Fleet
		args := append(append([]string(nil), given...),
			"--target", f.Target,
			"--clients", strconv.Itoa(f.Clients),
			"--senders", strconv.Itoa(f.Senders),
			"--receive-only="+strconv.FormatBool(f.ReceiveOnly),
			"--duration", f.Duration.String(),
			"--metrics", r.Metrics,
			"--shard", r.Shard.String(),
			"--barrier", r.Barrier, "--barrier-serve=false",
			"--summary", r.Summary)
		if len(f.Levels) > 0 {
			args = append(args, "--levels", intList(f.Levels))
		}
		if r.MetricsFD > 0 {
			args = append(args, "--metrics-fd", strconv.Itoa(r.MetricsFD))
		}
		if f.TLS.Enabled { // a URL target's TLS (--target is host:port here)
			args = append(args, "--tls")
		}
		return exe, args
	}
}

// shardRunArgs are the fleet flags given on the command line, for the
// shard processes; shardCommand sets the ones each run has of its own.
func shardRunArgs(fs *pflag.FlagSet) []string {
	var args []string
	fs.VisitAll(func(f *pflag.Flag) {
		switch f.Name {
		case "clients", "senders", "target", "duration", "metrics", "receive-only":
			return
		}
		if f.Changed {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// intList is ns as a comma-separated list.
func intList(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ",")
}

// atLevel is the shard's wait at each of --levels: at --barrier, until
// the coordinator says go (at its instant) or stop; nil without levels.
func (sf *shardFlags) atLevel(shard fleet.Shard, stderr io.Writer) func(context.Context, int) bool {
	if len(sf.levels) == 0 {
		return nil
	}
	return func(ctx context.Context, attempts int) bool {
		_, goOn, err := barrier.AtLevel(ctx, sf.barrier, attempts, shard.Index, shard.Count)
		if err != nil {
			fmt.Fprintf(stderr, "replay: shard %v: level %d: %v: stopping\n", shard, attempts, err)
		}
		return goOn
	}
}

// resolve returns the shard of --shard (the zero Shard without it).
func (sf *shardFlags) resolve() (fleet.Shard, error) {
	if len(sf.levels) > 0 && sf.barrier == "" {
		return fleet.Shard{}, usageError(fmt.Errorf("--levels needs --barrier: the shards wait there at each level"))
	}
	if sf.shard.Count == 0 && sf.barrier != "" {
		return fleet.Shard{}, usageError(fmt.Errorf("--barrier needs --shard i/n"))
	}
	return sf.shard, nil
}

// addShardCount defines --shards, the number of shard processes a command
// starts (compare and capacity with --local or --k8s, k8s render and run);
// a shard process itself is told which it is with --shard i/n.
func addShardCount(fs *pflag.FlagSet, n *int, usage string) {
	fs.IntVar(n, "shards", *n, usage)
}

// checkShardCount is --shards' one check.
func checkShardCount(n int) error {
	if n < 1 {
		return usageError(fmt.Errorf("--shards %d: must be at least 1", n))
	}
	return nil
}

// starter gives the run's start instant. With --barrier, shard 0 also
// serves the barrier until stop (late shards are answered the start).
type starter struct {
	sf    *shardFlags
	shard fleet.Shard
	wg    sync.WaitGroup
	stop  context.CancelFunc
}

// start blocks until the start instant is known (zero: now).
func (s *starter) start(ctx context.Context) (time.Time, error) {
	sf := s.sf
	s.stop = func() {}
	if sf.startAt != "" {
		if sf.barrier != "" {
			return time.Time{}, usageError(fmt.Errorf("--start-at and --barrier: pick one"))
		}
		t, err := time.Parse(time.RFC3339Nano, sf.startAt)
		if err != nil {
			return time.Time{}, usageError(fmt.Errorf("--start-at %q: want RFC 3339, e.g. 2026-11-22T18:00:00Z", sf.startAt))
		}
		return t, nil
	}
	if sf.barrier == "" {
		if sf.barrierFD > 0 {
			return time.Time{}, usageError(fmt.Errorf("--barrier-fd without --barrier: give the address the shards reach it at"))
		}
		return time.Time{}, nil
	}
	host, port, err := net.SplitHostPort(sf.barrier)
	if err != nil {
		return time.Time{}, usageError(fmt.Errorf("--barrier %q: want host:port", sf.barrier))
	}
	if sf.barrierFD > 0 && (s.shard.Index != 0 || !sf.barrierServe) {
		return time.Time{}, usageError(fmt.Errorf("--barrier-fd: only shard 0 serves the barrier (this is shard %v)", s.shard))
	}
	if s.shard.Index == 0 && sf.barrierServe {
		ln, err := sf.barrierListener(host, port)
		if err != nil {
			return time.Time{}, fmt.Errorf("start barrier: %w", err)
		}
		c := barrier.NewCoordinator(s.shard.Count, sf.barrierLead)
		if sf.barrierHold {
			c.HoldStart()
		}
		sctx, cancel := context.WithCancel(context.Background())
		s.stop = cancel
		s.wg.Go(func() { c.Serve(sctx, ln) })
	}
	wctx, cancel := context.WithTimeoutCause(ctx, sf.barrierTimeout, fmt.Errorf("not every shard was ready within --barrier-timeout %v", sf.barrierTimeout))
	defer cancel()
	return barrier.Wait(wctx, sf.barrier, s.shard.Index, s.shard.Count)
}

// barrierListener is shard 0's barrier listener: the one inherited as
// --barrier-fd, or one bound on --barrier's port.
func (sf *shardFlags) barrierListener(host, port string) (net.Listener, error) {
	if sf.barrierFD > 0 {
		return inheritedListener("--barrier-fd", sf.barrierFD)
	}
	return net.Listen("tcp", barrierListen(host, port))
}

// barrierListen is where shard 0 serves the barrier the shards reach at
// host:port. A loopback host is served on itself: shards on one machine,
// and nothing else's socket on another address at that port is in the
// way. Any other host is served on every interface: it is how the other
// machines reach shard 0 (a pod's DNS name, a NAT'd address), which need
// not be an address of its own.
func barrierListen(host, port string) string {
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() || host == "localhost" {
		return net.JoinHostPort(host, port)
	}
	return net.JoinHostPort("", port)
}

// close stops shard 0's barrier.
func (s *starter) close() {
	if s.stop != nil {
		s.stop()
	}
	s.wg.Wait()
}
