package fleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/session"
)

// Config is one fleet run. DefaultConfig gives the command line's defaults;
// a zero field means what its comment says.
type Config struct {
	// Source is what is replayed, read and compiled by the profile's
	// loader (profile.Load): the capture and its flow or flows (Flow -1:
	// the longest; Flows excludes Flow, Client and Frames), or Frames a
	// program built, the capture's reading limits and key log, and the
	// transport (empty: the capture's, tcp for Frames).
	profile.Source

	// Target is the relay's host:port (required: the fleet starts no
	// server; replay's commands start a relay child without --target).
	Target string
	// TLS is how the fleet speaks TLS to the target (tls.go); the zero
	// value is plaintext.
	TLS TLS
	// Profile is the protocol, resolved by the caller (the command looks
	// --profile up once, at its edge: profile.Lookup); nil is
	// profile.DefaultProfile.
	Profile *profile.Profile
	// Loaded, when set, is Source already compiled by Load: New plays it
	// instead of reading the capture again (compare loads once for all
	// its in-process runs). It must come from this Config's source,
	// profile and script options.
	Loaded *profile.Loaded
	// RecordedUser and RecordedRoom give the recorded user id and room by
	// value, for profiles that cannot place them.
	RecordedUser, RecordedRoom string

	// Clients is the whole fleet's size; a sharded run plays the clients
	// of its Shard among them.
	Clients int
	Shard   Shard
	// Senders play the loop; the rest are receive-only (1:N). 0 means
	// every client sends (N:N). With RoomSize they are spread over the
	// rooms (isSender), else they are the first clients.
	Senders int
	// ReceiveOnly makes every client receive-only.
	ReceiveOnly bool
	// Loop is "A,B" (see session.ParseLoop); empty plays the script once.
	// LoopPoints, when set, is Loop already parsed (the command line's
	// --loop parses at the flag, session.LoopValue); it wins over Loop.
	Loop       string
	LoopPoints *session.Loop
	Speed      float64
	// Heartbeat is the interval of receive-only clients' heartbeats (and of
	// senders' after a script played once); 0: none. HeartbeatDefault
	// (DefaultConfig's) takes the profile's heartbeat.interval, or
	// DefaultHeartbeat when the profile gives none.
	Heartbeat time.Duration

	UserIDFormat   string // fmt format with one %d: the client's index from 0
	Room           string // room name; empty keeps the recorded one
	RoomSize       int    // clients per room; 0: one room
	RewritePayload bool
	AuthSecret     string // signs joins when set
	// WSDeflate: what a WebSocket upgrade offers of permessage-deflate
	// (the recorded offer, or none).
	WSDeflate DeflateMode

	LoginInterval time.Duration // cooldown between two login attempts
	PauseEvery    int           // pause the ramp after this many attempts; 0: never
	Pause         time.Duration
	LoginTimeout  time.Duration // a login fails if joined does not arrive within it
	Duration      time.Duration // whole run; 0: until the context ends
	// Hold ends the run this long after every login attempt of this
	// shard has its result (joined or failed), whatever the ramp took: a
	// run that must hold every client for a time, on a host whose speed
	// nobody knows, ends by its logins' count rather than at a fixed
	// instant that a slow ramp may not reach. 0: none; with Duration too,
	// the first to come ends the run.
	Hold time.Duration

	// Levels are attempt counts (increasing, the last at most Clients)
	// where the ramp waits for AtLevel (required with Levels): when the
	// next attempt is due (for Clients, one LoginInterval after the last),
	// the ramp calls AtLevel(ctx, count); true goes on, its schedule
	// shifted by the time since the level was due, false ends the run there
	// (drain, leave, summary, as at the end of Duration). A capacity search
	// holds and judges each level in it; a shard's AtLevel waits at its
	// coordinator's level barrier, so that every shard goes on, or stops,
	// on the coordinator's word and none runs ahead of the decision.
	Levels  []int
	AtLevel func(ctx context.Context, attempts int) bool
	// LevelHold is about how long AtLevel holds each level (a capacity
	// search's hold and last scrape), for the progress line's time to the
	// last login only; 0: not known, and the line counts the holds to come
	// instead.
	LevelHold time.Duration

	// Metrics is the listen address of /metrics; empty disables it.
	Metrics string
	// MetricsListener, when set, is /metrics' listener, already bound (a
	// shard's, inherited from the process that chose its port); Metrics is
	// then only its name. The fleet closes it.
	MetricsListener net.Listener `json:"-"`
	// SourceIPs spread connections over these local addresses.
	SourceIPs []string

	// ServerPIDs are processes on this host that serve the target (a
	// relay child this command started): their CPU is the server's,
	// neither the fleet's nor the host's other work, when the progress
	// judges what limited an interval (judgeLoad), as the report does.
	ServerPIDs []int `json:"-"`

	// ProgressInterval is the period of progress lines; 0 means 5 s.
	ProgressInterval time.Duration
	// Out receives progress lines and warnings; nil discards them.
	Out io.Writer
	// Log receives debug events; nil discards them.
	Log *zap.Logger

	// WriteTimeout bounds one write to the relay; 0 means 2 s.
	WriteTimeout time.Duration
	// DrainTimeout bounds the wait for in-flight deliveries after the last
	// send; 0 means 2 s.
	DrainTimeout time.Duration
	// SendBacklog caps the bytes a TCP client may have waiting behind a
	// socket the server does not drain (send.go); past it the client is
	// disconnected as send_backlog_full. 0 means 64 KiB.
	SendBacklog int
	// PlainSyscalls has the pollers read each ready socket with its own
	// read(2), and the schedulers write each client's turn with its own
	// write(2), as where the kernel has no io_uring (or forbids it); by
	// default each batches up to ringBatch sockets in one io_uring call.
	PlainSyscalls bool
	// LeaveTimeout bounds the leave: after its goodbye and half-close a
	// client reads until the server closes (so it has read every byte the
	// client sent), at most this long for the whole fleet; 0 means 5 s.
	LeaveTimeout time.Duration
}

// HeartbeatDefault, as Config.Heartbeat, asks for the profile's heartbeat
// interval (a profile file's heartbeat.interval), or DefaultHeartbeat.
const HeartbeatDefault time.Duration = -1

// DefaultHeartbeat is the heartbeat interval when neither the command line
// nor the profile gives one.
const DefaultHeartbeat = 60 * time.Second

// heartbeat is the interval the clients use, given the profile's (0: it
// has none).
func (c *Config) heartbeat(profileInterval time.Duration) time.Duration {
	switch {
	case c.Heartbeat != HeartbeatDefault:
		return c.Heartbeat
	case profileInterval > 0:
		return profileInterval
	}
	return DefaultHeartbeat
}

// DefaultMetrics is where a fleet serves /metrics unless told: loopback
// only (a load generator's counters are not for the whole network; pass
// --metrics :9401 to serve every interface). Taken already (another
// replay on this host), a free loopback port is used and printed instead.
var DefaultMetrics = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultMetricsPort))

// DefaultMetricsPort is the fleet's /metrics port, beside the relay's; a
// pod serves it on every interface. It is wire.FleetMetricsPort, which
// the manifests read (the fleet imports no protocol package; a test
// holds the two together).
const DefaultMetricsPort = 9401

// DefaultConfig returns the defaults of the replay command.
func DefaultConfig() Config {
	return Config{
		Source:           profile.Source{Flow: -1, CaptureMemory: profile.DefaultCaptureMemory},
		Profile:          profile.DefaultProfile(),
		Clients:          1,
		Speed:            1,
		Heartbeat:        HeartbeatDefault,
		UserIDFormat:     "replay-%d",
		LoginInterval:    8 * time.Second,
		LoginTimeout:     10 * time.Second,
		Metrics:          DefaultMetrics,
		DrainTimeout:     2 * time.Second,
		LeaveTimeout:     5 * time.Second,
		ProgressInterval: 5 * time.Second,
		WriteTimeout:     2 * time.Second,
		// About 9 s of a 72 Hz pose stream on top of the kernel's socket
		// buffers.
		SendBacklog: 64 << 10,
	}
}

// withDefaults gives a zero field DefaultConfig's value (a program that
// builds its Config by hand): the defaults are written once, there.
func (c *Config) withDefaults() {
	d := DefaultConfig()
	if c.Profile == nil {
		c.Profile = d.Profile
	}
	if c.Speed == 0 {
		c.Speed = d.Speed
	}
	if c.UserIDFormat == "" {
		c.UserIDFormat = d.UserIDFormat
	}
	if c.LoginTimeout <= 0 {
		c.LoginTimeout = d.LoginTimeout
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = d.ProgressInterval
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = d.DrainTimeout
	}
	if c.LeaveTimeout <= 0 {
		c.LeaveTimeout = d.LeaveTimeout
	}
	if c.SendBacklog <= 0 {
		c.SendBacklog = d.SendBacklog
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
}

// Validate checks c as New does, without loading anything (the capture
// is read by New: a loop past the flow's end is found there): for a
// command that wants every flag checked before it starts anything.
func (c Config) Validate() error {
	c.withDefaults()
	return c.validate()
}

// CheckHost makes New's checks of this host for a fleet of c run in this
// process: the open-file limit and --source-ips.
func (c Config) CheckHost() error {
	if err := checkOpenFiles(c.Shard.Clients(c.Clients)); err != nil {
		return err
	}
	return checkSourceIPs(c.SourceIPs)
}

// ErrBadConfig marks errors in the configuration (bad flags): the
// profile loader's, one value for both.
var ErrBadConfig = profile.ErrBadConfig

func badf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadConfig, fmt.Sprintf(format, args...))
}

func (c *Config) validate() error {
	switch {
	case c.Capture == "" && c.Frames == nil:
		return badf("--capture is required")
	case c.Flows.IsSet() && (c.Flow >= 0 || c.Client.IsValid() || c.Frames != nil):
		return badf("--flows with --flow or --client: pick one")
	case c.Target == "":
		return badf("no target: the fleet needs a relay's host:port")
	case c.Clients < 1:
		return badf("--clients %d: need at least 1", c.Clients)
	case c.Shard.Count < 0 || c.Shard.Index < 0 || (c.Shard.Count > 0 && c.Shard.Index >= c.Shard.Count):
		return badf("--shard %d/%d: need 0 <= i < n", c.Shard.Index, c.Shard.Count)
	case c.Senders < 0 || c.Senders > c.Clients:
		return badf("--senders %d: must be 0 (all send) to --clients (%d)", c.Senders, c.Clients)
	case c.Senders > 0 && c.ReceiveOnly:
		return badf("--senders and --receive-only together: pick one")
	case c.Speed <= 0:
		return badf("--speed %v: must be positive", c.Speed)
	case c.Heartbeat < 0 && c.Heartbeat != HeartbeatDefault:
		return badf("--heartbeat %v: must not be negative", c.Heartbeat)
	case c.Heartbeat > 0 && c.Heartbeat < profile.MinHeartbeat:
		return badf("--heartbeat %v: at least %v (0: none)", c.Heartbeat, profile.MinHeartbeat)
	case c.RoomSize < 0:
		return badf("--room-size %d: must not be negative", c.RoomSize)
	case c.LoginInterval < 0 || c.Pause < 0 || c.Duration < 0 || c.Hold < 0:
		return badf("durations must not be negative")
	case c.Hold > 0 && len(c.Levels) > 0:
		return badf("--after-logins with levels: a level's hold is its driver's")
	case c.MaxFrame < 0:
		return badf("--max-frame %d: must not be negative", c.MaxFrame)
	case !levelsOK(c.Levels, c.Clients) || (len(c.Levels) > 0 && c.AtLevel == nil):
		return badf("levels %v: want increasing counts up to --clients %d, and a function to call at each", c.Levels, c.Clients)
	case c.PauseEvery < 0:
		return badf("--pause-every %d: must not be negative", c.PauseEvery)
	case c.Transport != "" && c.Transport != "tcp" && c.Transport != "udp" && c.Transport != "websocket":
		return badf("--transport %q: tcp, udp or websocket", c.Transport)
	}
	if _, err := c.loop(); err != nil {
		return badf("--loop: %v", err)
	}
	if err := c.TLS.validate(); err != nil {
		return err
	}
	if c.TLS.Enabled && c.Transport == "udp" {
		return badf("--tls over udp: TLS runs over the stream transports (tcp, websocket); DTLS is not supported")
	}
	if err := c.checkIDFormat(); err != nil {
		return err
	}
	for _, ip := range c.SourceIPs {
		if _, err := netip.ParseAddr(ip); err != nil {
			return badf("--source-ips %q: %v", ip, err)
		}
	}
	return nil
}

func levelsOK(levels []int, clients int) bool {
	for i, l := range levels {
		if l <= 0 || l > clients || (i > 0 && l <= levels[i-1]) {
			return false
		}
	}
	return true
}

// idFormat is a --user-id-format: one %d, zero-padded to at most 99
// digits, and no other verb (a wider pad allocates the width per id, and
// fmt writes a width past its limit as %!(NOVERB)).
var idFormat = regexp.MustCompile(`^[^%]*%(0?[1-9][0-9]?)?d[^%]*$`)

func (c *Config) checkIDFormat() error {
	if !idFormat.MatchString(c.UserIDFormat) {
		return badf("--user-id-format %q: needs exactly one %%d (or a padded one up to %%099d) and no other verb", c.UserIDFormat)
	}
	return nil
}

func (c *Config) userID(i int) string { return fmt.Sprintf(c.UserIDFormat, i) }

// roomName is client i's room; every client asks for the same one when
// the server assigns the instances.
func (f *Fleet) roomName(i int, recorded string) string {
	if f.insts != nil {
		if f.cfg.Room != "" {
			return f.cfg.Room
		}
		return recorded
	}
	return f.cfg.roomName(i, recorded)
}

// roomName is client i's room: the base name (--room or the recorded one),
// with "-k" for the k-th room of --room-size clients.
func (c *Config) roomName(i int, recorded string) string {
	base := c.Room
	if base == "" {
		base = recorded
	}
	if c.RoomSize <= 0 {
		return base
	}
	return fmt.Sprintf("%s-%d", base, i/c.RoomSize)
}

// isSender reports whether client i plays the loop. Senders are spread
// over the rooms of --room-size as evenly as they go (room r gets
// Senders/rooms, one more for the first Senders%rooms rooms): the first
// clients of each room send. It depends only on i and the config, so the
// shards of a fleet agree.
func (c *Config) isSender(i int) bool {
	switch {
	case c.ReceiveOnly:
		return false
	case c.Senders == 0:
		return true
	case c.RoomSize <= 0:
		return i < c.Senders
	}
	return i%c.RoomSize < c.roomSenders(i/c.RoomSize)
}

// rooms is how many rooms --room-size makes (1 without it).
func (c *Config) rooms() int {
	if c.RoomSize <= 0 {
		return 1
	}
	return (c.Clients + c.RoomSize - 1) / c.RoomSize
}

// roomSenders is how many senders room r holds (with RoomSize).
func (c *Config) roomSenders(r int) int {
	n := c.Senders / c.rooms()
	if r < c.Senders%c.rooms() {
		n++
	}
	return n
}

// silentRooms is how many rooms hold listeners but no sender.
func (c *Config) silentRooms() int {
	if c.ReceiveOnly || c.Senders == 0 || c.RoomSize <= 0 {
		return 0
	}
	return max(c.rooms()-c.Senders, 0)
}

// roomMembers is the range [lo, hi) of client indexes sharing i's room.
func (c *Config) roomMembers(i int) (lo, hi int) {
	if c.RoomSize <= 0 {
		return 0, c.Clients
	}
	lo = i / c.RoomSize * c.RoomSize
	return lo, min(lo+c.RoomSize, c.Clients)
}

// peers maps the recorded other users onto other clients of i's room, one
// to one: the members after i in join order, wrapping around; past the
// room's size, onto ids beyond the fleet (never present, so casts to them
// reach no one, as the relay skips absent targets).
func (c *Config) peers(i, others int) []string {
	idx := c.peerIndexes(i, others)
	if idx == nil {
		return nil
	}
	out := make([]string, len(idx))
	for k, j := range idx {
		out[k] = c.userID(j)
	}
	return out
}

// peerIndexes are the fleet indexes of client i's peers (see peers); an
// index past the fleet stands for a user who is not there.
func (c *Config) peerIndexes(i, others int) []int {
	if others == 0 {
		return nil
	}
	lo, hi := c.roomMembers(i)
	m := hi - lo
	out := make([]int, others)
	for k := range out {
		if k < m-1 {
			out[k] = lo + (i-lo+1+k)%m
		} else {
			out[k] = c.Clients + k - (m - 1)
		}
	}
	return out
}

// loop is the loop to play, nil for none.
func (c *Config) loop() (*session.Loop, error) {
	if c.LoopPoints != nil {
		return c.LoopPoints, nil
	}
	l, ok, err := session.ParseLoop(c.Loop)
	if err != nil || !ok {
		return nil, err
	}
	return &l, nil
}
