package relay

import (
	"errors"
	"math"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/wire"
)

// TestUDPSockReadTimesOutAndWakes: a relay UDP socket's waiting read ends
// with a timeout error after its read timeout (the worker's sweep tick),
// and at once when the socket is woken for shutdown (however long the
// timeout); datagrams sent to it are read.
func TestUDPSockReadTimesOutAndWakes(t *testing.T) {
	socks, err := listenUDP(mustUDPAddr(t, "127.0.0.1:0"), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	sk := socks[0]
	defer sk.Close()
	r, err := newUDPReader(sk, 4, 2048)
	if err != nil {
		t.Fatal(err)
	}

	snd, err := net.DialUDP("udp", nil, sk.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	for _, m := range []string{"one", "two"} {
		if _, err := snd.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := sk.setReadTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < 2 {
		n, err := r.read()
		if err != nil {
			t.Fatalf("read after %d datagrams: %v", got, err)
		}
		got += n
	}
	if n, err := r.poll(); n != 0 || err != nil {
		t.Fatalf("poll of an empty socket: %d, %v", n, err)
	}

	if err := sk.setReadTimeout(10 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, err = r.read()
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read of an empty socket with a timeout: %v, want a timeout", err)
	}

	if err := sk.setReadTimeout(time.Hour); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.read(); done <- err }()
	time.Sleep(20 * time.Millisecond) // most likely waiting by now; if not, it returns at once anyway
	sk.wake()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a woken read still waits")
	}
	if err := sk.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.read(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read of a closed socket: %v", err)
	}
}

// TestUDPArrivalFromKernel: datagrams read late are given the time the
// kernel received them, not the read's: two bursts sent 200 ms apart and
// read together 200 ms after the second keep those gaps, each datagram's
// at most maxAge back; a wall clock stepped meanwhile moves no arrival out
// of [read - maxAge, read].
func TestUDPArrivalFromKernel(t *testing.T) {
	socks, err := listenUDP(mustUDPAddr(t, "127.0.0.1:0"), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	sk := socks[0]
	defer sk.Close()
	r, err := newUDPReader(sk, 16, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if !r.stamps {
		t.Fatal("the socket gives no receive timestamps (SO_TIMESTAMPNS)")
	}
	snd, err := net.DialUDP("udp", nil, sk.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer snd.Close()
	const gap = 200 * time.Millisecond
	epoch := time.Now()
	burst := func(tag byte) {
		for range 4 {
			if _, err := snd.Write([]byte{tag}); err != nil {
				t.Fatal(err)
			}
		}
	}
	burst('a')
	time.Sleep(gap)
	burst('b')
	time.Sleep(gap)
	n, err := r.poll() // all 8 are queued: loopback delivers at send
	if err != nil || n != 8 {
		t.Fatalf("read %d datagrams (%v), want 8", n, err)
	}
	now := time.Now()
	r.clock(int64(now.Sub(epoch)), now)
	var last [2]int64 // the latest arrival of each burst
	first := [2]int64{r.now, r.now}
	for i := range n {
		d, _, ok := r.datagram(i)
		if !ok {
			t.Fatalf("datagram %d truncated", i)
		}
		at := r.arrival(i)
		if at < r.now-maxAge || at > r.now {
			t.Fatalf("datagram %d arrived at %d, outside the read's last maxAge (%d)", i, at, r.now)
		}
		b := int(d[0] - 'a')
		last[b], first[b] = max(last[b], at), min(first[b], at)
	}
	// Each burst was queued a gap or more before the read, the first
	// another gap before the second (the sleeps are at least that long).
	if ago := time.Duration(r.now - last[1]); ago < gap {
		t.Errorf("second burst arrived %v before the read, want ≥ %v", ago, gap)
	}
	if d := time.Duration(first[1] - last[0]); d < gap {
		t.Errorf("bursts arrived %v apart, want ≥ %v", d, gap)
	}

	// The wall clock stepped forward or back between the datagram and
	// the read: arrivals stay within the read's last maxAge.
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		r.clock(r.now, now.Add(step))
		for i := range n {
			if at := r.arrival(i); at < r.now-maxAge || at > r.now {
				t.Errorf("clock stepped %v: datagram %d arrived at %d, outside [%d, %d]", step, i, at, r.now-maxAge, r.now)
			}
		}
	}
}

// TestUDPStarvedWorkerChargesByArrival: a UDP worker that reads late (the
// test drives it, reading every 250 ms) charges a sender's datagrams at
// their arrival: 50 sends 10 ms apart pass a limit of 100 a second with a
// burst of 10, where charged at the read they would be bursts of ~25 (15
// dropped each). Sent at once, 30 are held to the burst (the limit
// binds).
func TestUDPStarvedWorkerChargesByArrival(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Listen, cfg.UDP, cfg.Metrics = "127.0.0.1:0", "127.0.0.1:0", "off"
	cfg.RateMessages, cfg.RateMessagesBurst = 100, 10
	cfg.RoomRateMessages, cfg.RoomRateBytes = -1, -1
	cfg.RateLimitGrace = time.Hour
	cfg.UDPWorkers = 1 // one socket: SO_REUSEPORT would hash the client to any of them
	reg := prometheus.NewRegistry()
	s, err := New(cfg, zap.NewNop(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.closeSockets()
	u, err := newUDPServer(s, s.udp)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := net.DialUDP("udp", nil, s.udp.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// drain is the worker's read, late: all that is queued.
	drain := func() {
		for {
			n, err := u.r.poll()
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				return
			}
			u.handle(n)
			u.flush()
		}
	}
	send := func(d []byte) {
		if _, err := cl.Write(d); err != nil {
			t.Fatal(err)
		}
	}
	pad := wire.UDPJoinPad - wire.TokenSize - len(wire.AppendJoin(nil, "r", "u", nil, 0))
	send(wire.AppendJoin(wire.AppendDatagram(nil, 0), "r", "u", nil, pad))
	drain()
	c := u.byAddr[cl.LocalAddr().(*net.UDPAddr).AddrPort()]
	if c == nil {
		t.Fatal("the join made no session")
	}
	send(wire.AppendHeartbeat(wire.AppendDatagram(nil, c.token), 1)) // confirms it
	drain()
	time.Sleep(200 * time.Millisecond) // the buckets full again
	limited := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "relay_rate_limited_frames_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "limit" && l.GetValue() == "messages" {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		t.Fatal("no relay_rate_limited_frames_total{limit=\"messages\"}")
		return 0
	}
	sendFrame := wire.AppendSend(wire.AppendDatagram(nil, c.token), wire.Send{Mode: wire.Othercast, Payload: []byte("pose")})
	last := time.Now()
	for range 50 {
		send(sendFrame)
		time.Sleep(10 * time.Millisecond)
		if time.Since(last) >= 250*time.Millisecond {
			drain()
			last = time.Now()
		}
	}
	drain()
	base := limited()
	if n := base; n != 0 {
		t.Errorf("%v of 50 sends 10 ms apart dropped by a limit of 100/s (read late, charged at the read?)", n)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	for range 30 {
		send(sendFrame)
	}
	took := time.Since(start)
	drain()
	// The burst passes, and of the rest what the bucket refilled for
	// while they were sent (100 a second; a starved test host sends them
	// over longer): no more.
	refill := int(math.Ceil(took.Seconds() * 100))
	if n := int(limited() - base); n > 20 || n < 20-refill {
		t.Errorf("30 sends at once (over %v): %d dropped, want %d-20 (a burst of 10 passes)", took, n, max(20-refill, 0))
	}
}
