package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/reprise-harness/reprise/internal/barrier"
	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
)

// Shards runs each fleet as N processes on this host, one shard each
// (fleet.Shard: the clients i mod N, with the login times they have in one
// process), started together at a barrier this process coordinates; at
// each level every shard waits at the barrier for this process's word, so
// none runs ahead of a decision. The fleet is sampled on every shard's
// /metrics (summed), and its summary is their merge.
type Shards struct {
	N int
	// Command gives a shard process's program and arguments; the command
	// that defines the flags builds them (cmd/replay).
	Command func(ShardRun) (name string, args []string)
	// StartTimeout bounds the wait for every shard to load its capture and
	// answer on its metrics (0: 3 min: two -race shards on a host at a
	// load of 25 per 2 CPUs took over 30 s); a shard that exits meanwhile
	// ends the wait at once.
	StartTimeout time.Duration
}

// ShardRun is what one shard process is to be told.
type ShardRun struct {
	// Fleet is the whole fleet's configuration: its Target, Clients,
	// Senders, ReceiveOnly, Duration and Levels are the run's own.
	Fleet   fleet.Config
	Shard   fleet.Shard
	Metrics string // host:port its /metrics listens on
	// MetricsFD is the descriptor number under which the shard inherits
	// its /metrics listener, bound by this process on Metrics: a port
	// chosen here and bound there could be taken in between (it was, by
	// this process's own barrier).
	MetricsFD int
	Barrier   string // host:port of the barrier: the start and every level
	Summary   string // file its summary JSON goes to
}

// inheritedFD is the descriptor a shard's first ExtraFiles entry has.
const inheritedFD = 3

// Describe implements Runner.
func (s Shards) Describe() string { return fmt.Sprintf("%d local shard processes", s.N) }

// stopGrace is how long an interrupted shard may take to write its
// summary before it is killed; stopAtLevelGrace how long after Stop a
// shard that did not stop at a level is interrupted.
const (
	stopGrace        = 15 * time.Second
	stopAtLevelGrace = 5 * time.Second
)

// Prepare starts the N shard processes and returns once every one answers
// on its /metrics.
func (s Shards) Prepare(ctx context.Context, cfg fleet.Config) (Fleet, error) {
	if s.N < 2 || s.Command == nil {
		return nil, fmt.Errorf("shards: %d shards and a command: want at least 2 and one", s.N)
	}
	dir, err := os.MkdirTemp("", "reprise-shards-")
	if err != nil {
		return nil, fmt.Errorf("shards: %w", err)
	}
	metrics, err := listenEach(s.N)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// The shards inherit copies; this process's are closed once all started
	// (and on the way out when one could not start).
	defer closeAll(metrics)
	// This process coordinates the start and the levels.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("shards: barrier: %w", err)
	}
	h := &shards{n: s.N, dir: dir, list: cfg.Levels, coord: barrier.NewCoordinator(s.N, 0),
		levels: make(chan Level), exit: make(chan int, s.N), firstExit: make(chan struct{}), errs: make([]error, s.N)}
	h.procCtx, h.kill = context.WithCancel(context.Background())
	h.serveCtx, h.stopServe = context.WithCancel(context.Background())
	h.bg.Go(func() { h.coord.Serve(h.serveCtx, ln) })
	out := cfg.Out
	if out == nil {
		out = io.Discard
	}
	for i := range s.N {
		run := ShardRun{Fleet: cfg, Shard: fleet.Shard{Index: i, Count: s.N}, Metrics: metrics[i].Addr().String(),
			MetricsFD: inheritedFD, Barrier: ln.Addr().String(), Summary: h.summaryPath(i)}
		if err := h.startProc(s.Command, run, metrics[i], Prefixed(out, fmt.Sprintf("[shard %v] ", run.Shard))); err != nil {
			h.close()
			return nil, err
		}
		h.targets = append(h.targets, report.Target{Role: report.RoleFleet, URL: "http://" + run.Metrics + "/metrics"})
	}
	closeAll(metrics) // the shards hold theirs: a shard that exits frees its port
	h.bg.Go(h.watch)
	// Ctrl-C reaches the shards through the context: each stops cleanly
	// and still writes its summary.
	h.unlink = context.AfterFunc(ctx, h.kill)
	timeout := s.StartTimeout
	if timeout <= 0 {
		timeout = 3 * time.Minute
	}
	if err := waitMetrics(ctx, h.targets, timeout, h.firstExit); err != nil {
		h.close()
		return nil, err
	}
	return h, nil
}

// shards is one fleet of shard processes. The processes' goroutines
// report exits on exit; watch owns the count of exits and forwards the
// coordinator's levels to the driver until every process exited.
type shards struct {
	n       int
	dir     string
	list    []int
	coord   *barrier.Coordinator
	targets []report.Target

	procCtx   context.Context
	kill      context.CancelFunc // interrupts every process
	serveCtx  context.Context
	stopServe context.CancelFunc
	unlink    func() bool
	procs     sync.WaitGroup // one per process: its Wait
	bg        sync.WaitGroup // the barrier's Serve and watch
	levels    chan Level
	exit      chan int
	firstExit chan struct{} // closed by watch at the first exit
	errs      []error       // each process's exit, set before it reports on exit
	closeOnce sync.Once
	stopOnce  sync.Once
	interrupt *time.Timer // set by Stop: interrupts what did not stop at its level
}

func (h *shards) summaryPath(i int) string {
	return filepath.Join(h.dir, fmt.Sprintf("shard-%d.json", i))
}

func (h *shards) startProc(command func(ShardRun) (string, []string), run ShardRun, metrics *net.TCPListener, stderr io.Writer) error {
	name, args := command(run)
	mf, err := metrics.File()
	if err != nil {
		return fmt.Errorf("shard %v: metrics listener: %w", run.Shard, err)
	}
	defer mf.Close()
	cmd := exec.CommandContext(h.procCtx, name, args...)
	cmd.ExtraFiles = []*os.File{mf} // descriptor inheritedFD
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = stopGrace
	// The shard's own summary table is dropped: the merged one counts.
	cmd.Stdout, cmd.Stderr = io.Discard, stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("shard %v: %w", run.Shard, err)
	}
	i := run.Shard.Index
	h.procs.Go(func() { h.errs[i] = cmd.Wait(); h.exit <- i })
	return nil
}

// watch forwards each level at which every shard waits to the driver and
// counts exits; a shard that ends ends the levels of all (they are told to
// stop at their next one).
func (h *shards) watch() {
	defer close(h.levels)
	exited := 0
	exitOne := func() {
		if exited++; exited == 1 {
			close(h.firstExit)
		}
		h.coord.Halt()
	}
	for exited < h.n {
		select {
		case <-h.exit:
			exitOne()
		case a := <-h.coord.Levels():
			lv := Level{Index: levelIndex(h.list, a), Attempts: a, At: time.Now()}
			for sent := false; !sent && exited < h.n; {
				select {
				case h.levels <- lv:
					sent = true
				case <-h.exit:
					exitOne()
				}
			}
		}
	}
}

func (h *shards) Targets() []report.Target { return h.targets }

func (h *shards) Start(ctx context.Context) (time.Time, error) {
	select {
	case <-h.coord.Started():
		return h.coord.Start(), nil
	case <-h.firstExit:
		return time.Time{}, errors.New("shards: a shard exited before the start")
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

func (h *shards) Levels() <-chan Level { return h.levels }

func (h *shards) Resume(l Level) { h.coord.Resume(l.Attempts) }

// Stop tells every shard to stop at its level (now, for those waiting
// at one); a shard still running a while later (not at a level: a
// comparison, or a stop between levels) is interrupted, and stops as it
// does on Ctrl-C.
func (h *shards) Stop() {
	h.coord.Halt()
	h.stopOnce.Do(func() { h.interrupt = time.AfterFunc(stopAtLevelGrace, h.kill) })
}

func (h *shards) Wait() (fleet.Summary, error) {
	h.procs.Wait()
	defer h.close()
	var sums []fleet.Summary
	for i := range h.n {
		s, err := readSummary(h.summaryPath(i))
		if err != nil {
			return fleet.Summary{}, fmt.Errorf("shard %d/%d: %w (exit: %v)", i, h.n, err, h.errs[i])
		}
		sums = append(sums, s)
	}
	return fleet.Merge(sums)
}

func (h *shards) Close() { h.close() }

// close interrupts the processes, waits for them and for the barrier,
// and removes the summaries' folder.
func (h *shards) close() {
	h.closeOnce.Do(func() {
		if h.unlink != nil {
			h.unlink()
		}
		h.stopOnce.Do(func() {}) // no interrupt timer from now on
		if h.interrupt != nil {
			h.interrupt.Stop()
		}
		h.kill()
		h.procs.Wait()
		h.stopServe()
		h.bg.Wait()
		os.RemoveAll(h.dir)
	})
}

func readSummary(path string) (fleet.Summary, error) {
	f, err := os.Open(path)
	if err != nil {
		return fleet.Summary{}, fmt.Errorf("no summary: %w", err)
	}
	defer f.Close()
	return fleet.ReadSummary(f)
}

// listenEach binds n loopback listeners on free ports: the shards'
// /metrics, handed to them already bound.
func listenEach(n int) ([]*net.TCPListener, error) {
	lns := make([]*net.TCPListener, 0, n)
	for range n {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			closeAll(lns)
			return nil, fmt.Errorf("shards: metrics listener: %w", err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func closeAll(lns []*net.TCPListener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// waitMetrics polls every URL until it answers 200, for at most timeout,
// or until gone is closed (a shard exited).
func waitMetrics(ctx context.Context, targets []report.Target, timeout time.Duration, gone <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for _, t := range targets {
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
			if err != nil {
				return fmt.Errorf("shards: %s: %w", t.URL, err)
			}
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			if ctx.Err() != nil {
				return errors.Join(fmt.Errorf("shards: %s did not answer within %v", t.URL, timeout), err)
			}
			t := time.NewTimer(100 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-gone:
				t.Stop()
				return errors.New("shards: a shard exited before it answered on its metrics")
			case <-t.C:
			}
		}
	}
	return nil
}
