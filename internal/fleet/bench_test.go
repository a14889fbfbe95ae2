package fleet

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

// The hot paths of a fleet client, driven by hand over real loopback TCP
// connections: a scheduler turn (build the due frames, write them) and
// the reader (parse deliveries, time them, count them).
//
//	go test ./internal/fleet -run '^$' -bench . -benchmem -count 6

// poseFrames is a 72 Hz pose sender: the join, then 720 traced othercasts
// of 96 payload bytes from 1 s.
func poseFrames() []session.Frame {
	fr := []session.Frame{{Bytes: wire.AppendJoin(nil, "lobby", "alice", nil, 0)}}
	payload := make([]byte, 96)
	for i := range 720 {
		fr = append(fr, session.Frame{Offset: time.Second + time.Duration(i)*time.Second/72,
			Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Payload: payload})})
	}
	return fr
}

// benchClient is client 0 of a fleet that is never run, joined over a
// real TCP connection whose relay end is returned.
func benchClient(b testing.TB) (*client, net.Conn) {
	b.Helper()
	c := baseConfig()
	c.Frames = poseFrames()
	c.Loop = "1s,11s"
	c.Target = "127.0.0.1:9" // never dialled
	f, err := New(c)
	if err != nil {
		b.Fatal(err)
	}
	f.epoch = time.Now()
	f.epochUnix = f.epoch.UnixNano()
	cl, err := f.newClient(0)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(); srv.Close() })
	cl.conn = conn
	if cl.raw, err = conn.(*net.TCPConn).SyscallConn(); err != nil {
		b.Fatal(err)
	}
	// The protocol's side of the login: the profile's client saw joined.
	var ev profile.Events
	if err := cl.pc.Feed(wire.AppendJoined(nil, 0, "replay-0", []string{"replay-0"}), 0, &ev); err != nil || !ev.LoggedIn {
		b.Fatalf("joined: %v %+v", err, ev)
	}
	cl.joined.Store(true)
	cl.next = 1
	return cl, srv
}

// drainConn reads conn until it closes, in a goroutine stopped at cleanup.
func drainConn(b *testing.B, conn net.Conn) {
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(io.Discard, conn) })
	b.Cleanup(func() { conn.Close(); wg.Wait() })
}

// benchSend runs scheduler turns with per frames due in each.
func benchSend(b *testing.B, per int) {
	c, srv := benchClient(b)
	drainConn(b, srv)
	buf := make([]byte, 0, 64<<10)
	lags := make([]int64, 0, 1024)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		now := c.f.now()
		c.start = now - int64(c.plan.Step(c.next+int64(per)-1).Due)
		buf, lags = c.send(now, buf, lags[:0])
		// Outrunning the relay end's reader: wait for the kernel as a
		// blocking write would, by retrying the backlog.
		for len(c.backlog) > 0 && !c.dead.Load() {
			runtime.Gosched()
			c.sendTCP(c.sched.w, nil, nil, c.f.now())
		}
	}
	b.StopTimer()
	if c.dead.Load() || len(lags) != per {
		b.Fatalf("dead %v, %d frames in the last turn, want %d", c.dead.Load(), len(lags), per)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*per), "ns/frame")
}

// BenchmarkSendTurn: one frame due per turn (the common case at 72 Hz):
// one write per frame.
func BenchmarkSendTurn(b *testing.B) { benchSend(b, 1) }

// BenchmarkSendTurn8: eight frames due in one turn, coalesced into one
// write.
func BenchmarkSendTurn8(b *testing.B) { benchSend(b, 8) }

// BenchmarkReadDeliveries: the reader consumes a stream of traced deliver
// frames (one op = one deliver) until the relay end closes.
func BenchmarkReadDeliveries(b *testing.B) {
	c, srv := benchClient(b)
	payload := make([]byte, 96)
	var chunk []byte
	per := 0
	for len(chunk) < 32<<10 {
		chunk = wire.AppendDeliver(chunk, wire.Othercast, "replay-17", true, time.Now().UnixNano(), payload)
		per++
	}
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	wg.Go(func() {
		defer srv.Close()
		for sent := 0; sent < b.N; sent += per {
			if _, err := srv.Write(chunk); err != nil {
				return
			}
		}
	})
	reason := c.read(nil, nil)
	b.StopTimer()
	wg.Wait()
	if reason.Code() != DisconnectClosedByRelay {
		b.Fatalf("read ended with %v", reason)
	}
	if got := c.sched.c.recvMsgs.Load(); got < int64(b.N) {
		b.Fatalf("received %d delivers, want ≥ %d", got, b.N)
	}
}

// deliveryChunk is what the relay writes a member of a 32-member room in
// one go: n traced othercasts from the 31 others in turn, each numbered
// in its sender's sequence (the stamp's last digits), 96 payload bytes.
// round numbers the senders' sequences so consecutive chunks continue
// them without a gap.
func deliveryChunk(n, round int, now int64) []byte {
	payload := make([]byte, 96)
	var b []byte
	for i := range n {
		k := round*n + i
		seq := uint64(k/31 + 1)
		stamp := now - now%1000 + int64(seq%1000)
		b = wire.AppendDeliver(b, wire.Othercast, "replay-"+itoa(k%31+1), true, stamp, payload)
	}
	return b
}

func itoa(i int) string { return string(rune('0'+i/10)) + string(rune('0'+i%10)) }

// TestConsumeNoAlloc: consuming a read of deliveries (parse, loss,
// latency, counters) allocates nothing; the receive path runs it about
// 40,000 times a second at N:N 8x32.
func TestConsumeNoAlloc(t *testing.T) {
	c, _ := benchClient(t)
	now := time.Now().UnixNano()
	chunks := make([][]byte, 10)
	for r := range chunks {
		chunks[r] = deliveryChunk(31, r, now)
	}
	var ev profile.Events
	c.consume(chunks[0], &ev, nil) // the first sight of each sender adds its entry
	r := 1
	allocs := testing.AllocsPerRun(len(chunks)-2, func() { // and once to warm up
		if _, done := c.consume(chunks[r], &ev, nil); done {
			t.Fatal("consume stopped")
		}
		r++
	})
	if allocs != 0 {
		t.Errorf("%v allocations per read, want 0", allocs)
	}
	want := int64(31 * len(chunks))
	if got := c.sched.c.recvMsgs.Load(); got != want || c.sched.c.lost.Load() != 0 {
		t.Errorf("%d delivered with %d lost, want %d and 0", got, c.sched.c.lost.Load(), want)
	}
	// Every delivery was stamped and a room cast: each one's latency
	// counted once (in the read that decoded it) and its sequence checked.
	c.f.stats.fold()
	if got := c.f.stats.cumLat.TotalCount(); got != want {
		t.Errorf("%d latencies recorded, want %d", got, want)
	}
	if got := c.sched.c.recvNumbered.Load(); got != want {
		t.Errorf("%d deliveries numbered, want %d", got, want)
	}
}

// BenchmarkConsume: the user-space half of the reader, without sockets:
// a read of 31 deliveries (about 4 KiB, a typical read at N:N 8x32) goes
// through consume (parse, loss tracking, latency recording, counters).
// One op = one delivery.
func BenchmarkConsume(b *testing.B) {
	c, _ := benchClient(b)
	const per = 31
	chunks := make([][]byte, 1000) // 1000 rounds: the 3-digit sequences wrap in step
	now := time.Now().UnixNano()
	for r := range chunks {
		chunks[r] = deliveryChunk(per, r, now)
	}
	var ev profile.Events
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for i := 0; i < b.N; i += per {
		if _, done := c.consume(chunks[(i/per)%len(chunks)], &ev, nil); done {
			b.Fatal("consume stopped")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	if lost := c.sched.c.lost.Load(); lost != 0 {
		b.Fatalf("%d lost, want 0", lost)
	}
}

// BenchmarkConsumeRooms: consume at N:N's shape, with the caches a busy
// fleet has: 8 rooms of 32 clients of one fleet, each read (32 traced
// broadcasts, one from each member of the room, about 4 KiB) consumed by
// the room's 32 clients, all 256 in a shuffled order every round, so
// that a client's own state (its parser, loss tracking, counters) has
// gone cold between two of its reads, as it has between two reads of a
// fleet's reader. One op = one delivery. Run it under
// `valgrind --tool=cachegrind` for instructions and cache misses per
// delivery, whatever the host's load. In "/reordered" the room's casts
// come in a new order every round (the same for all its receivers, as
// the relay fans each out to all): under load the relay's order of a
// room's senders changes from round to round.
func BenchmarkConsumeRooms(b *testing.B) {
	b.Run("same-order", func(b *testing.B) { benchConsumeRooms(b, false) })
	b.Run("reordered", func(b *testing.B) { benchConsumeRooms(b, true) })
}

func benchConsumeRooms(b *testing.B, reorder bool) {
	const rooms, members = 8, 32
	cfg := baseConfig()
	cfg.Frames = poseFrames()
	cfg.Loop = "1s,11s"
	cfg.Target = "127.0.0.1:9" // never dialled
	cfg.Clients, cfg.RoomSize = rooms*members, members
	f, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	f.epoch = time.Now()
	f.epochUnix = f.epoch.UnixNano()
	cls := make([]*client, rooms*members)
	var ev profile.Events
	for i := range cls {
		if cls[i], err = f.newClient(i); err != nil {
			b.Fatal(err)
		}
		if err := cls[i].pc.Feed(wire.AppendJoined(nil, 0, cfg.userID(i), nil), 0, &ev); err != nil || !ev.LoggedIn {
			b.Fatalf("joined: %v %+v", err, ev)
		}
		cls[i].joined.Store(true)
	}
	// Each room's frames, and the read made of them: reassembled in the
	// round's order, its stamps patched with the senders' next sequence.
	payload := make([]byte, 96)
	frames := make([][][]byte, rooms)
	for r := range rooms {
		for m := range members {
			frames[r] = append(frames[r], wire.AppendDeliver(nil, wire.Broadcast, cfg.userID(r*members+m), true, 0, payload))
		}
	}
	chunks := make([][]byte, rooms)
	order := make([]int, len(cls))
	for i := range order {
		order[i] = i
	}
	rng := rand.New(rand.NewPCG(5, 6))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for round := 1; (round-1)*len(cls)*members < b.N; round++ {
		now := f.wallNow()
		for r := range rooms {
			if reorder || round == 1 {
				rng.Shuffle(members, func(i, j int) { frames[r][i], frames[r][j] = frames[r][j], frames[r][i] })
			}
			chunks[r] = chunks[r][:0]
			for _, fr := range frames[r] {
				at := wire.DeliverUserAt + int(fr[wire.DeliverUserAt-1]) // the stamp, after the id and its length
				binary.BigEndian.PutUint64(fr[at:], uint64(now-now%1000+int64(round%1000)))
				chunks[r] = append(chunks[r], fr...)
			}
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			if _, done := cls[i].consume(chunks[i/members], &ev, nil); done {
				b.Fatal("consume stopped")
			}
		}
	}
	b.StopTimer()
	var got, lost int64
	for i := range f.stats.byScheduler {
		got += f.stats.byScheduler[i].recvMsgs.Load()
		lost += f.stats.byScheduler[i].lost.Load()
	}
	b.ReportMetric(float64(processCPU()-cpu)/float64(got), "cpu-ns/op")
	if got < int64(b.N) || lost != 0 {
		b.Fatalf("%d delivered with %d lost, want ≥ %d and 0", got, lost, b.N)
	}
}

// processCPU is the process's CPU time so far (user and system, ns): on
// a shared host a benchmark's CPU per op is steadier than its wall time.
func processCPU() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
