package relay

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	rclient "github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// burstRooms is rooms × members connected, joined clients whose readers
// count delivers; tick makes every member send one othercast, a room's
// members one after another as a room's clients do in a 72 Hz tick, and
// waits until every delivery arrived.
type burstRooms struct {
	s        *Server
	rooms    [][]*rclient.Conn
	received atomic.Int64
	want     atomic.Int64
	done     chan struct{}
	wg       sync.WaitGroup
	msg      wire.Send
}

func newBurstRooms(b *testing.B, cfg Config, rooms, members int) *burstRooms {
	s, stop := startServer(b, cfg)
	b.Cleanup(stop)
	br := &burstRooms{s: s, done: make(chan struct{}, 1), msg: wire.Send{Mode: wire.Othercast, Payload: make([]byte, 200)}}
	ctx := context.Background()
	for r := 0; r < rooms; r++ {
		var conns []*rclient.Conn
		for m := 0; m < members; m++ {
			c, err := rclient.Dial(ctx, s.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Join(fmt.Sprintf("room-%d", r), fmt.Sprintf("u%d", m), nil); err != nil {
				b.Fatal(err)
			}
			c.SetDeadline(time.Time{})
			conns = append(conns, c)
		}
		br.rooms = append(br.rooms, conns)
	}
	for _, conns := range br.rooms {
		for _, c := range conns {
			br.wg.Add(1)
			go br.read(c)
		}
	}
	b.Cleanup(func() {
		for _, conns := range br.rooms {
			for _, c := range conns {
				c.Close()
			}
		}
		br.wg.Wait()
	})
	return br
}

// read counts c's delivers until c closes (member-joined notices of later
// joiners are skipped).
func (br *burstRooms) read(c *rclient.Conn) {
	defer br.wg.Done()
	for {
		f, err := c.Recv()
		if err != nil {
			return
		}
		if f.Type == wire.TypeDeliver && br.received.Add(1) == br.want.Load() {
			br.done <- struct{}{}
		}
	}
}

// tick sends one message from every member, room after room concurrently
// (one goroutine per room), and waits for all deliveries.
func (br *burstRooms) tick(b *testing.B) {
	per := int64(0)
	for _, conns := range br.rooms {
		per += int64(len(conns) * (len(conns) - 1))
	}
	br.want.Add(per)
	var wg sync.WaitGroup
	for _, conns := range br.rooms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, c := range conns {
				if err := c.Send(br.msg); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-br.done:
	case <-time.After(10 * time.Second):
		b.Fatalf("received %d of %d deliveries", br.received.Load(), br.want.Load())
	}
}

// BenchmarkBurstTCP is the bench's N:N workload without pacing: every
// member of every room sends once per op (a tick), over loopback TCP to
// the in-process relay, and the op ends when all rooms × members ×
// (members-1) deliveries have arrived. writes/delivery is the relay's
// writev count per delivery (relay_writes_total): how well its writers
// coalesce a burst. allocs/op includes the test's own clients.
func BenchmarkBurstTCP(b *testing.B) {
	for _, bc := range []struct {
		rooms, members int
		coalesce       time.Duration
	}{
		{8, 32, 0}, {8, 32, 200 * time.Microsecond}, {8, 32, time.Millisecond},
	} {
		b.Run(fmt.Sprintf("%dx%d/coalesce=%v", bc.rooms, bc.members, bc.coalesce), func(b *testing.B) {
			br := newBurstRooms(b, Config{WriteCoalesce: bc.coalesce}, bc.rooms, bc.members)
			br.tick(b) // warm up pools and buffers
			w0 := testutil.ToFloat64(br.s.m.Writes)
			d0 := br.received.Load()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				br.tick(b)
			}
			b.StopTimer()
			writes := testutil.ToFloat64(br.s.m.Writes) - w0
			deliveries := float64(br.received.Load() - d0)
			b.ReportMetric(deliveries/max(writes, 1), "deliveries/write")
			b.ReportMetric(deliveries/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}
