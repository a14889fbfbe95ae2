package relay

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	rclient "github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// TestUDPHoldSkips: holds that find nothing new are skipped after
// holdMisses in a row, minSkip of them first, doubling while they keep
// missing, up to maxSkip; one that pays starts over.
func TestUDPHoldSkips(t *testing.T) {
	u := &udpServer{s: &Server{cfg: Config{UDPHold: time.Nanosecond}}}
	missRun := func() int { // misses until holds are skipped; the holds skipped
		for range holdMisses {
			if !u.hold() {
				t.Fatal("a hold was skipped before holdMisses misses")
			}
			u.missed()
		}
		skipped := 0
		for !u.hold() {
			skipped++
		}
		return skipped
	}
	if got := missRun(); got != minSkip {
		t.Fatalf("first skip: %d holds, want %d", got, minSkip)
	}
	if got := missRun(); got != 2*minSkip {
		t.Fatalf("second skip: %d holds, want %d", got, 2*minSkip)
	}
	u.misses, u.next = 0, minSkip // a hold that paid (gather)
	if got := missRun(); got != minSkip {
		t.Fatalf("after a paying hold: %d holds skipped, want %d", got, minSkip)
	}
	u.s.cfg.UDPHold = 0
	if u.hold() {
		t.Fatal("hold with UDPHold 0")
	}
}

// TestUDPHoldPacksABurst: with a hold, the deliveries of a burst of sends
// from different members reach each member in one datagram, even when the
// first send comes 10 ms before the others (a worker without a hold has
// sent its cast by then: more datagrams than members). A burst whose sends
// spread over more than the hold (a starved test host) is tried again, up
// to a bound.
func TestUDPHoldPacksABurst(t *testing.T) {
	s, stop := startServer(t, Config{UDP: UDPSameAsTCP, UDPWorkers: 1, UDPHold: 50 * time.Millisecond})
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const members = 6
	var cs []*rclient.Conn
	for i := range members {
		cs = append(cs, joinUDP(ctx, t, s, "burst", fmt.Sprintf("u%d", i)))
	}
	// Every member's member_joined notices have gone out: count from here.
	time.Sleep(100 * time.Millisecond)
	for attempt := range 20 {
		d0, f0 := testutil.ToFloat64(s.m.UDPDatagrams), testutil.ToFloat64(s.m.DeliveredMessages)
		for i, c := range cs {
			if err := c.Send(wire.Send{Mode: wire.Othercast, Payload: []byte("pose")}); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				time.Sleep(10 * time.Millisecond)
			}
		}
		want := float64(members * (members - 1))
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(s.m.DeliveredMessages)-f0 < want {
			if time.Now().After(deadline) {
				t.Fatalf("attempt %d: %v of %v deliveries", attempt, testutil.ToFloat64(s.m.DeliveredMessages)-f0, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
		dgrams := testutil.ToFloat64(s.m.UDPDatagrams) - d0
		t.Logf("attempt %d: %v deliveries in %v datagrams", attempt, want, dgrams)
		if dgrams == members {
			return
		}
	}
	t.Fatal("20 bursts: never one datagram per member")
}

// TestUDPOpenDatagramGoesWhenDue: a client's open datagram (udppack.go)
// goes out when its first frame has waited the hold, without waiting for
// another datagram to read or for the sweep tick (750 ms here). Room a's
// send wakes the worker, which holds; room b's send, read after that hold,
// opens b1's datagram, which is young at the flush, so stays open. The
// median of five tries is judged, so that one starved moment of the test
// host does not decide; without the read timeout set to the first due
// datagram, most tries take about the tick (one that finds the worker
// between holds does not).
func TestUDPOpenDatagramGoesWhenDue(t *testing.T) {
	const hold = 20 * time.Millisecond
	s, stop := startServer(t, Config{UDP: UDPSameAsTCP, UDPWorkers: 1, UDPHold: hold})
	defer stop()
	tick := s.sweepTick()
	if tick < 10*hold {
		t.Fatalf("sweep tick %v: the test needs one far over the hold", tick)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs := map[string]*rclient.Conn{}
	for _, name := range []string{"a0", "a1", "b0", "b1"} {
		cs[name] = joinUDP(ctx, t, s, "due-"+name[:1], name)
	}
	for _, name := range []string{"a0", "b0"} {
		cs[name].SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := cs[name].RecvType(wire.TypeMemberJoined); err != nil {
			t.Fatal(err)
		}
	}
	pose := wire.Send{Mode: wire.Othercast, Payload: []byte("pose")}
	var took []time.Duration
	for try := range 5 {
		if err := cs["a0"].Send(pose); err != nil {
			t.Fatal(err)
		}
		time.Sleep(hold / 4)
		start := time.Now()
		if err := cs["b0"].Send(pose); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"b1", "a1"} {
			cs[name].SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := cs[name].RecvType(wire.TypeDeliver); err != nil {
				t.Fatalf("try %d: %s: %v", try, name, err)
			}
			if name == "b1" {
				took = append(took, time.Since(start))
				t.Logf("try %d: b1's delivery after %v (hold %v)", try, took[try], hold)
			}
		}
	}
	slices.Sort(took)
	if med := took[len(took)/2]; med >= tick/2 {
		t.Fatalf("a delivery in an open datagram took %v (median): it waited for the sweep tick (%v), not its hold of %v", med, tick, hold)
	}
}

// joinUDP dials the relay over UDP and joins room as user; the
// connection closes when the test ends.
func joinUDP(ctx context.Context, t *testing.T, s *Server, room, user string) *rclient.Conn {
	t.Helper()
	c, err := rclient.DialUDP(ctx, s.UDPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Join(room, user, nil); err != nil {
		t.Fatal(err)
	}
	return c
}
