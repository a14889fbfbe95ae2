// Package fleet replays one recorded client session as many clients
// against a server: it plays the players the profile's loader compiles
// (profile.Load: the fleet reads no capture and no protocol), ramps the
// logins (cooldown, pauses, timeouts, failures counted by reason), plays
// each client's plan from one scheduler goroutine per core (which never
// blocks on a socket: see send.go for the per-client backlog and its
// backpressure count), reads and times every delivery, and writes the
// summary and the replay_* metrics.
//
// It is not the relay (internal/relay) nor the comparison report
// (internal/report); `replay compare` drives it through internal/launch
// (New, RunAt, Gatherer, Summary).
//
// The fleet talks to its target over the wire only: it never starts a
// relay (replay's commands start one as a child process when there is no
// --target: internal/relayproc).
//
// Goroutines: Run starts and waits for all of them: the metrics server,
// the ramp, one scheduler per core, the stats ticker, and one goroutine
// per connection (dial, login, then reads).
package fleet

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/auth"
	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/profile"
)

// Fleet is one run. New prepares it (script, limits, sockets); Run runs it
// once.
type Fleet struct {
	cfg Config
	// rampShift (ns) and levelsDone are the ramp's waits at levels so far
	// and how many levels it passed; holding is set while it waits at one.
	// The progress line reads them.
	rampShift  atomic.Int64
	levelsDone atomic.Int32
	holding    atomic.Bool
	log        *zap.Logger
	// player is the compiled script: the protocol comes in through it.
	player profile.Player
	// flows are the scripts of a --flows fleet (client i plays
	// flows[flowOf(i, weights)]); player is the first's. Nil: every
	// client plays player.
	flows   []profile.LoadedFlow
	weights []int
	flowCnt []flowCounters // by flows' index, then turnFlows'
	// turnFlows are the later connections of flows played in turn
	// (turns.go), each counted apart (its counters flowCnt[turnOf[t]])
	// and played by the clients of flows[turnHead[j]].
	turnFlows   []*profile.LoadedFlow
	turnHead    []int
	turnOf      map[*profile.LoadedFlow]int
	profileName string
	notes       []string
	udp         bool
	ws          bool
	target      string
	// tlsCfg is the fleet's one TLS config (nil: plaintext); inBandTLS
	// says the profile upgrades in band (a login step's starttls), so the
	// clients connect in plaintext and start TLS there. hs are the
	// handshake figures; tlsWarned the TLS failures already said.
	tlsCfg *tls.Config
	// detachTLS: logged-in clients drop their tls.Conn (tlsdetach.go).
	detachTLS bool
	inBandTLS bool
	hs        *handshakes
	tlsWarned sync.Map // LoginCode -> struct{}
	// httpTimes are the HTTP steps' durations (httptimes.go).
	httpTimes httpTimes
	// jars are the clients' cookie jars by client index (cookies.go):
	// kept for the run, so a client that connects again has its cookies.
	jars     sync.Map // int -> *cookieJar
	jarsMade atomic.Bool
	epoch    time.Time
	// epochUnix is epoch on the wall clock (ns): trace stamps and their
	// receipt are epochUnix plus the monotonic fleet clock, one clock read
	// each instead of two.
	epochUnix int64
	stats     *stats
	scheds    []*scheduler

	reg *prometheus.Registry
	mln net.Listener
	// msrv serves mln from ServeMetrics (or RunAt) until RunAt ends or
	// Close; mwg is its goroutine.
	msrv *http.Server
	mwg  sync.WaitGroup

	mu       sync.Mutex
	stopping bool
	live     map[*client]struct{}
	// loopsDone sums the loop passes of clients no longer live; done
	// tallies their expected and received casts.
	loopsDone int64
	done      tally
	// doneTurn are the connections left in turn's (turns.go).
	doneTurn TurnDeliveries
	// castRooms count each room's casts (deliveries.go), a room as the
	// server keeps it apart: made on first use, under roomsMu.
	roomsMu   sync.Mutex
	castRooms map[roomKey]*castRoom
	// runCtx is the run's (RunAt): a client's next turn logs in under it.
	runCtx context.Context
	// insts are the room instances the server assigned, when the
	// profile says the server does (instances.go); nil otherwise.
	insts *instances
	wg    sync.WaitGroup // connection goroutines
	// readEpoch is the drain's read epoch (readmark.go).
	readEpoch atomic.Int64

	warnMu      sync.Mutex
	warnings    []string
	warnedPorts atomic.Bool
	warnedTurn  atomic.Bool
	// turnsPending counts the clients logged in that are to play a next
	// connection and whose next login has no result yet (turns.go).
	turnsPending atomic.Int64
	satCount     map[string]int // saturation warnings by kind (lag, cpu)
	satFirst     map[string]string
	started      time.Time
	ended        time.Time
	// wrongProtocol holds the first bytes of the first login that got
	// something else than the profile's protocol, and the decoder's why.
	wrongProtocol atomic.Pointer[wrongAnswer]
	// protoErr quotes the first protocol error after a login.
	protoErr atomic.Pointer[string]
	// closeLogs counts the server close reasons logged (maxCloseLogs).
	closeLogs atomic.Int64
	// serverIDs are the ids the server issued the clients, by index,
	// shared so that a client can address a room-mate by its own
	// (profile identity.server_id); created with the first client.
	serverIDs     *profile.ServerIDs
	serverIDsOnce sync.Once
	// startLate is how long after the common start this process began;
	// cpu0 the host's CPU times then (cpuErr if unreadable).
	startLate time.Duration
	// startCPUWait is how long this process's threads waited for a CPU
	// (runnable, not running) from RunAt's call to the start's wake-up:
	// the host's share of startLate. -1 when unreadable.
	startCPUWait time.Duration
	cpu0         metrics.CPUTimes
	cpuErr       error
	// proc0 is this process's own CPU at the start (procErr if
	// unreadable): the summary reports what the run cost the fleet.
	proc0   metrics.ProcessUsage
	procErr error
}

// errStopped is the ramp's return when AtLevel ended the run at a level.
var errStopped = errors.New("stopped at a level")

// ErrUnreachable means the very first login could not connect at all.
var ErrUnreachable = errors.New("target unreachable")

// ErrTLS means the very first login failed in TLS: the handshake, or a
// plaintext login that met a TLS port.
var ErrTLS = errors.New("TLS")

// ErrWrongProtocol means the very first login got bytes that are not the
// profile's protocol (an HTTP server, a metrics port, another service).
var ErrWrongProtocol = errors.New("the target does not speak the profile's protocol")

// wrongProtocol is ErrWrongProtocol naming the protocol, the target,
// what it answered and why the decoder refused it (a message over the
// profile's bound reads as garbage in its first bytes alone).
type wrongProtocol struct{ protocol, target, answer, why string }

func (e wrongProtocol) Error() string {
	return fmt.Sprintf("the target does not speak the %s protocol: %s answered the first login with %s (%s), which is not the %s protocol", e.protocol, e.target, e.answer, e.why, e.protocol)
}

// wrongAnswer is a first login's answer that was not the protocol: its
// first bytes and the decoder's error.
type wrongAnswer struct {
	first []byte
	err   error
}

func (wrongProtocol) Is(err error) bool { return err == ErrWrongProtocol }

// New checks cfg, loads the script, checks the open-file limit, and binds
// the metrics listener. Run must follow to release it.
func New(cfg Config) (*Fleet, error) {
	cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := &Fleet{cfg: cfg, log: cfg.Log, live: map[*client]struct{}{}, done: newTally(), castRooms: map[roomKey]*castRoom{}, runCtx: context.Background()}
	if err := f.loadScript(); err != nil {
		return nil, err
	}
	if ra, ok := f.player.(interface{ RoomsAssigned() bool }); ok && ra.RoomsAssigned() {
		f.insts = &instances{byName: map[string]*instance{}}
	}
	if n := cfg.silentRooms(); n > 0 && f.insts == nil {
		f.warn("WARNING: %d of %d rooms hold listeners but no sender (--senders %d over rooms of --room-size %d): they receive nothing; give at least one sender per room", n, cfg.rooms(), cfg.Senders, cfg.RoomSize)
	}
	if err := checkOpenFiles(cfg.Shard.Clients(cfg.Clients)); err != nil {
		return nil, err
	}
	if err := checkSourceIPs(cfg.SourceIPs); err != nil {
		return nil, err
	}
	if err := f.setupTLS(); err != nil {
		return nil, err
	}
	n := runtime.GOMAXPROCS(0)
	f.stats = newStats(n, 4*n)
	f.stats.setProtocol(f.player)
	for i := range n {
		s := newScheduler(f, &f.stats.byScheduler[i], f.stats.rec[i])
		s.index = i
		f.scheds = append(f.scheds, s)
	}
	if err := f.bind(); err != nil {
		f.stopMetrics()
		return nil, err
	}
	return f, nil
}

// Load compiles c's source through its profile's loader (profile.Load)
// with c's script options: what New plays. A caller running several
// fleets of one source in this process (compare) loads once and gives
// each the result as Loaded.
//
// It checks only what loading needs (the loop points): New checks the
// rest, and a caller's Config may lack what its runner adds (AtLevel).
func (c Config) Load() (*profile.Loaded, error) {
	c.withDefaults()
	loop, err := c.loop()
	if err != nil {
		return nil, badf("--loop: %v", err)
	}
	return profile.Load(c.Profile, c.Source, profile.ScriptOptions{
		Loop: loop, Speed: c.Speed, User: c.RecordedUser, Room: c.RecordedRoom,
		RewritePayload: c.RewritePayload, MaxFrame: c.MaxFrame, Measure: true,
	})
}

// loadScript takes the players of Loaded, or compiles the source
// (Load): the fleet plays the players it is given.
func (f *Fleet) loadScript() error {
	prof := f.cfg.Profile
	f.profileName = prof.Name
	f.inBandTLS = prof.StartsTLS()
	f.cfg.Heartbeat = f.cfg.heartbeat(prof.HeartbeatInterval())
	l := f.cfg.Loaded
	if l == nil {
		var err error
		if l, err = f.cfg.Load(); err != nil {
			return err
		}
	}
	f.notes = slices.Clip(l.Notes) // shared with the other fleets of l: appends copy
	f.player = l.Player()
	if len(f.cfg.TLS.ALPN) == 0 && f.cfg.TLS.Enabled && len(l.Flows[0].ALPN) > 0 {
		// The recording's handshake named them: offer what the client did.
		f.cfg.TLS.ALPN = l.Flows[0].ALPN
		f.notes = append(f.notes, fmt.Sprintf("tls: offering ALPN %s, as the recorded client's handshake named (--tls-alpn sets others)", strings.Join(l.Flows[0].ALPN, ",")))
	}
	f.udp = f.player.Transport() == profile.UDP
	f.ws = f.player.Transport() == profile.WebSocket
	if l.Many {
		f.flows = l.Flows
		f.flowCnt = make([]flowCounters, len(l.Flows))
		f.weights = make([]int, len(l.Flows))
		for k, s := range l.Flows {
			f.weights[k] = s.Weight
			for t := s.Then; t != nil; t = t.Then {
				if f.turnOf == nil {
					f.turnOf = map[*profile.LoadedFlow]int{}
				}
				f.turnOf[t] = len(f.flowCnt)
				f.flowCnt = append(f.flowCnt, flowCounters{})
				f.turnHead = append(f.turnHead, k)
				f.turnFlows = append(f.turnFlows, t)
			}
		}
	}
	if err := f.checkSends(); err != nil {
		return err
	}
	return f.checkIDs()
}

// checkSends refuses senders whose replayed part of the flow holds no
// message the profile counts as a send: such a run measures nothing (no
// sends, no deliveries owed, no latency) and would look like success.
func (f *Fleet) checkSends() error {
	if f.cfg.ReceiveOnly || len(f.flows) > 0 {
		// Many flows (--flows all): some are listeners by nature (a
		// subscriber's flow sends nothing); the flows that send are what
		// the senders play.
		return nil
	}
	st, ok := f.player.(interface{ Step(i int) ([]byte, int) })
	if !ok {
		return nil // the reprise protocol's casts are its sends
	}
	a, b := f.player.Timeline().LoopRange()
	for i := a; i < b; i++ {
		if _, k := st.Step(i); f.player.Counted(k) {
			return nil
		}
	}
	return badf("--senders: the replayed part of the flow (messages #%d to #%d) has no message the profile counts as a send: the run would measure nothing; choose another --loop or --flow (replay inspect --profile shows the flow), or run --receive-only", a, b)
}

// checkIDs checks the ids the fleet will use against the protocol.
func (f *Fleet) checkIDs() error {
	c := &f.cfg
	for _, i := range []int{0, c.Clients - 1, c.Clients + 255} {
		if err := f.player.CheckID("user id", c.userID(i)); err != nil {
			return badf("--user-id-format: %v", err)
		}
	}
	if c.Room != "" {
		if err := f.player.CheckID("--room", c.roomName(c.Clients-1, "")); err != nil {
			return badf("%v", err)
		}
	}
	return nil
}

func (f *Fleet) bind() error {
	f.reg = prometheus.NewRegistry()
	if err := registerMetrics(f.reg, f); err != nil {
		return err
	}
	f.target = f.cfg.Target
	if f.cfg.MetricsListener != nil {
		f.mln = f.cfg.MetricsListener
		return nil
	}
	if f.cfg.Metrics != "" {
		ln, err := listenMetrics(f.cfg.Metrics, f.cfg.Out)
		if err != nil {
			return err
		}
		f.mln = ln
	}
	return nil
}

// listenMetrics binds /metrics on addr. The default address taken by
// another program (a second replay on the host) is no reason to fail a
// run: a free loopback port is taken and said on out. An address asked
// for is the user's to free, and the error says how.
func listenMetrics(addr string, out io.Writer) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln, nil
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("listen metrics %s: %w", addr, err)
	}
	if addr != DefaultMetrics {
		return nil, fmt.Errorf("listen metrics %s: the port is in use (another replay?): choose another with --metrics, 127.0.0.1:0 for a free one, or --metrics off", addr)
	}
	ln, err2 := net.Listen("tcp", "127.0.0.1:0")
	if err2 != nil {
		return nil, fmt.Errorf("listen metrics %s: %w; and on a free port: %w", addr, err, err2)
	}
	fmt.Fprintf(out, "replay: metrics: the default %s is in use (another replay?); serving /metrics on %s instead\n", addr, ln.Addr())
	return ln, nil
}

// Close releases the metrics listener (and stops serving it) of a fleet
// that will not Run (Run releases it itself).
func (f *Fleet) Close() { f.stopMetrics() }

// ServeMetrics answers on /metrics from now on, before RunAt: a shard
// waiting at its barrier for the start answers with its counters at zero,
// so a driver elsewhere can take its baseline before it starts the
// fleet. RunAt serves it itself when it was not called; RunAt's end or
// Close stops it. For the goroutine that calls RunAt, before it.
func (f *Fleet) ServeMetrics() {
	if f.mln == nil || f.msrv != nil {
		return
	}
	srv := f.httpServer()
	f.msrv = srv
	f.mwg.Go(func() { srv.Serve(f.mln) })
}

// stopMetrics stops serving /metrics (letting a scrape under way finish,
// for up to a second) and closes its listener.
func (f *Fleet) stopMetrics() {
	if f.msrv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		f.msrv.Shutdown(ctx)
		cancel()
		f.mwg.Wait()
	}
	if f.mln != nil {
		f.mln.Close() // Serve may not have taken it before the shutdown
	}
}

// Target is the relay address the fleet connects to.
func (f *Fleet) Target() string { return f.target }

// MetricsAddr is the address of the fleet's /metrics, or nil.
func (f *Fleet) MetricsAddr() net.Addr {
	if f.mln == nil {
		return nil
	}
	return f.mln.Addr()
}

// Gatherer is the fleet's metrics registry (what /metrics serves), for a
// program that runs the fleet in process and samples it there; it stays
// readable after Run.
func (f *Fleet) Gatherer() prometheus.Gatherer { return f.reg }

// Player is the compiled script the clients play.
func (f *Fleet) Player() profile.Player { return f.player }

// now is the fleet's monotonic clock in nanoseconds.
func (f *Fleet) now() int64 { return int64(time.Since(f.epoch)) }

// wall turns a fleet clock reading into Unix nanoseconds.
func (f *Fleet) wall(now int64) int64 { return f.epochUnix + now }

// wallNow is the time in Unix nanoseconds, from the monotonic clock.
func (f *Fleet) wallNow() int64 { return f.wall(f.now()) }

// Run runs the fleet until ctx ends or cfg.Duration passes, then stops the
// sends, lets the clients leave, and returns the summary. The error is set
// only when the run could not happen (the target unreachable from the
// first login).
func (f *Fleet) Run(ctx context.Context) (Summary, error) {
	return f.RunAt(ctx, time.Time{})
}

// lateStart is how late a process may begin against the common start
// before it says it missed it.
const lateStart = 20 * time.Millisecond

// RunAt is Run with the run's clock starting at start (the common start
// of all shards, from a barrier or --start-at): it waits until then, and
// a process that begins late keeps start as its clock's origin (its
// overdue logins go at once) rather than shifting its schedule, and says
// so. A zero start means now.
func (f *Fleet) RunAt(ctx context.Context, start time.Time) (Summary, error) {
	// /metrics answers from now on (or already), before the start (a
	// sampler takes its baseline then: every counter at zero).
	f.ServeMetrics()
	defer f.stopMetrics()
	var bg sync.WaitGroup
	bgCtx, bgCancel := context.WithCancel(context.Background())
	defer func() { bgCancel(); bg.Wait() }()
	wait0, waitErr := metrics.ReadCPUWait()
	if !start.IsZero() && !waitStart(ctx, start) {
		return Summary{}, ctx.Err()
	}
	now := time.Now()
	f.startCPUWait = -1
	if wait1, err := metrics.ReadCPUWait(); err == nil && waitErr == nil {
		f.startCPUWait = wait1 - wait0
	}
	if start.IsZero() {
		start = now
	}
	f.startLate = now.Sub(start)
	// now minus the lateness keeps the monotonic clock reading that start
	// (parsed or received) lacks.
	f.epoch = now.Add(-f.startLate)
	f.epochUnix = start.UnixNano()
	f.started = f.epoch
	f.cpu0, f.cpuErr = metrics.ReadCPUTimes()
	f.proc0, f.procErr = metrics.ReadProcessUsage()
	if f.startLate > lateStart {
		f.warn("WARNING: shard %s began %v after the common start %s%s: its schedule keeps that start (its first logins are late, not shifted)",
			f.cfg.Shard, f.startLate.Round(time.Millisecond), start.UTC().Format(time.RFC3339Nano), f.startWaitText())
	}

	f.printNotes()
	f.warnRamp()
	bg.Go(func() { f.tick(bgCtx) })

	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if f.cfg.Duration > 0 {
		runCtx, cancel = context.WithTimeout(ctx, f.cfg.Duration)
	}
	defer cancel()
	runCtx, cancelCause := context.WithCancelCause(runCtx)
	defer cancelCause(nil)
	bg.Go(func() { f.watchFirstLogin(bgCtx, cancelCause) })
	schedCtx, schedCancel := context.WithCancel(context.Background())
	var sched, polls sync.WaitGroup
	for _, sh := range f.scheds {
		if p, why, err := newPoller(f.cfg.PlainSyscalls); err == nil {
			if why != nil && sh.index == 0 {
				f.log.Debug("pollers read each socket with read(2)", zap.NamedError("why", why))
			}
			p.clock = f.now
			sh.poll = p
			polls.Go(p.run)
			if p.ring != nil {
				sh.ring, _ = newRing() // nil: a write(2) each

			}
		}
		sched.Go(func() { sh.run(schedCtx) })
	}
	f.runCtx = runCtx // before any client logs in
	err := f.ramp(runCtx)
	if errors.Is(err, errStopped) {
		err = nil // stopped at a level: the run ends now
	} else if err == nil {
		bg.Go(func() { f.settleMemory(runCtx) })
		f.hold(runCtx)
	}
	if cause := context.Cause(runCtx); err == nil && errors.Is(cause, ErrNoLogin) {
		err = cause
	}
	// Stop: no new logins (the ramp returned), no new sends, then drain,
	// leave and wait for every connection goroutine.
	schedCancel()
	sched.Wait()
	f.ended = time.Now()
	f.drain()
	f.stop()
	f.wg.Wait()
	// Every reader has ended, so no client is handed over any more.
	for _, sh := range f.scheds {
		if sh.poll != nil {
			sh.poll.stop()
		}
	}
	polls.Wait()
	f.warnLeaveCut()
	f.warnSilentInstances()
	f.stats.fold()
	sum, serr := f.summary()
	return sum, errors.Join(err, serr)
}

// hold returns when ctx ends or, with Config.Hold, that long after every
// login attempt has its result.
func (f *Fleet) hold(ctx context.Context) {
	if f.cfg.Hold <= 0 {
		<-ctx.Done()
		return
	}
	if !f.loginsSettled(ctx) {
		return
	}
	t := time.NewTimer(f.cfg.Hold)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// loginsSettled waits until every login attempt made has its result
// (the ramp is done: no attempt comes after), false when ctx ends first.
func (f *Fleet) loginsSettled(ctx context.Context) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	// A client still to play its next connection (turns.go) has a login
	// to come.
	for f.stats.succeed.Load()+f.stats.failed.total() < f.stats.attempts.Load() || f.turnsPending.Load() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// settleMemory returns the login ramp's garbage to the system once every
// login attempt has its result: the dials, handshakes and the reader
// stacks' peak during the login are done with, and without a collection
// (idle clients allocate nothing, so none would come) the freed pages
// stay resident and the stacks keep their login-time size. At 10,000
// idle clients that is about a third of the fleet's RSS. Two forced
// collections per run, after the ramp: a collection halves a parked
// goroutine's stack at most, and a UDP reader's login (join, confirm)
// leaves it at 8 KiB.
func (f *Fleet) settleMemory(ctx context.Context) {
	if !f.loginsSettled(ctx) {
		return
	}
	runtime.GC()
	debug.FreeOSMemory()
}

// cpuIdle is the host's CPU idle percentage since the run began, -1 when
// the CPU times cannot be read.
func (f *Fleet) cpuIdle() float64 {
	if f.cpuErr != nil {
		return -1
	}
	cpu1, err := metrics.ReadCPUTimes()
	if err != nil {
		return -1
	}
	return metrics.IdlePercent(f.cpu0, cpu1)
}

// processCost is the fleet process's CPU seconds since the run began and
// its peak RSS, both -1 when /proc cannot be read.
func (f *Fleet) processCost() (cpuS float64, peakRSS int64) {
	if f.procErr != nil {
		return -1, -1
	}
	u, err := metrics.ReadProcessUsage()
	if err != nil {
		return -1, -1
	}
	return u.CPUSeconds - f.proc0.CPUSeconds, u.PeakRSSBytes
}

func (f *Fleet) httpServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(f.reg, promhttp.HandlerOpts{Registry: f.reg}))
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// ramp starts this shard's logins, each at its due time on the run's
// clock (loginAt: the same instant whether one process or many run the
// fleet), senders first. It watches the first login's result meanwhile
// (without holding the schedule back): if it could not connect at all,
// the run is pointless.
func (f *Fleet) ramp(ctx context.Context) error {
	step := f.cfg.Shard.count()
	var first chan LoginResult // until the first login's result is in
	var shift time.Duration    // the waits for AtLevel so far
	levels := f.cfg.Levels
	// atLevels waits at the levels due by client i (all: Clients); a
	// shard waits at every level, whether or not it runs that client.
	// False: stop here (ctx ended, or AtLevel said so).
	atLevels := func(i int) (bool, error) {
		for len(levels) > 0 && levels[0] <= i {
			due := f.epoch.Add(f.cfg.loginAt(levels[0]) + shift)
			if err := f.waitUntil(ctx, due, &first); err != nil || ctx.Err() != nil {
				return false, err
			}
			f.holding.Store(true)
			goOn := f.cfg.AtLevel(ctx, levels[0])
			f.holding.Store(false)
			if !goOn {
				return false, errStopped
			}
			// From the due instant, not from the call: shards that reach
			// a level a little apart and go on at one instant keep one
			// schedule.
			shift += time.Since(due)
			levels = levels[1:]
			f.rampShift.Store(int64(shift))
			f.levelsDone.Add(1)
			if ctx.Err() != nil {
				return false, nil
			}
		}
		return true, nil
	}
	for i := range f.cfg.Shard.indexes(f.cfg.Clients) {
		if ok, err := atLevels(i); !ok {
			return err
		}
		due := f.cfg.loginAt(i) + shift
		wait0 := f.debugCPUWait()
		if err := f.waitUntil(ctx, f.epoch.Add(due), &first); err != nil || ctx.Err() != nil {
			return err
		}
		c, err := f.newClient(i)
		if err != nil {
			return err
		}
		f.stats.attempts.Add(1)
		if ce := f.log.Check(zap.DebugLevel, "login attempt"); ce != nil {
			// due_ms is the schedule, at_ms when it went: the difference
			// less cpu_wait_ms (the threads' wait for a CPU meanwhile,
			// the host's share) is the fleet's own lateness.
			var waited time.Duration
			if w := f.debugCPUWait(); wait0 > 0 && w > 0 {
				waited = w - wait0
			}
			ce.Write(zap.Int("client", i), zap.String("user", c.user), zap.Int64("at_ms", time.Since(f.epoch).Milliseconds()),
				zap.Int64("due_ms", due.Milliseconds()), zap.Int64("cpu_wait_ms", waited.Milliseconds()))
		}
		var res chan LoginResult
		if f.stats.attempts.Load() == 1 {
			res = make(chan LoginResult, 1)
			first = res
		}
		f.wg.Go(func() { c.attempt(ctx, res) })
		if pe := f.cfg.PauseEvery; pe > 0 && i+step < f.cfg.Clients && (i+step)/pe > i/pe {
			fmt.Fprintf(f.cfg.Out, "ramp: pausing %v after %d login attempts\n", f.cfg.Pause, (i/pe+1)*pe)
		}
	}
	if ok, err := atLevels(f.cfg.Clients); !ok { // the last level: Clients
		return err
	}
	if first != nil {
		return f.waitUntil(ctx, time.Now().Add(f.cfg.LoginTimeout+time.Second), &first)
	}
	return nil
}

// waitUntil sleeps until t, ctx's end, or the first login's result (when
// *first is not nil) if that says the target is unreachable; a good first
// result clears *first (and, when the ramp is done, ends the wait).
func (f *Fleet) waitUntil(ctx context.Context, t time.Time, first *chan LoginResult) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
			return nil
		case r := <-*first: // a nil channel never receives
			code := r.Code()
			if r.elsewhere {
				// Not the target: a lobby named a server that is not there,
				// which each client's reason counts.
				code = LoginOK
			}
			switch code {
			case LoginConnectRefused, LoginConnectError, LoginConnectTimeout:
				return fmt.Errorf("%w: %s: first login failed: %s", ErrUnreachable, f.target, r)
			case LoginTLSUnknownAuthority, LoginTLSBadCertificate, LoginTLSHandshakeTimeout, LoginTLSProtocolVersion, LoginTLSRequired, LoginTLSClosed, LoginTLSError:
				return fmt.Errorf("%w: %s: first login failed %s: %s", ErrTLS, f.target, r, r.Detail())
			case LoginReset, LoginClosed, LoginTimeout:
				if f.tlsCfg == nil && speaksTLS(ctx, f.target) {
					return fmt.Errorf("%w: %s: first login failed %s, and the target speaks TLS (a TLS handshake with it succeeded): tls_required: give --tls (or a wss://, mqtts://, tls:// target)", ErrTLS, f.target, r)
				}
			case LoginProtocolError:
				w := f.wrongProtocol.Load()
				return wrongProtocol{f.profileName, f.target, quoteBytes(w.first), w.err.Error()}
			}
			*first = nil
			if f.stats.attempts.Load() == int64(f.cfg.Shard.Clients(f.cfg.Clients)) {
				return nil
			}
		}
	}
}

// spinBefore is how long before the common start waitStart stops
// sleeping and yields in a loop instead: a timer on a busy host wakes its
// goroutine late by a scheduler tick or more.
const spinBefore = 3 * time.Millisecond

// debugCPUWait is the process's wait for a CPU so far (ReadCPUWait)
// when debug lines are written, else 0: a reading is a file per thread,
// too dear for every login of a fast ramp.
func (f *Fleet) debugCPUWait() time.Duration {
	if !f.log.Core().Enabled(zap.DebugLevel) {
		return 0
	}
	w, err := metrics.ReadCPUWait()
	if err != nil {
		return 0
	}
	return w
}

// startWaitText says how much of a late start the host kept the process
// from running, when it was measured.
func (f *Fleet) startWaitText() string {
	if f.startCPUWait < 0 {
		return ""
	}
	return fmt.Sprintf(" (its threads waited %v of it for a CPU: other work held the host)", min(f.startCPUWait, f.startLate).Round(time.Millisecond))
}

// waitStart waits until start; false if ctx ended first.
func waitStart(ctx context.Context, start time.Time) bool {
	if !sleep(ctx, time.Until(start)-spinBefore) {
		return false
	}
	for time.Now().Before(start) {
		runtime.Gosched()
	}
	return ctx.Err() == nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// newClient prepares client i: its identity, plan and own bytes.
func (f *Fleet) newClient(i int) (*client, error) {
	if len(f.flows) > 0 {
		k := flowOf(i, f.weights)
		return f.newClientOf(i, &f.flows[k], &f.flowCnt[k], 0)
	}
	return f.newClientOf(i, nil, nil, 0)
}

// newClientOf prepares client i's connection of turn turn (0 the first),
// to play flow lf (nil: the fleet's one player) counted in fc.
func (f *Fleet) newClientOf(i int, lf *profile.LoadedFlow, fc *flowCounters, turn int) (*client, error) {
	cfg := &f.cfg
	sender := cfg.isSender(i)
	if f.insts != nil {
		sender = !cfg.ReceiveOnly // until its instance is known (place)
	}
	player := f.player
	if lf != nil {
		player = lf.Player
	}
	tl := player.Timeline()
	plan := tl.Plan(cfg.Heartbeat)
	if !sender {
		plan = tl.ReceiveOnlyPlan(cfg.Heartbeat)
	}
	var then *profile.LoadedFlow
	if lf != nil && lf.Then != nil {
		// It leaves this connection for the next when the recorded
		// client did (its plan's Handover step: turns.go).
		plan, then = plan.Until(lf.HandoverAt), lf
	}
	_, room, others := player.Recorded()
	var connect string // where this connection goes: "" the target
	if turn > 0 {
		connect = lf.Connect
	}
	id := profile.Identity{
		Index: i, Clients: cfg.Clients,
		User:        cfg.userID(i),
		Room:        f.roomName(i, room),
		Peers:       cfg.peers(i, others),
		PeerIndexes: cfg.peerIndexes(i, others),
		Steps:       plan.Frames(),
		ServerIDs:   f.sharedServerIDs(),
	}
	if cfg.AuthSecret != "" {
		id.Auth = auth.Sign([]byte(cfg.AuthSecret), id.User, time.Now().Add(24*time.Hour+cfg.Duration))
	}
	pc, err := player.NewClient(id)
	if err != nil {
		return nil, fmt.Errorf("%w: client %d: %v", ErrBadConfig, i, err)
	}
	sh := f.scheds[i%len(f.scheds)]
	c := &client{
		f: f, idx: i, user: id.User, sender: sender, plan: plan, pc: pc, player: player,
		sched: sh, rec: f.stats.rec[i%len(f.stats.rec)], udp: f.udp, ws: f.ws,
		replies: f.ws || player.Replies() || f.tlsCfg != nil, fc: fc, room: f.castRoom(roomKey{connect, id.Room}),
	}
	if then != nil || turn > 0 {
		c.tn = &turnState{then: then, turn: turn}
		if turn > 0 {
			c.tn.connect, c.tn.name = connect, fmt.Sprintf("flow%d", lf.Index)
		}
	}
	c.outAt.Store(-1)
	if f.ws {
		c.wsKey = profile.NewWSKey()
		wf, ok := pc.(profile.WSFramer)
		c.wsMixed = ok && wf.WSFrames()
	}
	return c, nil
}

// sharedServerIDs is the fleet's table of server-issued ids (8 bytes a
// client), made on first use.
func (f *Fleet) sharedServerIDs() *profile.ServerIDs {
	f.serverIDsOnce.Do(func() { f.serverIDs = profile.NewServerIDs(f.cfg.Clients) })
	return f.serverIDs
}

// closedBy is why the server closed the client's connection without a
// reason: an expected message it left unanswered, if any.
func (c *client) closedBy() Disconnect {
	if k := c.pc.Unanswered(); k != "" {
		return Disconnect{code: DisconnectNoReply, said: k}
	}
	if c.player.ClosedByRelay() {
		return disconnectBy(DisconnectClosedByRelay)
	}
	return disconnectBy(DisconnectClosedByServer)
}

// dial connects client i, from its source address if any.
func (f *Fleet) dial(ctx context.Context, i int, deadline time.Time, addr string) (net.Conn, error) {
	d := net.Dialer{Deadline: deadline}
	network := "tcp"
	if f.udp {
		network = "udp"
	}
	if ips := f.cfg.SourceIPs; len(ips) > 0 {
		ip := netip.MustParseAddr(ips[i%len(ips)])
		if f.udp {
			d.LocalAddr = &net.UDPAddr{IP: ip.AsSlice()}
		} else {
			d.LocalAddr = &net.TCPAddr{IP: ip.AsSlice()}
			// Let connect pick the port per 4-tuple instead of bind per
			// address, so each source address has the full port range.
			d.Control = func(_, _ string, rc syscall.RawConn) error {
				var serr error
				err := rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
				})
				return errors.Join(err, serr)
			}
		}
	}
	if addr == "" {
		addr = f.target
	} else if addr[0] == ':' {
		// A port alone (connect ":${port}"): on the target's host.
		if h, _, err := net.SplitHostPort(f.target); err == nil {
			addr = net.JoinHostPort(h, addr[1:])
		}
	}
	return d.DialContext(ctx, network, addr)
}

// track registers a connected client so stop can reach it; false once the
// fleet is stopping.
func (f *Fleet) track(c *client) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopping {
		return false
	}
	f.live[c] = struct{}{}
	return true
}

func (f *Fleet) untrack(c *client) {
	f.mu.Lock()
	delete(f.live, c)
	if c.joined.Load() {
		c.leftRoom()
		if c.leftInTurn() {
			f.doneTurn.Connections++
			f.doneTurn.Expected += c.expected()
			f.doneTurn.Received += c.casts.Load()
		} else {
			f.done.add(c.expected(), c.casts.Load())
		}
		if c.inst != nil {
			c.inst.received.Add(c.casts.Load())
		}
	}
	f.loopsDone += c.loops.Load()
	f.mu.Unlock()
}

// loopsLive sums the loop passes of live clients; f.mu must be held.
func (f *Fleet) loopsLive() int64 {
	var n int64
	for c := range f.live {
		n += c.loops.Load()
	}
	return n
}

// DrainQuiet is how long no delivery must arrive for the drain to end (the
// flag help of --drain-deliveries says it from here).
const DrainQuiet = 200 * time.Millisecond

// drain waits for the deliveries of the last sends still in flight: until
// none arrived for DrainQuiet and every logged-in client's reader has
// read its socket to the end since that quiet began (readmark.go), at
// most DrainTimeout. Only deliveries count (the messages the profile
// counts as received, Events.Messages): a server's keepalive pings, the
// answers to the clients' own heartbeats and the other frames no figure
// counts go on for as long as the connections last, and would hold every
// run to the bound (socket.io pings each client every second: 200
// clients never leave 200 ms without a byte). The readers' marks tell a
// fleet that received everything from one whose readers a starved host
// has not run: their sockets' deliveries are unread, and a server that
// resets at the leave's goodbye (or drops what it still queued) loses
// them. A drain that reaches its bound with deliveries still arriving,
// owed, or unread says so: the run took that much longer, and its
// received counts may miss them.
func (f *Fleet) drain() {
	start := time.Now()
	end := start.Add(f.cfg.DrainTimeout)
	last := f.stats.totals().MessagesReceived
	lastChange := start
	var owed int64
	// The read epoch of the current quiet (0: none yet) and the clients
	// not caught up in it.
	var epoch int64
	var behind []*client
	f.log.Debug("sends ended: draining", zap.Duration("bound", f.cfg.DrainTimeout))
	defer func() {
		f.log.Debug("drain ended", zap.Duration("took", time.Since(start)), zap.Int64("received", f.stats.totals().MessagesReceived),
			zap.Int("readers_behind", len(behind)), zap.Int64("owed_missing", owed))
	}()
	for time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
		if n := f.stats.totals().MessagesReceived; n != last {
			last, lastChange, epoch = n, time.Now(), 0
		} else if time.Since(lastChange) >= DrainQuiet {
			all := epoch == 0
			if all {
				epoch = f.beginReadEpoch()
			}
			if behind = f.behindReaders(behind, all, epoch); len(behind) > 0 {
				continue
			}
			// Quiet is not enough while deliveries owed are missing: a
			// server behind on its fan-out is quiet while it catches
			// up (and so was a starved fleet's reader: a loaded host
			// lost 25 % of a Redis run's so).
			if owed = f.owedMissing(); owed == 0 {
				return
			}
		}
	}
	// A starved drain may wake past its bound without having looked
	// once: deliveries that came meanwhile still say it cut them.
	if n := f.stats.totals().MessagesReceived; n != last {
		lastChange = time.Now()
	}
	switch {
	case owed > 0:
		f.warn("WARNING: %d deliveries owed were still missing at the drain's bound (--drain-deliveries %v): lost, or still in flight (the run waited that much longer for them)",
			owed, f.cfg.DrainTimeout)
	case lastChange.After(start):
		f.warn("WARNING: deliveries still arrived %v after the last send, when the drain's bound (--drain-deliveries %v) ended the wait: the run took that much longer, and its received counts may miss deliveries in flight",
			lastChange.Sub(start).Round(time.Millisecond), f.cfg.DrainTimeout)
	case len(behind) > 0:
		f.warn("WARNING: %d clients had not read their sockets to the end when the drain's bound (--drain-deliveries %v) ended the wait (a starved fleet's readers): deliveries they left unread are missing from the received counts if the server cut them at the leave",
			len(behind), f.cfg.DrainTimeout)
	}
}

// owedMissing is how many deliveries the clients still connected are
// owed and have not received, 0 when the fleet cannot know (deliveries
// not measured). A client gone is owed nothing more: it cannot receive.
func (f *Fleet) owedMissing() int64 {
	if !f.deliveries().Measured() {
		return 0
	}
	var t tally
	f.mu.Lock()
	for c := range f.live {
		if c.joined.Load() && !c.dead.Load() && !c.leftInTurn() {
			t.add(c.expected(), c.casts.Load())
		}
	}
	f.mu.Unlock()
	return t.lost
}

// stop makes every client leave (logged in) or give up (logging in).
func (f *Fleet) stop() {
	f.mu.Lock()
	f.stopping = true
	list := make([]*client, 0, len(f.live))
	for c := range f.live {
		list = append(list, c)
	}
	f.mu.Unlock()
	// One deadline for the whole fleet, and every leave at once: a leave
	// waits for its server to close, and one by one a slow server's would
	// add up.
	deadline := time.Now().Add(f.cfg.LeaveTimeout)
	for _, c := range list {
		c.stopping.Store(true)
		if c.joined.Load() && !c.dead.Load() {
			f.wg.Go(func() { c.leave(deadline) })
		} else {
			c.conn.SetReadDeadline(time.Now())
		}
	}
}

// warnLeaveCut says when leaves ran out of time with sent bytes the
// server had not taken: sends counted as sent that it may never see.
func (f *Fleet) warnLeaveCut() {
	if n := f.stats.leaveCut.Load(); n > 0 {
		f.warn("WARNING: %d clients closed before the server did (the leave's bound is %v), with %d sent bytes it had not acknowledged: the sent counts include sends the server may not have read",
			n, f.cfg.LeaveTimeout, f.stats.leaveUnsent.Load())
	}
}

func (f *Fleet) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	f.warnMu.Lock()
	f.warnings = append(f.warnings, msg)
	f.warnMu.Unlock()
	fmt.Fprintln(f.cfg.Out, msg)
}

func (f *Fleet) warnOnce(flag *atomic.Bool, msg string) {
	if flag.CompareAndSwap(false, true) {
		f.warn("%s", msg)
	}
}

// Run runs one fleet with cfg: New, then Fleet.Run.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	f, err := New(cfg)
	if err != nil {
		return Summary{}, err
	}
	return f.Run(ctx)
}
