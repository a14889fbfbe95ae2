// Package relay is reprise's reference relay server: clients join rooms over
// TCP or UDP and cast frames to the room (docs/protocol.md). It owns the
// listeners, the event loops that read and write the TCP connections (a
// few epoll loops, no goroutine per connection: loop.go; each connection's
// queue written with a coalescing writev), the UDP sessions, the join, idle and liveness timers, the slow-consumer policy,
// the defences against abusive clients (limits.go: per-sender rate limits,
// the frame timeout and the partial-frame budget; a rejoin with a user id
// in the room replaces its member, client.replace) and graceful shutdown.
// Who gets which frame is decided by internal/room; the bytes are
// internal/wire's. It is not a client: see internal/client for that.
//
// Goroutines: Run starts and waits for all of them (accept loop, event
// loops, UDP workers, sweeper, memory reclaimer, metrics HTTP server); none
// outlives Run.
//
// Lock order: a room shard's mutex, then a connection's outbound mutex or
// a loop's inbox mutex (leaves). Deliveries and membership notices are queued with the shard
// locked, so every member of a room sees the room's events in one order.
package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/reprise-harness/reprise/internal/metrics"
	"github.com/reprise-harness/reprise/internal/room"
	"github.com/reprise-harness/reprise/internal/wire"
)

// UDPSameAsTCP, as Config.UDP, binds UDP on the TCP listener's host and port.
const UDPSameAsTCP = "same"

// Config is everything the relay can be told. Zero values take the
// defaults of DefaultConfig; Listen "" means wire.DefaultPort on every interface.
type Config struct {
	Listen         string        // TCP address
	UDP            string        // UDP address, UDPSameAsTCP, or "" / "off" for none
	Metrics        string        // HTTP address for /metrics, or "" / "off" for none
	MaxFrame       int           // cap on a frame's length field; default 65536, at least wire.MinMaxFrame
	MaxRoomMembers int           // 0: the protocol's cap, wire.MaxRoomMembers
	MaxConnections int           // TCP connections plus UDP sessions; default Machine.MaxConnections, negative: no limit
	MaxPending     int           // outbound queue cap per connection in bytes; default 1 MiB
	WriteTimeout   time.Duration // deadline of one write; default 2 s
	// WriteCoalesce is how long a woken connection writer waits for more of
	// a burst before it writes (0: write at once). See coalesceBytes.
	WriteCoalesce time.Duration
	IdleTimeout   time.Duration // default 180 s
	JoinTimeout   time.Duration // default 10 s
	AuthSecret    []byte        // when set, joins need a token signed with it

	// Aggregate caps (sources.go, machine.go): rooms in all, and per source
	// address its connections (TCP connections plus UDP sessions) and the
	// rooms they are in. Negative: no cap.
	MaxRooms                int // default Machine.MaxRooms
	MaxConnectionsPerSource int // default a quarter of Machine.MaxConnections (perSource)
	MaxRoomsPerSource       int // default a quarter of Machine.MaxRooms (perSource)

	// Rate limits per room (see admitRoom): what all its members together
	// may send into one room, as one member's share of frames and bytes
	// per second with their bursts, times the members the room has; a
	// negative rate means no limit. Frames over them are dropped and
	// counted, and nobody is disconnected for them.
	RoomRateMessages      float64
	RoomRateMessagesBurst int
	RoomRateBytes         float64
	RoomRateBytesBurst    int

	// UDP address validation (udp.go): a session that has not sent back its
	// token within UDPConfirmTimeout ends; at most UDPPendingPerSource
	// unconfirmed sessions per source address and UDPMaxPending in all.
	UDPConfirmTimeout   time.Duration // default DefaultUDPConfirmTimeout
	UDPPendingPerSource int           // default DefaultUDPPendingPerSource
	UDPMaxPending       int           // default DefaultUDPMaxPending
	// UDPWorkers is how many sockets share the UDP port (SO_REUSEPORT),
	// each read and fanned out by its own goroutine; default GOMAXPROCS.
	UDPWorkers int
	// UDPReadBuffer is each UDP socket's receive buffer (SO_RCVBUF) in
	// bytes; default DefaultUDPReadBuffer, negative: the kernel's default.
	UDPReadBuffer int
	// UDPCoalesce is the most bytes of a server→client datagram that packs
	// several frames for one client (docs/protocol.md); default
	// DefaultUDPCoalesce, negative: one frame per datagram.
	UDPCoalesce int
	// UDPHold is how long a UDP worker whose read emptied its socket waits
	// for the rest of a burst before it reads again and sends what it
	// read, and how long a client's datagram that still has room waits for
	// more frames (0: neither; each flush packs what it holds); like
	// WriteCoalesce for a TCP writer. See gather and udppack.go.
	UDPHold time.Duration

	// Rate limits per sender (see limiter): frames and bytes per second
	// with their bursts; a negative rate means no limit. A sender over a
	// limit for RateLimitGrace without a second's break is disconnected.
	RateMessages      float64
	RateMessagesBurst int
	RateBytes         float64
	RateBytesBurst    int // raised to MaxFrame+LenSize if lower: any legal frame can pass
	RateLimitGrace    time.Duration

	// FrameTimeout is how long a frame may take to arrive from its first
	// byte; PartialBudget caps the bytes held in partial frames over all
	// connections (negative: no cap).
	FrameTimeout  time.Duration
	PartialBudget int64

	// MaxMemory is the memory the relay may use, bytes: by default Go's
	// soft limit if GOMEMLIMIT set one, else the machine's or its memory
	// cgroup's (Machine.MemoryLimit). The budget of what it queues is a
	// share of it: QueueBudget bounds the bytes in outbound queues and
	// partial frames together, QueueBudgetPerSource those of one source
	// address (budget.go); negative: none.
	MaxMemory            int64
	QueueBudget          int64 // default MaxMemory / queueShare
	QueueBudgetPerSource int64 // default QueueBudget / perSourceShare

	// HeartbeatMisses: a client that heartbeats is removed after this many
	// of its heartbeat intervals without a frame (see beat); negative: off.
	HeartbeatMisses int
}

// DefaultConfig is the relay's defaults, the one place they are written
// (cmd/relay's flags take theirs from it). The rate limits are twice what
// a VR client sends or more: 72 Hz poses + 50 Hz voice + heartbeats is
// about 125 frames and 25 KB a second; bursts of object syncs fit the
// buckets. They also bound what a flooder can push into its room: 64 KiB/s
// times the members (docs/protocol.md, Rate limits).
//
// The caps on connections and rooms are sized from the machine the relay
// starts on (ReadMachine). A room's rate limits give each of its senders
// what the bundled VR captures' clients send at their peak (vrMessages
// frames a second), with two seconds of it at once: a room of honest
// members never meets them, whatever its size, even when the relay reads
// them late, while senders each under their own limit (which leaves one
// client room for its bursts) are held to it on average. Its bytes share
// is the sender's own byte rate: a sender under its own byte limit is
// never held by its room's. A room limit left at its default is off when
// the sender's limit of the same kind is (a negative rate).
func DefaultConfig() Config {
	m := ReadMachine()
	const members = 1024
	mem := int64(m.MemoryLimit())
	return Config{
		MaxMemory:               mem,
		QueueBudget:             mem / queueShare,
		QueueBudgetPerSource:    mem / queueShare / perSourceShare,
		MaxConnections:          m.MaxConnections(),
		MaxRooms:                m.MaxRooms(),
		MaxConnectionsPerSource: perSource(m.MaxConnections()),
		MaxRoomsPerSource:       perSource(m.MaxRooms()),
		RoomRateMessages:        vrMessages,
		RoomRateMessagesBurst:   2 * vrMessages,
		RoomRateBytes:           roomBytes,
		RoomRateBytesBurst:      2 * roomBytes,
		Listen:                  ":" + strconv.Itoa(wire.DefaultPort),
		UDP:                     UDPSameAsTCP,
		Metrics:                 ":" + strconv.Itoa(wire.DefaultMetricsPort),
		MaxFrame:                wire.DefaultMaxFrame,
		MaxRoomMembers:          members,
		MaxPending:              1 << 20,
		WriteTimeout:            2 * time.Second,
		WriteCoalesce:           time.Millisecond,
		IdleTimeout:             180 * time.Second,
		JoinTimeout:             10 * time.Second,
		UDPConfirmTimeout:       DefaultUDPConfirmTimeout,
		UDPPendingPerSource:     DefaultUDPPendingPerSource,
		UDPMaxPending:           DefaultUDPMaxPending,
		UDPReadBuffer:           DefaultUDPReadBuffer,
		UDPCoalesce:             DefaultUDPCoalesce,
		UDPHold:                 time.Millisecond,
		RateMessages:            250,
		RateMessagesBurst:       500,
		RateBytes:               roomBytes,
		RateBytesBurst:          128 << 10,
		RateLimitGrace:          3 * time.Second,
		FrameTimeout:            10 * time.Second,
		PartialBudget:           min(128<<20, max(mem/queueShare, 1<<20)),
		HeartbeatMisses:         3,
	}
}

// What one VR client sends at its peak, from the bundled captures
// (captures/README.md: 72 Hz poses, 50 Hz voice, heartbeats and object
// syncs; at most 134 frames in a second), rounded up: a member's share of
// the room rate limits' defaults.
const (
	vrMessages = 150
	vrBytes    = 25_000
	// roomBytes is a sender's bytes share of its room's limit: its own
	// default byte rate.
	roomBytes = 64 << 10
)

// Defaults of the UDP address validation (flags use them too).
const (
	DefaultUDPConfirmTimeout   = 3 * time.Second
	DefaultUDPPendingPerSource = 256
	DefaultUDPMaxPending       = 4096
)

func (c *Config) setDefaults() {
	d := DefaultConfig()
	if c.Listen == "" {
		c.Listen = d.Listen
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = d.MaxFrame
	}
	// Caps: 0 takes the default, negative means none (0 from here on).
	c.MaxConnections = capOr(c.MaxConnections, d.MaxConnections)
	c.MaxRooms = capOr(c.MaxRooms, d.MaxRooms)
	c.MaxConnectionsPerSource = capOr(c.MaxConnectionsPerSource, d.MaxConnectionsPerSource)
	c.MaxRoomsPerSource = capOr(c.MaxRoomsPerSource, d.MaxRoomsPerSource)
	if c.RoomRateMessages == 0 && c.RateMessages < 0 {
		c.RoomRateMessages = -1
	}
	if c.RoomRateBytes == 0 && c.RateBytes < 0 {
		c.RoomRateBytes = -1
	}
	if c.RoomRateMessages == 0 {
		c.RoomRateMessages = d.RoomRateMessages
	}
	if c.RoomRateMessagesBurst == 0 {
		c.RoomRateMessagesBurst = d.RoomRateMessagesBurst
	}
	if c.RoomRateBytes == 0 {
		c.RoomRateBytes = d.RoomRateBytes
	}
	if c.RoomRateBytesBurst == 0 {
		c.RoomRateBytesBurst = d.RoomRateBytesBurst
	}
	c.RoomRateBytesBurst = max(c.RoomRateBytesBurst, c.MaxFrame+wire.LenSize)
	if c.MaxRoomMembers <= 0 {
		c.MaxRoomMembers = wire.MaxRoomMembers
	}
	if c.UDPConfirmTimeout <= 0 {
		c.UDPConfirmTimeout = DefaultUDPConfirmTimeout
	}
	if c.UDPPendingPerSource <= 0 {
		c.UDPPendingPerSource = DefaultUDPPendingPerSource
	}
	if c.UDPMaxPending <= 0 {
		c.UDPMaxPending = DefaultUDPMaxPending
	}
	if c.UDPWorkers <= 0 {
		c.UDPWorkers = runtime.GOMAXPROCS(0)
	}
	if c.UDPReadBuffer == 0 {
		c.UDPReadBuffer = DefaultUDPReadBuffer
	}
	if c.UDPCoalesce == 0 {
		c.UDPCoalesce = DefaultUDPCoalesce
	}
	if c.MaxPending <= 0 {
		c.MaxPending = d.MaxPending
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = d.JoinTimeout
	}
	if c.RateMessages == 0 {
		c.RateMessages = d.RateMessages
	}
	if c.RateMessagesBurst == 0 {
		c.RateMessagesBurst = d.RateMessagesBurst
	}
	if c.RateBytes == 0 {
		c.RateBytes = d.RateBytes
	}
	if c.RateBytesBurst == 0 {
		c.RateBytesBurst = d.RateBytesBurst
	}
	c.RateBytesBurst = max(c.RateBytesBurst, c.MaxFrame+wire.LenSize)
	if c.RateLimitGrace <= 0 {
		c.RateLimitGrace = d.RateLimitGrace
	}
	if c.FrameTimeout <= 0 {
		c.FrameTimeout = d.FrameTimeout
	}
	if c.PartialBudget == 0 {
		c.PartialBudget = d.PartialBudget
	} else if c.PartialBudget < 0 {
		c.PartialBudget = 1<<63 - 1
	}
	if c.HeartbeatMisses == 0 {
		c.HeartbeatMisses = d.HeartbeatMisses
	}
	if c.MaxMemory <= 0 {
		c.MaxMemory = d.MaxMemory
	}
	// Budgets: 0 takes the default (a share of MaxMemory), negative means
	// none (0 from here on).
	if c.QueueBudget == 0 {
		c.QueueBudget = c.MaxMemory / queueShare
	} else if c.QueueBudget < 0 {
		c.QueueBudget = 0
	}
	if c.QueueBudgetPerSource == 0 {
		c.QueueBudgetPerSource = c.QueueBudget / perSourceShare
	} else if c.QueueBudgetPerSource < 0 {
		c.QueueBudgetPerSource = 0
	}
}

// queueShare: by default the relay's queues and partial frames may hold a
// quarter of its memory (Config.QueueBudget); the rest is its connections'
// goroutines and buffers, the rooms, the Go heap's headroom and the
// kernel's socket buffers where the container counts them (cgroup v2).
const queueShare = 4

// capOr is v, or def when v is 0; negative (no cap) becomes 0.
func capOr(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// check refuses values the protocol cannot honour.
func (c *Config) check() error {
	if c.MaxFrame < wire.MinMaxFrame {
		return fmt.Errorf("--max-frame %d: at least %d, the frame of a UDP join padded to %d bytes (docs/protocol.md)", c.MaxFrame, wire.MinMaxFrame, wire.UDPJoinPad)
	}
	for _, b := range []struct {
		flag string
		v    int
	}{{"--rate-messages-burst", c.RateMessagesBurst}, {"--rate-bytes-burst", c.RateBytesBurst},
		{"--room-rate-messages-burst", c.RoomRateMessagesBurst}, {"--room-rate-bytes-burst", c.RoomRateBytesBurst}} {
		if b.v < 0 {
			return fmt.Errorf("%s %d: a burst is at least 1 (a negative rate turns a limit off)", b.flag, b.v)
		}
	}
	if c.MaxRoomMembers > wire.MaxRoomMembers {
		return fmt.Errorf("--max-room-members %d: at most %d, the most a joined frame's u16 count can carry", c.MaxRoomMembers, wire.MaxRoomMembers)
	}
	return nil
}

// Shutdown budget: the relay exits within shutdownGrace of being told to
// stop; lingerTime bounds how long a closing connection's input is drained
// so the peer reads our last frame before the close instead of a reset.
const (
	shutdownGrace = 4 * time.Second
	lingerTime    = time.Second
)

// Server is one relay. New binds its sockets; Run serves until its context
// ends and then releases everything.
type Server struct {
	cfg   Config
	log   *zap.Logger
	m     *metrics.Relay
	reg   *prometheus.Registry
	rooms *room.Registry[*client]
	epoch time.Time

	ln    *tcpListener
	loops []*loop
	udp   *udpSock   // the first UDP socket: replies outside the workers' batches
	udps  []*udpSock // every UDP socket, one per worker
	mln   net.Listener
	httpS *http.Server

	nconns atomic.Int64  // TCP connections plus UDP sessions
	tokens tokenSet      // live UDP sessions' tokens, all workers
	pend   pendingCounts // unconfirmed UDP sessions, all workers
	nextID atomic.Uint64
	// nextLoop picks the loop of the next accepted connection; the
	// accept loop's own.
	nextLoop uint64

	bigDatagramLog atomic.Int64 // relay clock of the last such log line

	rateMsgs, rateBytes gcra
	roomMsgs, roomBytes gcra
	srcs                sources
	abuseLog            logLimiter
	partial             atomic.Int64  // bytes held in partial frames, all connections
	evict               chan struct{} // readers ask the sweeper to enforce PartialBudget
	mem                 memBudget     // the queues' memory budget (budget.go)
	// The sweeper's own: the peak of what the relay holds (heldBytes) since
	// the last reclaim, the value at the last tick, and when it last
	// reclaimed.
	heldPeak, heldLast, lastReclaim int64
	reclaimAgain                    int   // passes still due after the first
	reclaimAt                       int64 // when the next is
	reclaimc                        chan struct{}
	evictQuiet                      int64 // no memory-budget round before this

	mu       sync.Mutex
	stopping bool
	wg       sync.WaitGroup
	conns    [16]connShard
}

type connShard struct {
	mu   sync.Mutex
	m    map[*client]struct{}
	size shrinking
}

// New checks cfg, binds the TCP, UDP and metrics sockets, and registers the
// relay's metrics on reg (a fresh registry if nil). Run must follow, even
// if only to release the sockets.
func New(cfg Config, log *zap.Logger, reg *prometheus.Registry) (*Server, error) {
	cfg.setDefaults()
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, log: log, reg: reg, rooms: room.NewRegistry[*client](cfg.MaxRoomMembers), epoch: time.Now(),
		rateMsgs: newGCRA(cfg.RateMessages, cfg.RateMessagesBurst), rateBytes: newGCRA(cfg.RateBytes, cfg.RateBytesBurst),
		roomMsgs: newGCRA(cfg.RoomRateMessages, cfg.RoomRateMessagesBurst), roomBytes: newGCRA(cfg.RoomRateBytes, cfg.RoomRateBytesBurst),
		evict: make(chan struct{}, 1), lastReclaim: -reclaimEvery, reclaimc: make(chan struct{}, 1)}
	s.abuseLog.every = int64(time.Second)
	s.mem.init(cfg.QueueBudget, cfg.QueueBudgetPerSource)
	for i := range s.conns {
		s.conns[i].m = make(map[*client]struct{})
	}
	m, err := metrics.NewRelay(reg, s.rooms.Rooms, func() float64 { return float64(s.partial.Load()) })
	if err != nil {
		return nil, err
	}
	s.m = m
	if err := metrics.RegisterQueueMemory(reg, func() float64 { return float64(s.mem.total()) }, cfg.QueueBudget, cfg.QueueBudgetPerSource); err != nil {
		return nil, err
	}
	if err := s.bind(); err != nil {
		s.closeSockets()
		return nil, err
	}
	return s, nil
}

// portTries is how many ports bind tries when --listen's port is 0 and UDP
// shares it: the kernel picks a free TCP port, which another program may
// hold for UDP.
const portTries = 16

func (s *Server) bind() error {
	var err error
	for try := 1; ; try++ {
		err = s.bindListeners()
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || s.cfg.UDP != UDPSameAsTCP || !anyPort(s.cfg.Listen) || try == portTries {
			break
		}
		s.closeSockets()
		s.ln, s.udps, s.udp = nil, nil, nil
	}
	if err != nil {
		return err
	}
	if s.udp != nil {
		if err := s.registerUDPDrops(); err != nil {
			return err
		}
	}
	if addr := s.cfg.Metrics; addr != "" && addr != "off" {
		if s.mln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen metrics %s: %w", addr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
		s.httpS = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	}
	return nil
}

// bindListeners binds the TCP listener and the UDP sockets.
func (s *Server) bindListeners() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen tcp %s: %w", s.cfg.Listen, err)
	}
	if s.ln, err = newTCPListener(ln.(*net.TCPListener)); err != nil {
		return fmt.Errorf("listen tcp %s: %w", s.cfg.Listen, err)
	}
	addr := s.cfg.UDP
	if addr == "" || addr == "off" {
		return nil
	}
	if addr == UDPSameAsTCP {
		host, _, err := net.SplitHostPort(s.cfg.Listen)
		if err != nil {
			return fmt.Errorf("udp address from --listen %q: %w", s.cfg.Listen, err)
		}
		addr = net.JoinHostPort(host, strconv.Itoa(s.ln.Addr().(*net.TCPAddr).Port))
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return fmt.Errorf("udp address %s: %w", addr, err)
	}
	if s.udps, err = listenUDP(ua, s.cfg.UDPWorkers, s.cfg.UDPReadBuffer); err != nil {
		return err
	}
	s.udp = s.udps[0]
	return nil
}

// anyPort reports whether addr asks for any free port (port 0).
func anyPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && (port == "0" || port == "")
}

func (s *Server) closeSockets() {
	if s.ln != nil {
		s.ln.Close()
	}
	for _, c := range s.udps {
		c.Close()
	}
	if s.mln != nil {
		s.mln.Close()
	}
}

// Addr is the TCP listener's address.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// UDPAddr is the UDP socket's address, or nil without UDP.
func (s *Server) UDPAddr() net.Addr {
	if s.udp == nil {
		return nil
	}
	return s.udp.LocalAddr()
}

// MetricsAddr is the metrics listener's address, or nil without one.
func (s *Server) MetricsAddr() net.Addr {
	if s.mln == nil {
		return nil
	}
	return s.mln.Addr()
}

// Config is the configuration the relay runs with, defaults filled in (a
// cap of 0 is none).
func (s *Server) Config() Config { return s.cfg }

// Rooms is the number of rooms that exist.
func (s *Server) Rooms() int { return s.rooms.Rooms() }

// Members is the number of room members over all rooms.
func (s *Server) Members() int { return s.rooms.Members() }

// Connections is the number of TCP connections plus UDP sessions.
func (s *Server) Connections() int { return int(s.nconns.Load()) }

// Run serves until ctx ends, then stops accepting, tells every client
// shutting_down, closes them, and returns once all its goroutines are done
// (within about shutdownGrace). It returns nil after a shutdown asked for by
// ctx, or the error that stopped it.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	for range max(runtime.GOMAXPROCS(0), 1) {
		lp, err := newLoop(s)
		if err != nil {
			for _, lp := range s.loops {
				lp.close()
			}
			s.loops = nil
			s.shutdown()
			return fmt.Errorf("event loop: %w", err)
		}
		s.loops = append(s.loops, lp)
	}
	for _, lp := range s.loops {
		s.goFn(lp.run)
	}
	s.goFn(func() { errc <- s.acceptLoop(ctx) })
	for _, conn := range s.udps {
		u, err := newUDPServer(s, conn)
		if err != nil {
			cancel()
			s.shutdown()
			return fmt.Errorf("udp worker: %w", err)
		}
		s.goFn(func() { u.loop(ctx) })
	}
	s.goFn(func() { s.sweep(ctx) })
	s.goFn(func() { s.reclaimLoop(ctx) })
	if s.httpS != nil {
		s.goFn(func() {
			if err := s.httpS.Serve(s.mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics server: %w", err)
			}
		})
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	s.shutdown()
	return err
}

// goFn starts f as a goroutine Run waits for, unless shutdown has begun.
func (s *Server) goFn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

func (s *Server) shutdown() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.ln.wake()
	for _, lp := range s.loops {
		lp.stop(false) // it returns once its connections are gone
	}
	for _, c := range s.udps {
		// Wake the UDP workers now rather than at their next tick.
		c.wake()
	}
	s.eachClient(func(c *client) { c.close(wire.ErrShuttingDown, "relay is stopping") })
	if s.httpS != nil {
		hctx, hcancel := context.WithTimeout(context.Background(), time.Second)
		s.httpS.Shutdown(hctx)
		hcancel()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
		s.log.Warn("shutdown grace over; closing remaining connections")
		for _, lp := range s.loops {
			lp.stop(true)
		}
		<-done
	}
	for _, lp := range s.loops {
		lp.close() // no goroutine is left to post to it
	}
	s.ln.Close()
	for _, c := range s.udps {
		c.Close()
	}
}

// logLimited logs msg at most once a second per *last: about clients, whose
// misbehaviour must not flood the log.
func (s *Server) logLimited(last *atomic.Int64, msg string, fields ...zap.Field) {
	now, prev := s.now(), last.Load()
	if now-prev < int64(time.Second) && prev != 0 || !last.CompareAndSwap(prev, now) {
		return
	}
	s.log.Warn(msg, fields...)
}

// now is the relay's monotonic clock in nanoseconds.
func (s *Server) now() int64 { return int64(time.Since(s.epoch)) }

func (s *Server) connShard(c *client) *connShard { return &s.conns[c.id%uint64(len(s.conns))] }

func (s *Server) addClient(c *client) {
	sh := s.connShard(c)
	sh.mu.Lock()
	sh.m[c] = struct{}{}
	sh.size.grew(len(sh.m))
	sh.mu.Unlock()
}

func (s *Server) removeClient(c *client) {
	sh := s.connShard(c)
	sh.mu.Lock()
	delete(sh.m, c)
	sh.m = shrunk(&sh.size, sh.m)
	sh.mu.Unlock()
}

// eachClient calls f for every TCP client, outside the set's locks.
func (s *Server) eachClient(f func(*client)) {
	var list []*client
	for i := range s.conns {
		sh := &s.conns[i]
		sh.mu.Lock()
		for c := range sh.m {
			list = append(list, c)
		}
		sh.mu.Unlock()
	}
	for _, c := range list {
		f(c)
	}
}

// sweepTick is how often timeouts are checked: a quarter of the shortest
// timeout, at most a second, so a timeout fires at most 25% late.
func (s *Server) sweepTick() time.Duration {
	t := min(time.Second, s.cfg.JoinTimeout/4, s.cfg.IdleTimeout/4, s.cfg.UDPConfirmTimeout/4, s.cfg.FrameTimeout/4)
	return max(t, 5*time.Millisecond)
}

// sweep enforces the join, idle, liveness and frame timeouts of TCP
// connections with one ticker for all of them instead of a timer each, and
// the partial-frame budget when a reader asks.
func (s *Server) sweep(ctx context.Context) {
	t := time.NewTicker(s.sweepTick())
	defer t.Stop()
	join := int64(s.cfg.JoinTimeout)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.evict:
			s.evictPartial()
			continue
		case <-s.mem.evict:
			// A round that found nobody to cut is not repeated for
			// evictIdle: every chunk taken over the budget asks for one.
			if now := s.now(); now >= s.evictQuiet {
				if s.evictMemory() == 0 {
					s.evictQuiet = now + evictIdle
				}
			}
			continue
		case <-t.C:
		}
		now := s.now()
		s.reclaim(now)
		s.eachClient(func(c *client) {
			c.checkPartial(now)
			if c.joined.Load() {
				if bound := c.idleBound(); now-c.lastActive.Load() > int64(bound) && !c.bytesWaiting() {
					c.close(wire.ErrIdleTimeout, idleText(bound))
				}
			} else if now-c.unjoinedSince.Load() > join {
				c.close(wire.ErrJoinTimeout, "no join within "+s.cfg.JoinTimeout.String())
			}
		})
	}
}

// acceptLoop accepts TCP connections until the listener is woken, and
// hands each to a loop.
func (s *Server) acceptLoop(ctx context.Context) error {
	var delay time.Duration
	for {
		fd, src, err := s.ln.accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors and the like: back off, don't spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("accept", zap.Error(err), zap.Duration("retry_in", delay))
			select {
			case <-time.After(delay):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		delay = 0
		if err := setConnOptions(fd); err != nil {
			s.log.Debug("accepted connection's options", zap.Error(err))
			unix.Close(fd)
			continue
		}
		lp := s.loops[s.nextLoop%uint64(len(s.loops))]
		s.nextLoop++
		c := newTCPClient(s, fd, lp)
		c.src = src
		if text, cap := s.admit(src); text != "" {
			s.reject(rejectFor(wire.ErrServerFull))
			s.m.Refused(cap)
			// Served by its loop only to get the error frame and a FIN.
			c.refused = true
			r := closeFor(wire.ErrServerFull)
			c.out.closeWith(wire.AppendError(nil, r.Code(), text), r)
			c.tc.readDeadline.Store(s.now() + int64(lingerTime))
			if !lp.adopt(c) {
				unix.Close(fd)
			}
			continue
		}
		s.nconns.Add(1)
		s.m.ConnectionsTCP.Inc()
		s.addClient(c)
		if !lp.adopt(c) {
			s.removeClient(c)
			s.srcs.disconnect(src)
			s.nconns.Add(-1)
			s.m.ConnectionsTCP.Dec()
			unix.Close(fd)
		}
	}
}

// admit counts a new connection or UDP session from src against
// --max-connections and src's share. If a cap refuses it, admit returns
// the error text and the cap's metric label, and counts nothing.
func (s *Server) admit(src netip.Addr) (text, cap string) {
	if max := s.cfg.MaxConnections; max > 0 && s.nconns.Load() >= int64(max) {
		return "relay at --max-connections (" + strconv.Itoa(max) + ")", metrics.CapConnections
	}
	if !s.srcs.connect(src, s.cfg.MaxConnectionsPerSource) {
		return "this address holds --max-connections-per-source (" + strconv.Itoa(s.cfg.MaxConnectionsPerSource) + ") connections and sessions", metrics.CapConnectionsPerSource
	}
	return "", ""
}
