package load

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Held is a set of joined connections that send and read nothing more: the
// idle-connection memory test.
type Held struct {
	conns []net.Conn
}

// Hold dials n connections to addr, joins them to rooms of roomSize
// members, parallel at a time, and returns once every join is confirmed.
// Each handshake reads with a small buffer on the dialling goroutine, so
// the client holds no reader goroutine per connection afterwards.
func Hold(ctx context.Context, p Protocol, addr string, n, roomSize, parallel int) (*Held, error) {
	if n < 1 || roomSize < 1 || parallel < 1 {
		return nil, fmt.Errorf("hold %d connections in rooms of %d, %d at a time: all must be ≥ 1", n, roomSize, parallel)
	}
	h := &Held{conns: make([]net.Conn, n)}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	jobs := make(chan int)
	errs := make(chan error, parallel)
	var wg sync.WaitGroup
	for w := 0; w < parallel; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				c, err := handshake(ctx, p, addr, i/roomSize, i%roomSize)
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					cancel()
					return
				}
				h.conns[i] = c
			}
		}()
	}
	func() {
		defer close(jobs)
		for i := 0; i < n; i++ {
			select {
			case jobs <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	var err error
	for e := range errs {
		err = errors.Join(err, e)
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("hold: %w", err), h.Close())
	}
	return h, nil
}

// handshake dials one connection and waits for its join to be confirmed.
func handshake(ctx context.Context, p Protocol, addr string, room, idx int) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	fail := func(err error) (net.Conn, error) { return nil, errors.Join(err, c.Close()) }
	if dl, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(dl); err != nil {
			return fail(fmt.Errorf("deadline: %w", err))
		}
	}
	if _, err := c.Write(p.AppendHello(nil, room, idx)); err != nil {
		return fail(fmt.Errorf("hello: %w", err))
	}
	buf := make([]byte, 16<<10)
	have := 0
	var ev Events
	for !ev.Ready {
		n, err := c.Read(buf[have:])
		have += n
		used, perr := p.Scan(buf[:have], &ev, func([]byte) {})
		if perr != nil {
			return fail(perr)
		}
		have = copy(buf, buf[used:have])
		if err != nil && !ev.Ready {
			return fail(fmt.Errorf("waiting for the join: %w", err))
		}
		if have == len(buf) {
			return fail(fmt.Errorf("join reply over %d bytes", len(buf)))
		}
	}
	if err := c.SetDeadline(time.Time{}); err != nil {
		return fail(fmt.Errorf("deadline: %w", err))
	}
	return c, nil
}

// Len is how many connections are held.
func (h *Held) Len() int { return len(h.conns) }

// Close closes every connection.
func (h *Held) Close() error {
	var err error
	for _, c := range h.conns {
		if c != nil {
			err = errors.Join(err, c.Close())
		}
	}
	return err
}
