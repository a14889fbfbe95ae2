package relay

import (
	"context"
	"fmt"
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
		c, err := rclient.DialUDP(ctx, s.UDPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Join("burst", fmt.Sprintf("u%d", i), nil); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
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
