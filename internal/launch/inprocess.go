package launch

import (
	"context"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/report"
)

// InProcess runs each fleet in this process, sampled through its
// registry (no HTTP server).
type InProcess struct{}

// Describe implements Runner.
func (InProcess) Describe() string { return "in this process" }

// Prepare implements Runner.
func (InProcess) Prepare(_ context.Context, cfg fleet.Config) (Fleet, error) {
	l := &local{list: cfg.Levels, levels: make(chan Level), resume: make(chan struct{}, 1), done: make(chan struct{})}
	// Its registry is read in process: in-process data stays in process.
	cfg.Metrics = ""
	cfg.Shard = fleet.Shard{}
	cfg.AtLevel = nil
	if len(cfg.Levels) > 0 {
		cfg.AtLevel = l.atLevel
	}
	f, err := fleet.New(cfg)
	if err != nil {
		return nil, err
	}
	l.f = f
	l.runCtx, l.cancel = context.WithCancel(context.Background())
	return l, nil
}

// local is a fleet in this process. The run's goroutine, started by
// Start, owns the fleet until done is closed; the ramp's AtLevel talks to
// the driver over levels and resume only.
type local struct {
	f      *fleet.Fleet
	list   []int
	levels chan Level
	resume chan struct{}
	runCtx context.Context
	cancel context.CancelFunc // Stop: ends runCtx
	done   chan struct{}      // closed when the run's goroutine ended
	sum    fleet.Summary      // set before done is closed
	err    error
}

func (l *local) Targets() []report.Target {
	return []report.Target{{Role: report.RoleFleet, Gatherer: l.f.Gatherer()}}
}

func (l *local) Start(ctx context.Context) (time.Time, error) {
	at := time.Now().Add(StartLead)
	unlink := context.AfterFunc(ctx, l.cancel)
	go func() {
		defer close(l.done)
		defer close(l.levels) // AtLevel runs inside RunAt only
		defer unlink()
		defer l.cancel()
		l.sum, l.err = l.f.RunAt(l.runCtx, at)
	}()
	return at, nil
}

// atLevel is the fleet's AtLevel, on the ramp's goroutine: it hands the
// level to the driver and waits for its word.
func (l *local) atLevel(ctx context.Context, attempts int) bool {
	lv := Level{Index: levelIndex(l.list, attempts), Attempts: attempts, At: time.Now()}
	select {
	case l.levels <- lv:
	case <-ctx.Done():
		return false
	}
	select {
	case <-l.resume:
		return true
	case <-ctx.Done():
		return false
	}
}

func (l *local) Levels() <-chan Level { return l.levels }

func (l *local) Resume(Level) {
	select {
	case l.resume <- struct{}{}:
	default:
	}
}

func (l *local) Stop() { l.cancel() }

func (l *local) Wait() (fleet.Summary, error) {
	<-l.done
	return l.sum, l.err
}

func (l *local) Close() {
	l.cancel()
	l.f.Close()
}
