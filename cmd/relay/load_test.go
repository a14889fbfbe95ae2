package main

import (
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestSlowConsumer: a member with a tiny receive buffer that never reads is
// disconnected in bounded time once its queue passes --max-pending, while a
// healthy member gets every message.
func TestSlowConsumer(t *testing.T) {
	// The sender sends 25 MB/s on purpose: no rate limits.
	p := startRelay(t, "--max-pending", "262144", "--write-timeout", "1s", "--rate-messages", "-1", "--rate-bytes", "-1")
	sender := join(t, p.TCP, "r", "sender")
	healthy := join(t, p.TCP, "r", "healthy")

	raddr, err := net.ResolveTCPAddr("tcp", p.TCP)
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{Control: nil}
	nc, err := d.Dial("tcp", raddr.String())
	if err != nil {
		t.Fatal(err)
	}
	nc.(*net.TCPConn).SetReadBuffer(4096)
	slow := client.New(nc)
	t.Cleanup(func() { slow.Close() })
	slow.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := slow.Join("r", "slow", nil); err != nil {
		t.Fatal(err)
	}
	healthy.RecvType(wire.TypeMemberJoined) // slow's join notice

	const n = 6000
	payload := make([]byte, 1000)
	got := make(chan error, 1)
	var received atomic.Int64 // deliveries the healthy member has read so far
	go func() {
		for i := 0; i < n; i++ {
			f, err := healthy.RecvType(wire.TypeDeliver)
			if err != nil {
				got <- err
				return
			}
			if seq := binary.BigEndian.Uint32(f.Payload); seq != uint32(i) {
				got <- fmt.Errorf("message %d has seq %d", i, seq)
				return
			}
			received.Store(int64(i + 1))
		}
		got <- nil
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		// At most 100 frames (100 KB) ahead of the healthy member, under
		// its 256 KiB --max-pending: a reader goroutine descheduled for a
		// moment on a loaded host was cut as a slow consumer at load 20
		// ("healthy member: read from relay: EOF"). The slow member never
		// reads, so it still overflows.
		for deadline := time.Now().Add(10 * time.Second); int64(i)-received.Load() > 100; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the healthy member read %d of %d sent within 10 s", received.Load(), i)
			}
		}
		binary.BigEndian.PutUint32(payload, uint32(i))
		send(t, sender, wire.Send{Mode: wire.Othercast, Payload: payload})
		if i%50 == 49 {
			time.Sleep(2 * time.Millisecond) // ~25 MB/s: the healthy reader keeps up, even with -race
		}
	}
	if err := <-got; err != nil {
		t.Fatalf("healthy member: %v", err)
	}
	p.waitMetric(t, "relay_slow_consumer_disconnects_total", 1)
	p.waitMetric(t, `relay_disconnects_total{reason="slow_consumer"}`, 1)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	// The relay closed the slow member's socket: what it sends now is
	// answered with a reset, so a write soon fails. (Reading to EOF would
	// take long: the kernel drains its buffers into a 4 KiB window.)
	closed := false
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := slow.Heartbeat(1); err != nil {
			closed = true
			break
		}
	}
	if !closed {
		t.Error("slow consumer's connection still open")
	}
	if f, err := sender.RecvType(wire.TypeMemberLeft); err != nil || string(f.User) != "slow" {
		t.Errorf("sender did not see slow leave: %v", err)
	}
}

// TestFanOutExactness: rooms × members each send numbered othercasts; every
// member gets every other member's messages exactly once and in order.
func TestFanOutExactness(t *testing.T) {
	p := startRelay(t)
	const rooms, members, msgs = 4, 8, 150
	type member struct {
		c    *client.Conn
		user string
	}
	all := make([][]member, rooms)
	for r := range all {
		for m := 0; m < members; m++ {
			user := fmt.Sprintf("u%d", m)
			all[r] = append(all[r], member{join(t, p.TCP, fmt.Sprintf("room%d", r), user), user})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, rooms*members*2)
	for r := range all {
		for _, me := range all[r] {
			wg.Add(2)
			go func() { // receiver
				defer wg.Done()
				next := map[string]uint32{}
				for got := 0; got < (members-1)*msgs; got++ {
					f, err := me.c.RecvType(wire.TypeDeliver)
					if err != nil {
						errs <- fmt.Errorf("%s: %v", me.user, err)
						return
					}
					from := string(f.User)
					seq := binary.BigEndian.Uint32(f.Payload)
					if from == me.user || seq != next[from] || int(binary.BigEndian.Uint32(f.Payload[4:])) != r {
						errs <- fmt.Errorf("room%d %s: from %s seq %d room %d, want seq %d", r, me.user, from, seq, binary.BigEndian.Uint32(f.Payload[4:]), next[from])
						return
					}
					next[from]++
				}
			}()
			go func() { // sender
				defer wg.Done()
				payload := make([]byte, 64)
				for i := 0; i < msgs; i++ {
					binary.BigEndian.PutUint32(payload, uint32(i))
					binary.BigEndian.PutUint32(payload[4:], uint32(r))
					if err := me.c.Send(wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: time.Now().UnixNano(), Payload: payload}); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	want := float64(rooms * members * (members - 1) * msgs)
	p.waitMetric(t, "relay_delivered_messages_total", want)
	if got := p.metric(t, "relay_delivered_messages_total"); got != want {
		t.Errorf("relay counted %v deliveries, want %v", got, want)
	}
}

// TestGracefulShutdown: on SIGTERM every client gets shutting_down and the
// relay exits 0 within 5 s, even with a client that never reads.
func TestGracefulShutdown(t *testing.T) {
	p := startRelay(t)
	a := join(t, p.TCP, "r", "a")
	b := join(t, p.TCP, "r", "b")
	u := dialUDP(t, p.UDP)
	if _, err := u.Join("r", "u", nil); err != nil {
		t.Fatal(err)
	}
	idle := dial(t, p.TCP) // connected, never joins
	// Wait until the relay accepted it: a connection still in the listen
	// backlog is reset by the kernel when the listener closes.
	p.waitMetricEq(t, `relay_connections{transport="tcp"}`, 3)
	took := p.stop(t)
	if took > 5*time.Second {
		t.Errorf("shutdown took %v", took)
	}
	expectError(t, a, wire.ErrShuttingDown)
	expectError(t, b, wire.ErrShuttingDown)
	expectError(t, idle, wire.ErrShuttingDown)
	if f, err := u.RecvType(wire.TypeError); err != nil || f.Code != wire.ErrShuttingDown {
		t.Errorf("udp: %v", err)
	}
}

// TestMetricsExposed checks the documented metric families are served.
func TestMetricsExposed(t *testing.T) {
	p := startRelay(t)
	join(t, p.TCP, "r", "a")
	for _, series := range []string{
		`relay_connections{transport="tcp"}`, `relay_connections{transport="udp"}`, "relay_rooms",
		`relay_joins_total{result="ok"}`, "relay_received_messages_total", "relay_delivered_messages_total",
		"relay_received_bytes_total", "relay_sent_bytes_total", "relay_writes_total", "relay_slow_consumer_disconnects_total",
		`relay_host_cpu_seconds_total{mode="idle"}`, `relay_host_network_receive_bytes_total{device="lo"}`,
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if p.metric(t, series) < 0 {
			t.Errorf("%s not exposed", series)
		}
	}
	if v := p.metric(t, "relay_rooms"); v != 1 {
		t.Errorf("relay_rooms = %v, want 1", v)
	}
}

// TestSlowConsumerLearnsWhy: a member cut as a slow consumer that reads
// again within the write timeout gets the slow_consumer error frame before
// the close (so a fleet counts the disconnect by its reason, not as a bare
// reset), and the disconnect is counted once.
func TestSlowConsumerLearnsWhy(t *testing.T) {
	p := startRelay(t, "--max-pending", "65536", "--write-timeout", "5s", "--rate-messages", "-1", "--rate-bytes", "-1")
	sender := join(t, p.TCP, "r", "sender")
	nc, err := net.Dial("tcp", p.TCP)
	if err != nil {
		t.Fatal(err)
	}
	nc.(*net.TCPConn).SetReadBuffer(4096)
	slow := client.New(nc)
	t.Cleanup(func() { slow.Close() })
	slow.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := slow.Join("r", "slow", nil); err != nil {
		t.Fatal(err)
	}
	// Send until the relay gives up on the member that does not read
	// (bounded: 64 KiB of queue plus the socket buffers is far less).
	payload := make([]byte, 1000)
	cut := false
	for i := 0; i < 20000 && !cut; i++ {
		send(t, sender, wire.Send{Mode: wire.Othercast, Payload: payload})
		if i%100 == 99 {
			cut = p.metric(t, "relay_slow_consumer_disconnects_total") >= 1
		}
	}
	if !cut {
		t.Fatal("20,000 messages to a member that does not read, and no slow-consumer disconnect")
	}
	expectError(t, slow, wire.ErrSlowConsumer)
	p.waitMetric(t, `relay_disconnects_total{reason="slow_consumer"}`, 1)
	if got := p.metric(t, "relay_slow_consumer_disconnects_total"); got != 1 {
		t.Errorf("relay_slow_consumer_disconnects_total = %v, want 1", got)
	}
}
