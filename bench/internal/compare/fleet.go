package compare

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/bench/internal/proc"
	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/wire"
)

// FleetIdle is the memory of cmd/replay holding receive-only clients.
// BaseRSSMiB is a one-client replay's, so PerClientKiB is the slope.
type FleetIdle struct {
	Clients         int     `json:"clients"`
	LoginS          float64 `json:"login_s"`
	BaseRSSMiB      float64 `json:"replay_base_rss_mib"` // with one client
	RSSMiB          float64 `json:"replay_rss_mib"`
	PerClientKiB    float64 `json:"replay_rss_per_client_kib"`
	RelayPerConnKiB float64 `json:"relay_rss_per_conn_kib"`
}

// writeSession writes a pcap of one short TCP client session (join,
// joined, a heartbeat and its reply, close) for replay to log in with.
func writeSession(path string) error {
	w, err := capture.Create(path, layers.LinkTypeEthernet, capture.DefaultSnaplen)
	if err != nil {
		return err
	}
	cl := netip.MustParseAddrPort("127.0.0.1:40000")
	sv := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), wire.DefaultPort)
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	step := func() time.Time { t = t.Add(10 * time.Millisecond); return t }
	flow, err := w.OpenTCP(step(), cl, sv)
	if err != nil {
		return errors.Join(err, w.Close())
	}
	err = errors.Join(
		flow.Data(step(), true, wire.AppendJoin(nil, "idle", "recorded-user", nil, 0)),
		flow.Data(step(), false, wire.AppendJoined(nil, 0, "recorded-user", []string{"recorded-user"})),
		flow.Data(step(), true, wire.AppendHeartbeat(nil, t.UnixNano())),
		flow.Data(step(), false, wire.AppendHeartbeatReply(nil, t.UnixNano(), t.UnixNano())),
		flow.Close(step(), true),
	)
	return errors.Join(err, w.Close())
}

// fleetIdle starts a relay and `replay --receive-only` with n clients in
// rooms of roomSize, waits until the relay holds them all, and measures
// both processes' memory per connection.
func fleetIdle(ctx context.Context, relay Target, replayBin, dir string, n, roomSize int) (_ *FleetIdle, err error) {
	pcap := filepath.Join(dir, "session.pcap")
	if err := writeSession(pcap); err != nil {
		return nil, fmt.Errorf("session capture: %w", err)
	}
	srv, err := start(ctx, relay)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Stop()) }()
	ap, err := netip.ParseAddrPort(srv.Addr)
	if err != nil {
		return nil, fmt.Errorf("relay address %q: %w", srv.Addr, err)
	}
	port := int(ap.Port())
	if err := sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	relayBase, err := srv.RSS()
	if err != nil {
		return nil, err
	}
	// The replay's fixed cost (runtime, capture, per-fleet tables) comes
	// from a one-client run, so the per-client figure is the slope.
	base, _, err := holdReplay(ctx, replayBin, pcap, srv.Addr, port, 1, roomSize, func() error { return nil })
	if err != nil {
		return nil, err
	}
	var relayRSS uint64
	rss, login, err := holdReplay(ctx, replayBin, pcap, srv.Addr, port, n, roomSize, func() (err error) {
		relayRSS, err = srv.RSS()
		return err
	})
	if err != nil {
		return nil, err
	}
	return &FleetIdle{
		Clients: n, LoginS: login.Seconds(),
		BaseRSSMiB: float64(base) / (1 << 20), RSSMiB: float64(rss) / (1 << 20),
		PerClientKiB:    (float64(rss) - float64(base)) / 1024 / float64(n-1),
		RelayPerConnKiB: (float64(relayRSS) - float64(relayBase)) / 1024 / float64(n),
	}, nil
}

// holdReplay runs `replay --receive-only` with n clients until the relay on
// port holds them all, waits for both to settle, calls held (to sample the
// relay), and returns the replay's RSS and how long the logins took. The
// replay is stopped before it returns.
func holdReplay(ctx context.Context, bin, pcap, addr string, port, n, roomSize int, held func() error) (rss uint64, login time.Duration, err error) {
	fl, err := proc.Launch("replay", bin, []string{
		"--capture", pcap, "--target", addr, "--receive-only", "--clients", strconv.Itoa(n),
		"--room-size", strconv.Itoa(roomSize), "--login-interval", "100us", "--duration", "5m",
		"--heartbeat", "60s", "--metrics", "", "--progress-interval", "1m", "--log-level", "warn",
	})
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		// Stopping early is the point: the replay's verdict on a run cut
		// short is not this measurement's result, so its exit status is
		// not an error here unless it had died on its own.
		if !fl.Exited() {
			_ = fl.Stop()
		}
	}()
	t0 := time.Now()
	for {
		if fl.Exited() {
			return 0, 0, fmt.Errorf("replay exited before %d clients were connected: %s", n, fl.Output())
		}
		got, err := proc.CountEstablished(port)
		if err != nil {
			return 0, 0, err
		}
		if got >= n {
			break
		}
		if time.Since(t0) > 3*time.Minute {
			return 0, 0, fmt.Errorf("only %d of %d replay clients connected after 3 minutes: %s", got, n, fl.Output())
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return 0, 0, err
		}
	}
	login = time.Since(t0)
	if err := sleep(ctx, 3*time.Second); err != nil {
		return 0, 0, err
	}
	if rss, err = fl.RSS(); err != nil {
		return 0, 0, err
	}
	return rss, login, held()
}
