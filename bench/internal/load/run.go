package load

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"golang.org/x/sys/unix"
)

// Config is one load run.
type Config struct {
	Proto       Protocol
	Addr        string
	Rooms       int
	Members     int     // per room; every member receives
	Senders     int     // per room: members 0..Senders-1 send
	Rate        float64 // sends per second per sender
	PayloadSize int     // at least HeaderLen
	Warmup      time.Duration
	Duration    time.Duration // the measurement window; sending stops at its end
	Drain       time.Duration // how long to wait for deliveries still in flight
	// LateAfter: a send written later than this after its tick is counted
	// late. A tick the pacer reaches more than one period late is skipped
	// whole and its sends counted as skipped, never sent in a burst.
	LateAfter time.Duration
	// Spread gives each sender of a room its own phase within the period
	// (as independent clients have) instead of sending the room in one
	// burst per tick. Still one pacer goroutine per room.
	Spread       bool
	JoinTimeout  time.Duration
	DialParallel int
	ReadBuffer   int
	// OnWindow, if set, is called when the measurement window opens (true)
	// and closes (false), from the runner's goroutine: the caller samples the
	// server's CPU there.
	OnWindow func(open bool)
}

func (c *Config) check() error {
	switch {
	case c.Proto == nil:
		return errors.New("no protocol")
	case c.Rooms < 1 || c.Members < 2 || c.Senders < 1 || c.Senders > c.Members:
		return fmt.Errorf("workload %d rooms × %d members with %d senders: need rooms ≥ 1, members ≥ 2, 1 ≤ senders ≤ members", c.Rooms, c.Members, c.Senders)
	case c.Rate <= 0 || c.PayloadSize < HeaderLen:
		return fmt.Errorf("rate %g/s, payload %d B: need rate > 0 and payload ≥ %d B", c.Rate, c.PayloadSize, HeaderLen)
	case c.Duration <= 0:
		return errors.New("duration must be > 0")
	}
	if c.JoinTimeout <= 0 {
		c.JoinTimeout = 30 * time.Second
	}
	if c.DialParallel <= 0 {
		c.DialParallel = 64
	}
	if c.ReadBuffer <= 0 {
		c.ReadBuffer = 32 << 10
	}
	if c.LateAfter <= 0 {
		c.LateAfter = 2 * time.Millisecond
	}
	return nil
}

// Result is what one run measured.
type Result struct {
	Connections  int
	Window       time.Duration
	Sent         uint64 // successful sends over the whole run
	SentInWindow uint64
	Late         uint64 // sends written more than LateAfter after their tick
	Skipped      uint64 // sends of ticks skipped because the pacer fell a period behind
	Expected     uint64 // deliveries owed for Sent: each send × the other members
	Counts       Counts // summed over receivers
	Missing      uint64 // Expected minus distinct deliveries, after the drain
	Drained      time.Duration
	Latency      *hdrhistogram.Histogram // µs, sends inside the window
	ClientCPU    time.Duration           // this process, inside the window
	Errors       uint64
	FirstError   string
}

// member is one connection. conn, tr and the counters below it are owned by
// the room's pacer (sends) and the member's reader (receives) respectively.
type member struct {
	room, idx int
	conn      net.Conn
	tr        *Tracker
	wbuf      []byte
	token     uint64 // UDP session token: set by the reader before the join is reported ready
	sent      uint64 // owned by the pacer
	inWin     uint64
	err       error // owned by the reader, read after it exits
}

type runner struct {
	cfg     Config
	win     Window
	members []*member
	closing atomic.Bool
	readers sync.WaitGroup
	errs    atomic.Uint64
	errMu   sync.Mutex
	first   error
}

func (r *runner) fail(err error) {
	r.errs.Add(1)
	r.errMu.Lock()
	if r.first == nil {
		r.first = err
	}
	r.errMu.Unlock()
}

// Run connects every member, paces the sends, waits for the deliveries and
// returns what it measured. Every goroutine it starts has stopped when it
// returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg}
	r.win.Set(1<<62, 1<<62) // closed until the senders start
	defer r.shutdown()
	if err := r.connect(ctx); err != nil {
		return nil, err
	}
	return r.drive(ctx)
}

// connect dials and joins every member, DialParallel at a time, each with
// its reader goroutine started, and returns once every join is confirmed.
func (r *runner) connect(ctx context.Context) error {
	cfg := r.cfg
	ready := make(chan error, cfg.Rooms*cfg.Members)
	sem := make(chan struct{}, cfg.DialParallel)
	ctx, cancel := context.WithTimeout(ctx, cfg.JoinTimeout)
	defer cancel()
	var d net.Dialer
	network := "tcp"
	if _, ok := cfg.Proto.(Datagrams); ok {
		network = "udp"
	}
	for room := 0; room < cfg.Rooms; room++ {
		for idx := 0; idx < cfg.Members; idx++ {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return fmt.Errorf("joining: %w", ctx.Err())
			}
			c, err := d.DialContext(ctx, network, cfg.Addr)
			if err != nil {
				return fmt.Errorf("dial %s (member %d of room %d): %w", cfg.Addr, idx, room, err)
			}
			m := &member{room: room, idx: idx, conn: c, tr: NewTracker(uint32(room), uint32(idx), cfg.Members, &r.win)}
			r.members = append(r.members, m)
			if _, err := c.Write(cfg.Proto.AppendHello(nil, room, idx)); err != nil {
				return fmt.Errorf("hello (member %d of room %d): %w", idx, room, err)
			}
			r.readers.Add(1)
			go r.read(m, ready, sem)
		}
	}
	for range r.members {
		select {
		case err := <-ready:
			if err != nil {
				return fmt.Errorf("joining: %w", err)
			}
		case <-ctx.Done():
			return fmt.Errorf("joining %d members: %w", len(r.members), ctx.Err())
		}
	}
	return nil
}

// read is a member's one reader: it confirms the join, then accounts every
// delivery until the runner closes the connection.
func (r *runner) read(m *member, ready chan<- error, sem <-chan struct{}) {
	defer r.readers.Done()
	joined := false
	join := func(err error) {
		if !joined {
			joined = true
			<-sem
			ready <- err
		}
	}
	defer func() {
		if !joined {
			join(fmt.Errorf("member %d of room %d: %w", m.idx, m.room, errors.Join(m.err, errors.New("closed before the join was confirmed"))))
		}
	}()
	buf := make([]byte, r.cfg.ReadBuffer)
	have := 0
	var ev Events
	deliver := m.tr.Deliver // one method value for the whole loop, not one closure per read
	for {
		n, err := m.conn.Read(buf[have:])
		if n > 0 {
			have += n
			// One clock read per read: every message in it arrived together.
			m.tr.SetNow(time.Now().UnixNano())
			used, perr := r.cfg.Proto.Scan(buf[:have], &ev, deliver)
			m.tr.Publish()
			if perr != nil {
				m.err = perr
				r.fail(perr)
				return
			}
			if ev.Token != 0 && m.token == 0 {
				m.token = ev.Token // before join(nil): the pacers start after every join is ready
			}
			if ev.Ready {
				join(nil)
			}
			if len(ev.Reply) > 0 {
				if _, werr := m.conn.Write(ev.Reply); werr != nil && !r.closing.Load() {
					m.err = werr
					r.fail(werr)
					return
				}
				ev.Reply = ev.Reply[:0]
			}
			have = copy(buf, buf[used:have])
			if have == len(buf) {
				m.err = fmt.Errorf("a message over the %d-byte read buffer", len(buf))
				r.fail(m.err)
				return
			}
		}
		if err != nil {
			if !r.closing.Load() {
				m.err = fmt.Errorf("read (member %d of room %d): %w", m.idx, m.room, err)
				r.fail(m.err)
			}
			return
		}
	}
}

// drive runs the pacers through warm-up and the window, drains, and
// gathers the result.
func (r *runner) drive(ctx context.Context) (*Result, error) {
	cfg := r.cfg
	period := time.Duration(float64(time.Second) / cfg.Rate)
	start := time.Now().Add(100 * time.Millisecond)
	winStart := start.Add(cfg.Warmup)
	winEnd := winStart.Add(cfg.Duration)
	r.win.Set(winStart.UnixNano(), winEnd.UnixNano())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pacers sync.WaitGroup
	stats := make([]paceStats, cfg.Rooms)
	for room := 0; room < cfg.Rooms; room++ {
		senders := r.members[room*cfg.Members : room*cfg.Members+cfg.Senders]
		// Rooms tick at staggered phases so their bursts do not coincide.
		phase := period * time.Duration(room) / time.Duration(cfg.Rooms)
		pacers.Add(1)
		go func() {
			defer pacers.Done()
			stats[room] = r.pace(ctx, senders, start.Add(phase), winEnd, period)
		}()
	}

	res := &Result{Connections: len(r.members), Window: cfg.Duration}
	if err := sleepUntil(ctx, winStart); err == nil {
		cpu0, cerr := selfCPU()
		if cfg.OnWindow != nil {
			cfg.OnWindow(true)
		}
		if err := sleepUntil(ctx, winEnd); err == nil {
			cpu1, cerr1 := selfCPU()
			if cfg.OnWindow != nil {
				cfg.OnWindow(false)
			}
			if err := errors.Join(cerr, cerr1); err != nil {
				r.fail(err)
			}
			res.ClientCPU = cpu1 - cpu0
		}
	}
	pacers.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("load run: %w", err)
	}
	for _, s := range stats {
		res.Late += s.late
		res.Skipped += s.skipped
	}
	for _, m := range r.members {
		res.Sent += m.sent
		res.SentInWindow += m.inWin
		res.Expected += m.sent * uint64(cfg.Members-1)
	}
	res.Drained = r.drain(ctx, res.Expected)
	r.shutdown()
	res.Latency = newHist()
	for _, m := range r.members {
		res.Counts.Add(m.tr.Counts)
		res.Latency.Merge(m.tr.Hist)
	}
	unique := res.Counts.Received - res.Counts.Dups
	if unique < res.Expected {
		res.Missing = res.Expected - unique
	}
	res.Errors = r.errs.Load()
	if r.first != nil {
		res.FirstError = r.first.Error()
	}
	return res, nil
}

// drain waits until the receivers hold every owed delivery or cfg.Drain
// passes, and returns how long it waited.
func (r *runner) drain(ctx context.Context, expected uint64) time.Duration {
	t0 := time.Now()
	deadline := t0.Add(r.cfg.Drain)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var got uint64
		for _, m := range r.members {
			got += m.tr.Progress()
		}
		if got >= expected {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(t0)
}

// shutdown closes every connection and waits for the readers; it is safe to
// call twice.
func (r *runner) shutdown() {
	if r.closing.Swap(true) {
		return
	}
	for _, m := range r.members {
		_ = m.conn.Close() // closing is how readers are told to stop
	}
	r.readers.Wait()
}

type paceStats struct{ late, skipped uint64 }

// slot is one wake-up of a room's pacer: the senders [lo, hi) send at at.
type slot struct {
	at     time.Time
	lo, hi int
}

// slotAt is the s-th of slots wake-ups in tick k: ticks are start + k·period
// and a tick's slots split both the period and the senders evenly. One slot
// per tick sends the whole room in a burst; one per sender spreads the
// room's sends over the period, as independent clients would.
func slotAt(start time.Time, period time.Duration, k, s, slots, senders int) slot {
	return slot{
		at: start.Add(time.Duration(k)*period + period*time.Duration(s)/time.Duration(slots)),
		lo: s * senders / slots,
		hi: (s + 1) * senders / slots,
	}
}

// pace sends for one room's senders: one goroutine, one timer reset to
// absolute slot times (no drift, no timer per member). A slot reached more
// than a period late is skipped and counted.
func (r *runner) pace(ctx context.Context, senders []*member, start, end time.Time, period time.Duration) paceStats {
	var st paceStats
	payload := make([]byte, r.cfg.PayloadSize)
	for i := HeaderLen; i < len(payload); i++ {
		payload[i] = byte(i)
	}
	slots := 1
	if r.cfg.Spread {
		slots = len(senders)
	}
	winStart, winEnd := r.win.start.Load(), r.win.end.Load()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for k := 0; ; k++ {
		for s := 0; s < slots; s++ {
			sl := slotAt(start, period, k, s, slots, len(senders))
			if !sl.at.Before(end) {
				return st
			}
			if d := time.Until(sl.at); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return st
				case <-timer.C:
				}
			}
			if time.Since(sl.at) > period {
				st.skipped += uint64(sl.hi - sl.lo)
				continue
			}
			for _, m := range senders[sl.lo:sl.hi] {
				now := time.Now()
				if now.Sub(sl.at) > r.cfg.LateAfter {
					st.late++
				}
				ns := now.UnixNano()
				EncodePayload(payload, Stamp{SentNs: ns, Room: uint32(m.room), Member: uint32(m.idx), Seq: m.sent + 1})
				m.wbuf = m.wbuf[:0]
				if m.token != 0 {
					m.wbuf = binary.BigEndian.AppendUint64(m.wbuf, m.token)
				}
				m.wbuf = r.cfg.Proto.AppendPublish(m.wbuf, m.room, ns, payload)
				if _, err := m.conn.Write(m.wbuf); err != nil {
					if !r.closing.Load() {
						r.fail(fmt.Errorf("send (member %d of room %d): %w", m.idx, m.room, err))
					}
					return st
				}
				m.sent++
				if ns >= winStart && ns < winEnd {
					m.inWin++
				}
			}
		}
	}
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// selfCPU is this process's user+system CPU time (getrusage: microsecond
// resolution, unlike /proc's 10 ms ticks).
func selfCPU() (time.Duration, error) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
