package barrier

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// LevelLead is the time between the coordinator's "go" at a level and the
// instant every shard goes on: room for the answers to reach them all.
const LevelLead = 200 * time.Millisecond

// Levels delivers, once, each level (its attempt count) at which every
// shard waits; they wait until Resume or Halt. Read it for as long as the
// shards may still reach a level.
func (c *Coordinator) Levels() <-chan int { return c.levels }

// Resume answers the shards waiting at level attempts: go on, all at one
// instant LevelLead from now.
func (c *Coordinator) Resume(attempts int) {
	c.mu.Lock()
	waiting := c.atLevel[attempts]
	delete(c.atLevel, attempts)
	at := time.Now().Add(LevelLead)
	c.mu.Unlock()
	for _, w := range waiting {
		reply(w, "go %d %d", time.Until(at).Nanoseconds(), at.UnixNano())
	}
}

// Halt answers "stop" to every shard waiting at a level, and to every one
// that comes to a level later: the run ends there.
func (c *Coordinator) Halt() {
	c.mu.Lock()
	c.halted = true
	var waiting []net.Conn
	for _, m := range c.atLevel {
		for _, conn := range m {
			waiting = append(waiting, conn)
		}
	}
	c.atLevel = map[int]map[int]net.Conn{}
	c.mu.Unlock()
	for _, w := range waiting {
		reply(w, "stop")
	}
}

// handleLevel registers a shard waiting at a level; the last one in hands
// the level to whoever reads Levels (or gives up when ctx ends).
func (c *Coordinator) handleLevel(ctx context.Context, conn net.Conn, line string) {
	attempts, index, count, err := parseLevel(line)
	if c.refused(conn, index, count, err) {
		return
	}
	c.mu.Lock()
	if c.halted {
		c.mu.Unlock()
		reply(conn, "stop")
		return
	}
	m := c.atLevel[attempts]
	if m == nil {
		m = map[int]net.Conn{}
		c.atLevel[attempts] = m
	}
	if old := m[index]; old != nil {
		old.Close() // the same shard again: its new connection counts
	}
	m[index] = conn
	complete := len(m) == c.count
	c.mu.Unlock()
	if complete {
		select {
		case c.levels <- attempts:
		case <-ctx.Done():
		}
	}
}

// AtLevel tells the coordinator at addr that shard index of count waits
// at level attempts, and returns its answer: go on (goOn, at resume: it
// returns then, on this host's clock, as every shard does), or stop. It
// retries the connection until ctx ends.
func AtLevel(ctx context.Context, addr string, attempts, index, count int) (resume time.Time, goOn bool, err error) {
	conn, err := dialRetry(ctx, addr)
	if err != nil {
		return time.Time{}, false, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := fmt.Fprintf(conn, "level %d %d %d\n", attempts, index, count); err != nil {
		return time.Time{}, false, fmt.Errorf("%w: %s: %v", ErrBarrier, addr, err)
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	got := time.Now()
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: no answer at level %d from %s: %v", ErrBarrier, attempts, addr, errOrCause(ctx, err))
	}
	if strings.TrimSpace(line) == "stop" {
		return time.Time{}, false, nil
	}
	delay, unix, err := parseInstant(line, "go")
	if err != nil {
		return time.Time{}, false, fmt.Errorf("%w: coordinator %s at level %d: %v", ErrBarrier, addr, attempts, err)
	}
	resume = startInstant(got, delay, unix)
	t := time.NewTimer(time.Until(resume))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return resume, false, nil
	case <-t.C:
		return resume, true, nil
	}
}

func errOrCause(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// parseLevel reads a shard's "level <attempts> <index> <count>" line.
func parseLevel(line string) (attempts, index, count int, err error) {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "level" {
		return 0, 0, 0, fmt.Errorf("bad level line %q", strings.TrimSpace(line))
	}
	var n [3]int
	for i, s := range f[1:] {
		if n[i], err = strconv.Atoi(s); err != nil || n[i] < 0 {
			return 0, 0, 0, fmt.Errorf("bad level line %q", strings.TrimSpace(line))
		}
	}
	return n[0], n[1], n[2], nil
}
