// Package barrier starts the shards of a fleet together. Every shard
// connects to one coordinator (shard 0, or the program that started the
// shards) and says it is ready; once all n are, the coordinator answers
// each with the same start instant, both on its own clock and as a delay
// from the moment it sends the answer. A shard whose clock agrees with the
// coordinator's to within MaxClockOffset (the same host, or hosts kept in
// step by NTP) takes the instant itself, so an answer that reaches it late
// (its process not scheduled for a while on a busy host) does not move its
// start; otherwise it adds the delay to its own clock when the answer
// arrives (then the error is the one-way delay, well under a millisecond
// on a LAN or a cluster network). A shard that connects after the start
// (restarted, scheduled late) learns the instant in the past: it knows how
// late it is and says so.
//
// A fleet with levels (a capacity search) meets at the coordinator again
// at each level (levels.go): every shard waits there until the
// coordinator, once all are in, answers them all "go" at one instant or
// "stop", so no shard runs ahead of the decision.
//
// The protocol is lines of text over TCP, one connection a meeting:
//
//	shard → coordinator: ready <index> <count>
//	coordinator → shard: start <delay ns> <start, coordinator's Unix ns>
//	                     error <message>
//	shard → coordinator: level <attempts> <index> <count>
//	coordinator → shard: go <delay ns> <resume, coordinator's Unix ns>
//	                     stop
//	                     error <message>
//
// A controller (control.go: the driver of a fleet whose coordinator runs
// elsewhere, e.g. in shard 0's pod on Kubernetes) holds one connection
// open and takes the decisions a local driver takes through Levels,
// Resume and Halt; a coordinator that holds its start (HoldStart) starts
// only once the controller says so.
//
//	controller → coordinator: control <count>
//	                          start | resume <attempts> | halt
//	coordinator → controller: started <delay ns> <start, coordinator's Unix ns>
//	                          level <attempts>
//	                          error <message>
package barrier

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Lead is the default delay between the last shard's ready and the start:
// room for the answers to reach every shard and for each to wake up.
const Lead = 500 * time.Millisecond

// MaxClockOffset is the largest apparent difference between a shard's
// clock and the coordinator's (one-way delay included) at which the shard
// trusts the coordinator's clock.
const MaxClockOffset = 500 * time.Millisecond

// ErrBarrier marks a barrier that could not complete.
var ErrBarrier = errors.New("start barrier")

// Coordinator waits for count shards and gives them one start instant.
type Coordinator struct {
	count int
	lead  time.Duration

	mu      sync.Mutex
	waiting map[int]net.Conn // ready shards, by index, until the start
	start   time.Time        // zero until all were ready
	started chan struct{}    // closed at the start
	// atLevel holds the shards waiting at a level (by attempts, then
	// index) until Resume or Halt; halted answers every later one "stop".
	atLevel map[int]map[int]net.Conn
	halted  bool
	levels  chan int // a level every shard waits at, to the one deciding
	// hold: the start waits for a controller's "start" (released) as
	// well as for every shard; controlled: a controller is connected.
	hold, released, controlled bool
}

// NewCoordinator is a coordinator for count shards that starts them lead
// after the last one is ready (Lead when lead is 0).
func NewCoordinator(count int, lead time.Duration) *Coordinator {
	if lead <= 0 {
		lead = Lead
	}
	return &Coordinator{count: count, lead: lead, waiting: map[int]net.Conn{}, started: make(chan struct{}),
		atLevel: map[int]map[int]net.Conn{}, levels: make(chan int)}
}

// Started is closed once every shard was ready and the start was sent.
func (c *Coordinator) Started() <-chan struct{} { return c.started }

// Start is the start instant (zero before Started is closed).
func (c *Coordinator) Start() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start
}

// Serve accepts shards on ln until ctx ends; it closes ln. Shards that
// arrive after the start are answered at once (with a negative delay).
func (c *Coordinator) Serve(ctx context.Context, ln net.Listener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer c.closeWaiting()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%w: accept: %v", ErrBarrier, err)
		}
		wg.Go(func() { c.handle(ctx, conn) })
	}
}

func (c *Coordinator) closeWaiting() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.waiting {
		conn.Close()
	}
	c.waiting = map[int]net.Conn{}
	for _, m := range c.atLevel {
		for _, conn := range m {
			conn.Close()
		}
	}
	c.atLevel = map[int]map[int]net.Conn{}
}

// handle reads one shard's ready line and registers it; the answer is
// written by whoever completes the barrier.
func (c *Coordinator) handle(ctx context.Context, conn net.Conn) {
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		conn.Close()
		return
	}
	conn.SetReadDeadline(time.Time{})
	if strings.HasPrefix(line, "level ") {
		c.handleLevel(ctx, conn, line)
		return
	}
	if strings.HasPrefix(line, "control ") {
		c.handleControl(ctx, conn, r, line)
		return
	}
	index, count, err := parseReady(line)
	if c.refused(conn, index, count, err) {
		return
	}
	c.mu.Lock()
	if !c.start.IsZero() {
		start := c.start
		c.mu.Unlock()
		reply(conn, "start %d %d", time.Until(start).Nanoseconds(), start.UnixNano())
		return
	}
	if old := c.waiting[index]; old != nil {
		old.Close() // a restarted shard: its new connection counts
	}
	c.waiting[index] = conn
	if ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.startLocked()
}

// startLocked starts the fleet when every shard is ready (and, with
// HoldStart, the controller said start); it unlocks c.mu.
func (c *Coordinator) startLocked() {
	if len(c.waiting) < c.count || (c.hold && !c.released) || !c.start.IsZero() {
		c.mu.Unlock()
		return
	}
	c.start = time.Now().Add(c.lead)
	waiting := c.waiting
	c.waiting = map[int]net.Conn{}
	start := c.start
	c.mu.Unlock()
	for _, w := range waiting {
		reply(w, "start %d %d", time.Until(start).Nanoseconds(), start.UnixNano())
	}
	close(c.started)
}

// refused answers a line that did not parse (err), or a shard of
// another fleet, with an error; true when it did.
func (c *Coordinator) refused(conn net.Conn, index, count int, err error) bool {
	switch {
	case err != nil:
		reply(conn, "error %v", err)
	case count != c.count || index < 0 || index >= count:
		reply(conn, "error shard %d/%d: the coordinator waits for %d shards", index, count, c.count)
	default:
		return false
	}
	return true
}

// reply writes one line and closes the connection.
func reply(conn net.Conn, format string, args ...any) {
	conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, format+"\n", args...)
	conn.Close()
}

// Wait tells the coordinator at addr that shard index of count is ready
// and returns the start instant on this host's clock. It retries the
// connection (the coordinator may not listen yet) until ctx ends.
func Wait(ctx context.Context, addr string, index, count int) (time.Time, error) {
	conn, err := dialRetry(ctx, addr)
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := fmt.Fprintf(conn, "ready %d %d\n", index, count); err != nil {
		return time.Time{}, fmt.Errorf("%w: %s: %v", ErrBarrier, addr, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	got := time.Now()
	if err != nil {
		if ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("%w: no start from %s: %v", ErrBarrier, addr, context.Cause(ctx))
		}
		return time.Time{}, fmt.Errorf("%w: no start from %s: %v", ErrBarrier, addr, err)
	}
	delay, unix, err := parseStart(line)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: coordinator %s: %v", ErrBarrier, addr, err)
	}
	return startInstant(got, delay, unix), nil
}

// parseReady reads a shard's "ready <index> <count>" line.
func parseReady(line string) (index, count int, err error) {
	line = strings.TrimSpace(line)
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "ready" {
		return 0, 0, fmt.Errorf("bad ready line %q", line)
	}
	if index, err = strconv.Atoi(f[1]); err != nil {
		return 0, 0, fmt.Errorf("bad ready line %q", line)
	}
	if count, err = strconv.Atoi(f[2]); err != nil {
		return 0, 0, fmt.Errorf("bad ready line %q", line)
	}
	return index, count, nil
}

// parseStart reads the coordinator's answer: "start <delay ns> <Unix ns>",
// or "error <message>".
func parseStart(line string) (delay, unix int64, err error) { return parseInstant(line, "start") }

// parseInstant reads "<word> <delay ns> <Unix ns>", or "error <message>".
func parseInstant(line, word string) (delay, unix int64, err error) {
	line = strings.TrimSpace(line)
	if msg, ok := strings.CutPrefix(line, "error "); ok {
		return 0, 0, errors.New(msg)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != word {
		return 0, 0, fmt.Errorf("sent %q", line)
	}
	if delay, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("sent %q", line)
	}
	if unix, err = strconv.ParseInt(f[2], 10, 64); err != nil {
		return 0, 0, fmt.Errorf("sent %q", line)
	}
	return delay, unix, nil
}

// startInstant is the start on this host's clock from an answer received
// at got: the coordinator's instant when the clocks agree, else the delay
// from receipt.
func startInstant(got time.Time, delay, unix int64) time.Time {
	sent := unix - delay // the coordinator's clock when it answered
	if offset := time.Duration(got.UnixNano() - sent); offset.Abs() <= MaxClockOffset {
		return time.Unix(0, unix)
	}
	return got.Add(time.Duration(delay))
}

func dialRetry(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	backoff := 50 * time.Millisecond
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: cannot reach the coordinator %s: %v", ErrBarrier, addr, err)
		case <-t.C:
		}
		backoff = min(2*backoff, time.Second)
	}
}
