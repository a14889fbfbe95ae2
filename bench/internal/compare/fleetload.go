package compare

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/bench/internal/load"
	"github.com/reprise-harness/reprise/bench/internal/proc"
	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/wire"
)

// FleetLoad is cmd/replay's own cost driving an N:N workload at the relay.
type FleetLoad struct {
	Workload       string  `json:"workload"`
	Clients        int     `json:"clients"`
	WindowS        float64 `json:"window_s"`
	SentPerS       float64 `json:"sent_per_s"`      // sends the relay accepted from the fleet
	DeliveredPerS  float64 `json:"delivered_per_s"` // deliveries the relay queued to the fleet
	NominalPerS    float64 `json:"nominal_deliveries_per_s"`
	ReplayCPUPerM  float64 `json:"replay_cpu_s_per_million_msgs"` // per million sent + received
	RelayCPUPerM   float64 `json:"relay_cpu_s_per_million"`
	ReplayRSSMiB   float64 `json:"replay_rss_mib"`
	ReplayCPUCores float64 `json:"replay_cpu_cores"`
}

// sendsPerLoop is how many sends the synthesized session holds; replay
// loops over them.
const sendsPerLoop = 144

// writeSenderSession writes a pcap of one client that joins and then sends
// sendsPerLoop othercasts of payload bytes at rate per second, then a
// heartbeat; replay loops over the sends with --loop #1,#<1+sendsPerLoop>.
func writeSenderSession(path string, rate float64, payload int) error {
	w, err := capture.Create(path, layers.LinkTypeEthernet, capture.DefaultSnaplen)
	if err != nil {
		return err
	}
	cl := netip.MustParseAddrPort("127.0.0.1:40001")
	sv := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), wire.DefaultPort)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	flow, err := w.OpenTCP(t0, cl, sv)
	if err != nil {
		return errors.Join(err, w.Close())
	}
	err = errors.Join(
		flow.Data(t0.Add(time.Millisecond), true, wire.AppendJoin(nil, "room", "recorded-user", nil, 0)),
		flow.Data(t0.Add(2*time.Millisecond), false, wire.AppendJoined(nil, 0, "recorded-user", []string{"recorded-user"})),
	)
	p := make([]byte, payload)
	period := time.Duration(float64(time.Second) / rate)
	var t time.Time
	for k := 0; k < sendsPerLoop && err == nil; k++ {
		t = t0.Add(100*time.Millisecond + time.Duration(k)*period)
		load.EncodePayload(p, load.Stamp{SentNs: t.UnixNano(), Seq: uint64(k + 1)})
		err = flow.Data(t, true, wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: t.UnixNano(), Payload: p}))
	}
	// A heartbeat one period after the last send is the loop's end point
	// (frame #1+sendsPerLoop), so the loop [#1, #1+sendsPerLoop) keeps the
	// rate across its seam.
	if err == nil {
		err = flow.Data(t.Add(period), true, wire.AppendHeartbeat(nil, t.Add(period).UnixNano()))
	}
	err = errors.Join(err, flow.Close(t.Add(2*period), true))
	return errors.Join(err, w.Close())
}

// fleetLoad runs `replay` with w's members as looping senders against a
// fresh relay and measures the replay process's CPU per message, counting
// messages with the relay's own counters.
func fleetLoad(ctx context.Context, relay Target, replayBin, dir string, w Workload, rate float64, payload int, warmup, window time.Duration) (_ *FleetLoad, err error) {
	if w.Senders != w.Members {
		return nil, fmt.Errorf("fleet load %s: only N:N workloads", w.Name)
	}
	pcap := filepath.Join(dir, "sender.pcap")
	if err := writeSenderSession(pcap, rate, payload); err != nil {
		return nil, fmt.Errorf("sender capture: %w", err)
	}
	srv, err := start(ctx, relay)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, srv.Stop()) }()
	i := slices.Index(srv.Args, "--metrics")
	if i < 0 || i+1 >= len(srv.Args) {
		return nil, errors.New("fleet load: the relay was started without --metrics")
	}
	metricsURL := "http://" + srv.Args[i+1] + "/metrics"
	ap, err := netip.ParseAddrPort(srv.Addr)
	if err != nil {
		return nil, fmt.Errorf("relay address %q: %w", srv.Addr, err)
	}
	n := w.Rooms * w.Members
	fl, err := proc.Launch("replay", replayBin, []string{
		"--capture", pcap, "--target", srv.Addr, "--clients", strconv.Itoa(n),
		"--room-size", strconv.Itoa(w.Members), "--loop", "#1,#" + strconv.Itoa(1+sendsPerLoop),
		"--login-interval", "100us", "--duration", "5m", "--metrics", "", "--progress-interval", "1m", "--log-level", "warn",
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if !fl.Exited() {
			_ = fl.Stop() // cut short on purpose; see holdReplay
		}
	}()
	t0 := time.Now()
	for {
		if fl.Exited() {
			return nil, fmt.Errorf("replay exited early: %s", fl.Output())
		}
		got, err := proc.CountEstablished(int(ap.Port()))
		if err != nil {
			return nil, err
		}
		if got >= n {
			break
		}
		if time.Since(t0) > time.Minute {
			return nil, fmt.Errorf("only %d of %d replay clients connected after a minute: %s", got, n, fl.Output())
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return nil, err
		}
	}
	if err := sleep(ctx, warmup); err != nil {
		return nil, err
	}
	sample := func() (replayCPU, relayCPU time.Duration, recv, deliv float64, err error) {
		replayCPU, err1 := fl.CPU()
		relayCPU, err2 := srv.CPU()
		recv, deliv, err3 := relayCounters(ctx, metricsURL)
		return replayCPU, relayCPU, recv, deliv, errors.Join(err1, err2, err3)
	}
	c0, r0, recv0, del0, err := sample()
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	if err := sleep(ctx, window); err != nil {
		return nil, err
	}
	c1, r1, recv1, del1, err := sample()
	if err != nil {
		return nil, err
	}
	el := time.Since(t1).Seconds()
	rss, err := fl.RSS()
	if err != nil {
		return nil, err
	}
	msgs := (recv1 - recv0) + (del1 - del0)
	fr := &FleetLoad{
		Workload: w.Name, Clients: n, WindowS: el,
		SentPerS: (recv1 - recv0) / el, DeliveredPerS: (del1 - del0) / el, NominalPerS: w.Deliveries(rate),
		ReplayRSSMiB: float64(rss) / (1 << 20), ReplayCPUCores: (c1 - c0).Seconds() / el,
	}
	if msgs > 0 {
		fr.ReplayCPUPerM = (c1 - c0).Seconds() / msgs * 1e6
	}
	if d := del1 - del0; d > 0 {
		fr.RelayCPUPerM = (r1 - r0).Seconds() / d * 1e6
	}
	return fr, nil
}

// relayCounters reads the relay's received and delivered message totals
// from its /metrics.
func relayCounters(ctx context.Context, url string) (recv, deliv float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("metrics request: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("relay metrics: %w", err)
	}
	defer resp.Body.Close()
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		var dst *float64
		switch {
		case !ok:
			continue
		case name == "relay_received_messages_total":
			dst = &recv
		case name == "relay_delivered_messages_total":
			dst = &deliv
		default:
			continue
		}
		if *dst, err = strconv.ParseFloat(val, 64); err != nil {
			return 0, 0, fmt.Errorf("relay metrics %s %q: %w", name, val, err)
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("relay metrics: %w", err)
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("relay metrics at %s: relay_received_messages_total or relay_delivered_messages_total missing", url)
	}
	return recv, deliv, nil
}
