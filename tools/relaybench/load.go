package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// member is one benchmark client: it sends on a ticker and records the
// latency of every deliver it gets while the measurement is on.
type member struct {
	c         *client.Conn
	hist      *hdrhistogram.Histogram // microseconds
	delivered int64
	sent      int64
}

func dialAll(ctx context.Context, addr string, rooms, members int) ([]*member, error) {
	var all []*member
	for r := 0; r < rooms; r++ {
		for m := 0; m < members; m++ {
			c, err := client.Dial(ctx, addr)
			if err != nil {
				closeAll(all)
				return nil, err
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := c.Join(fmt.Sprintf("room-%d", r), fmt.Sprintf("user-%d-%d", r, m), nil); err != nil {
				c.Close()
				closeAll(all)
				return nil, fmt.Errorf("join: %w", err)
			}
			c.SetDeadline(time.Time{})
			all = append(all, &member{c: c, hist: hdrhistogram.New(1, 60_000_000, 3)})
		}
	}
	return all, nil
}

func closeAll(all []*member) {
	for _, m := range all {
		m.c.Close()
	}
}

func fanout(ctx context.Context, o options, r *relayProc, w io.Writer) error {
	all, err := dialAll(ctx, r.tcp, o.rooms, o.members)
	if err != nil {
		return err
	}
	n := len(all)
	fmt.Fprintf(w, "fanout: %d clients in %d rooms of %d, %d-byte othercast at %.0f Hz, %v (+%v warm-up)\n",
		n, o.rooms, o.members, o.payload, o.rate, o.duration, o.warmup)
	fmt.Fprintf(w, "offered: %.0f deliveries/s\n", float64(n)*o.rate*float64(o.members-1))

	var measuring atomic.Bool
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	period := time.Duration(float64(time.Second) / o.rate)
	for i, m := range all {
		wg.Add(2)
		go func() { defer wg.Done(); m.receive(&measuring) }()
		go func() {
			defer wg.Done()
			// Spread the clients' send times over one period, or (--burst)
			// the rooms' only: a room's members then send in the same tick.
			phase := time.Duration(i) * period / time.Duration(n)
			if o.burst {
				phase = time.Duration(i/o.members) * period / time.Duration(o.rooms)
			}
			m.send(ctx, period, phase, o.payload, &measuring)
		}()
	}
	select {
	case <-time.After(o.warmup):
	case <-ctx.Done():
	}
	cpu0, err := r.cpuSeconds()
	if err != nil {
		return err
	}
	w0, err := r.writeStats()
	if err != nil {
		return err
	}
	start := time.Now()
	measuring.Store(true)
	select {
	case <-time.After(o.duration):
	case <-ctx.Done():
	}
	measuring.Store(false)
	elapsed := time.Since(start)
	cpu1, err := r.cpuSeconds()
	if err != nil {
		return err
	}
	w1, err := r.writeStats()
	if err != nil {
		return err
	}
	rss, err := r.rssBytes()
	if err != nil {
		return err
	}
	cancel()
	time.Sleep(200 * time.Millisecond) // in-flight delivers of the window land
	closeAll(all)
	wg.Wait()

	total := hdrhistogram.New(1, 60_000_000, 3)
	var delivered, sent int64
	for _, m := range all {
		total.Merge(m.hist)
		delivered += m.delivered
		sent += m.sent
	}
	slow, err := r.metric("relay_slow_consumer_disconnects_total")
	if err != nil {
		return err
	}
	expected := sent * int64(o.members-1)
	cpu := cpu1 - cpu0
	fmt.Fprintf(w, "sent: %d sends (%.0f/s)\n", sent, float64(sent)/elapsed.Seconds())
	fmt.Fprintf(w, "delivered: %d of %d expected (%.2f%%), %.0f deliveries/s\n",
		delivered, expected, 100*float64(delivered)/float64(max(expected, 1)), float64(delivered)/elapsed.Seconds())
	fmt.Fprintf(w, "latency send->deliver: p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms\n",
		ms(total.ValueAtQuantile(50)), ms(total.ValueAtQuantile(99)), ms(total.ValueAtQuantile(99.9)), ms(total.Max()))
	fmt.Fprintf(w, "relay CPU: %.2f s over %.1f s = %.2f cores; %.3f CPU s per million deliveries\n",
		cpu, elapsed.Seconds(), cpu/elapsed.Seconds(), cpu/(float64(delivered)/1e6))
	writes, queued := w1.writes-w0.writes, w1.delivered-w0.delivered
	fmt.Fprintf(w, "relay writes: %.0f/s, %.1f deliveries per write\n", writes/elapsed.Seconds(), queued/max(writes, 1))
	fmt.Fprintf(w, "relay RSS: %.1f MiB\n", float64(rss)/(1<<20))
	fmt.Fprintf(w, "slow-consumer disconnects: %.0f\n", slow)
	return nil
}

func ms(us int64) float64 { return float64(us) / 1000 }

// send casts one othercast per period from offset on, counting the sends
// made while measuring. Ticks that could not be sent on time are skipped
// by the ticker (it drops ticks), so a stalled client sends less rather
// than bursting.
func (m *member) send(ctx context.Context, period, offset time.Duration, size int, measuring *atomic.Bool) {
	select {
	case <-time.After(offset):
	case <-ctx.Done():
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	msg := wire.Send{Mode: wire.Othercast, HasTrace: true, Payload: make([]byte, size)}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		on := measuring.Load()
		msg.Trace = time.Now().UnixNano()
		if err := m.c.Send(msg); err != nil {
			return
		}
		if on {
			m.sent++
		}
	}
}

// receive counts delivers whose send happened during the measurement and
// records their latency.
func (m *member) receive(measuring *atomic.Bool) {
	for {
		f, err := m.c.Recv()
		if err != nil {
			return
		}
		if f.Type != wire.TypeDeliver || !f.HasTrace {
			continue
		}
		lat := time.Now().UnixNano() - f.Trace
		if measuring.Load() {
			m.delivered++
			m.hist.RecordValue(max(lat/1000, 1))
		}
	}
}

// idle opens o.idleConns joined, silent connections and reports the relay's
// RSS per connection.
func idle(ctx context.Context, o options, r *relayProc, w io.Writer) error {
	time.Sleep(500 * time.Millisecond)
	base, err := r.rssBytes()
	if err != nil {
		return err
	}
	const perRoom = 32
	rooms := (o.idleConns + perRoom - 1) / perRoom
	var conns []*client.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < o.idleConns; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c, err := client.Dial(ctx, r.tcp)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if err := c.SendJoin(fmt.Sprintf("idle-%d", i%rooms), fmt.Sprintf("u%d", i), nil); err != nil {
			return err
		}
	}
	// Read each joined (and the notices queued before it) so nothing is
	// pending in the relay; the notices still arriving are small.
	for _, c := range conns {
		if _, err := c.RecvType(wire.TypeJoined); err != nil {
			return fmt.Errorf("join: %w", err)
		}
	}
	time.Sleep(2 * time.Second)
	after, err := r.rssBytes()
	if err != nil {
		return err
	}
	n, _ := r.metric(`relay_connections{transport="tcp"}`)
	per := float64(after-base) / float64(o.idleConns)
	fmt.Fprintf(w, "idle: %d joined silent TCP connections (relay reports %.0f) in %d rooms\n", o.idleConns, n, rooms)
	fmt.Fprintf(w, "relay RSS: %.1f MiB before, %.1f MiB after: %.1f KiB per connection\n",
		float64(base)/(1<<20), float64(after)/(1<<20), per/1024)
	return nil
}
