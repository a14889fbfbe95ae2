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

// HoldStart makes the coordinator start the fleet only once a controller
// said "start" (Remote.Begin) as well as every shard being ready: the
// driver of a remote fleet takes its baseline first. Call it before Serve.
func (c *Coordinator) HoldStart() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

// handleControl serves one controller until it hangs up or ctx ends: it
// sends the start and every level, and takes start, resume and halt. A
// controller that goes away halts the levels: no shard waits for a word
// that cannot come.
func (c *Coordinator) handleControl(ctx context.Context, conn net.Conn, r *bufio.Reader, line string) {
	count, err := parseControl(line)
	if c.refused(conn, 0, count, err) {
		return
	}
	c.mu.Lock()
	if c.controlled {
		c.mu.Unlock()
		reply(conn, "error another controller is connected")
		return
	}
	c.controlled = true
	c.mu.Unlock()
	// The controller learns a coordinator really answers (a port-forward
	// accepts before its far end does).
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintln(conn, "controlled")
	cctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(cctx, func() { conn.Close() })
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		stop()
		c.Halt()
		c.mu.Lock()
		c.controlled = false
		c.mu.Unlock()
	}()
	wg.Go(func() {
		defer cancel()
		c.sendEvents(cctx, conn)
	})
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		switch f := strings.Fields(line); {
		case len(f) == 1 && f[0] == "start":
			c.mu.Lock()
			c.released = true
			c.startLocked()
		case len(f) == 1 && f[0] == "halt":
			c.Halt()
		case len(f) == 2 && f[0] == "resume":
			a, err := strconv.Atoi(f[1])
			if err != nil || a < 0 {
				return
			}
			c.Resume(a)
		default:
			return // not a controller: hang up (and halt)
		}
	}
}

// sendEvents writes the start and then each level to the controller.
func (c *Coordinator) sendEvents(ctx context.Context, conn net.Conn) {
	write := func(format string, a ...any) bool {
		conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := fmt.Fprintf(conn, format+"\n", a...)
		return err == nil
	}
	select {
	case <-c.started:
		start := c.Start()
		if !write("started %d %d", time.Until(start).Nanoseconds(), start.UnixNano()) {
			return
		}
	case <-ctx.Done():
		return
	}
	for {
		select {
		case a := <-c.levels:
			if !write("level %d", a) {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// parseControl reads a controller's "control <count>" line.
func parseControl(line string) (int, error) {
	f := strings.Fields(line)
	if len(f) != 2 || f[0] != "control" {
		return 0, fmt.Errorf("bad control line %q", strings.TrimSpace(line))
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return 0, fmt.Errorf("bad control line %q", strings.TrimSpace(line))
	}
	return n, nil
}

// Remote is a controller's end of a coordinator elsewhere: what a
// Coordinator in this process offers its driver (Started, Start, Levels,
// Resume, Halt), over one connection. Its reader goroutine runs until
// Close or the connection ends (Done; Err says why).
type Remote struct {
	conn    net.Conn
	wmu     sync.Mutex // writes
	started chan struct{}
	start   time.Time // set before started is closed
	levels  chan int  // closed when the connection ends
	done    chan struct{}
	err     error // set before done is closed
	wg      sync.WaitGroup
	closeMu sync.Once
}

// Dial connects to the coordinator of count shards at addr as its
// controller, retrying until ctx ends (the coordinator may not listen
// yet).
func Dial(ctx context.Context, addr string, count int) (*Remote, error) {
	for {
		conn, err := dialRetry(ctx, addr)
		if err != nil {
			return nil, err
		}
		br, err := greet(conn, count)
		if err == nil {
			r := &Remote{conn: conn, started: make(chan struct{}), levels: make(chan int), done: make(chan struct{})}
			r.wg.Go(func() { r.read(br) })
			return r, nil
		}
		conn.Close()
		var refused refusedError
		if errors.As(err, &refused) {
			return nil, fmt.Errorf("%w: %s: %v", ErrBarrier, addr, err)
		}
		// Nothing answered behind the address yet (a port-forward to a
		// pod whose coordinator does not listen yet): again.
		if err := sleepCtx(ctx, 200*time.Millisecond); err != nil {
			return nil, fmt.Errorf("%w: no coordinator answered at %s: %v", ErrBarrier, addr, err)
		}
	}
}

// refusedError is a coordinator's refusal of a controller.
type refusedError string

func (e refusedError) Error() string { return string(e) }

// greet sends the control line and reads the coordinator's "controlled".
func greet(conn net.Conn, count int) (*bufio.Reader, error) {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer conn.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(conn, "control %d\n", count); err != nil {
		return nil, err
	}
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if msg, ok := strings.CutPrefix(strings.TrimSpace(line), "error "); ok {
		return nil, refusedError(msg)
	}
	if strings.TrimSpace(line) != "controlled" {
		return nil, refusedError(fmt.Sprintf("sent %q", strings.TrimSpace(line)))
	}
	return br, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

func (r *Remote) read(br *bufio.Reader) {
	defer close(r.done)
	defer close(r.levels)
	for {
		line, err := br.ReadString('\n')
		got := time.Now()
		if err != nil {
			r.err = fmt.Errorf("%w: the coordinator hung up: %v", ErrBarrier, err)
			return
		}
		if msg, ok := strings.CutPrefix(strings.TrimSpace(line), "error "); ok {
			r.err = fmt.Errorf("%w: the coordinator: %s", ErrBarrier, msg)
			return
		}
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "started":
			delay, unix, err := parseInstant(line, "started")
			if err != nil {
				r.err = fmt.Errorf("%w: the coordinator: %v", ErrBarrier, err)
				return
			}
			select {
			case <-r.started:
			default:
				r.start = startInstant(got, delay, unix)
				close(r.started)
			}
		case len(f) == 2 && f[0] == "level":
			a, err := strconv.Atoi(f[1])
			if err != nil {
				r.err = fmt.Errorf("%w: the coordinator sent %q", ErrBarrier, strings.TrimSpace(line))
				return
			}
			r.levels <- a // the reader of Levels reads until it is closed
		default:
			r.err = fmt.Errorf("%w: the coordinator sent %q", ErrBarrier, strings.TrimSpace(line))
			return
		}
	}
}

func (r *Remote) send(line string) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	r.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := fmt.Fprintln(r.conn, line)
	return err
}

// Begin tells a coordinator that holds its start (HoldStart) to start
// the fleet once every shard is ready.
func (r *Remote) Begin() error { return r.send("start") }

// Started is closed once the coordinator started the fleet.
func (r *Remote) Started() <-chan struct{} { return r.started }

// Start is the start instant on this host's clock (zero before Started).
func (r *Remote) Start() time.Time {
	select {
	case <-r.started:
		return r.start
	default:
		return time.Time{}
	}
}

// Levels delivers each level every shard waits at; it is closed when the
// connection ends. Read it until then (or Close).
func (r *Remote) Levels() <-chan int { return r.levels }

// Resume lets the shards waiting at level attempts go on.
func (r *Remote) Resume(attempts int) { r.send("resume " + strconv.Itoa(attempts)) }

// Halt stops the shards at their levels.
func (r *Remote) Halt() { r.send("halt") }

// Done is closed when the connection ended; Err says why.
func (r *Remote) Done() <-chan struct{} { return r.done }

// Err is why the connection ended (nil before Done, or after Close).
func (r *Remote) Err() error {
	select {
	case <-r.done:
		return r.err
	default:
		return nil
	}
}

// Close hangs up (the coordinator halts its levels) and waits for the
// reader, draining levels no one reads any more.
func (r *Remote) Close() {
	r.closeMu.Do(func() {
		r.conn.Close()
		go func() {
			for range r.levels {
			}
		}()
		r.wg.Wait()
	})
}
