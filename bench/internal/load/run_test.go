package load

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/goleak"
)

// TestRunAgainstNATS drives a small workload through a real embedded
// nats-server and checks the accounting closes: every send delivered once
// to every other member, nothing misrouted, and no goroutine left behind.
func TestRunAgainstNATS(t *testing.T) {
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	defer s.Shutdown()
	// The server's own goroutines are its business; only ours must be gone.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	for _, tc := range []struct{ rooms, members, senders int }{{2, 4, 4}, {1, 6, 1}} {
		res, err := Run(context.Background(), Config{
			Proto: NATS{}, Addr: s.ClientURL()[len("nats://"):],
			Rooms: tc.rooms, Members: tc.members, Senders: tc.senders, Rate: 50, PayloadSize: 64,
			Warmup: 100 * time.Millisecond, Duration: 400 * time.Millisecond, Drain: 2 * time.Second,
			LateAfter: 50 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Sent == 0 || res.Expected != res.Sent*uint64(tc.members-1) {
			t.Errorf("%+v: sent %d, expected %d", tc, res.Sent, res.Expected)
		}
		if res.Missing != 0 || res.Counts.Received != res.Expected || res.Counts.Dups+res.Counts.Gaps+res.Counts.Misrouted+res.Counts.Malformed != 0 || res.Errors != 0 {
			t.Errorf("%+v: %+v (first error %q)", tc, res.Counts, res.FirstError)
		}
		if res.Latency.TotalCount() != int64(res.Counts.InWindow) || res.Counts.InWindow == 0 {
			t.Errorf("%+v: %d latencies for %d in-window deliveries", tc, res.Latency.TotalCount(), res.Counts.InWindow)
		}
	}
}
