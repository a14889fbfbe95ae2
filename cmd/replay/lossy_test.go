package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// lossyProxy forwards UDP between clients and a relay on loopback and drops
// a share of the datagrams both ways, joins and joined included: the
// network the fleet's join retry and loss accounting are for. (netem in a
// network namespace does the same, but sch_netem is not in every kernel;
// a proxy runs anywhere.) Each client gets its own upstream socket, so the
// relay sees one source address per client, as without the proxy.
type lossyProxy struct {
	ln      *net.UDPConn
	relay   *net.UDPAddr
	loss    float64
	mu      sync.Mutex
	rng     *rand.Rand
	peers   map[netip.AddrPort]*net.UDPConn
	wg      sync.WaitGroup
	dropped atomic.Int64
	passed  atomic.Int64
}

func startLossyProxy(t *testing.T, relay string, loss float64) *lossyProxy {
	t.Helper()
	ra, err := net.ResolveUDPAddr("udp", relay)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	p := &lossyProxy{ln: ln, relay: ra, loss: loss, rng: rand.New(rand.NewPCG(15, 20)), peers: map[netip.AddrPort]*net.UDPConn{}}
	p.wg.Go(p.fromClients)
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, up := range p.peers {
			up.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *lossyProxy) addr() string { return p.ln.LocalAddr().String() }

// drop decides one datagram's fate.
func (p *lossyProxy) drop() bool {
	p.mu.Lock()
	d := p.rng.Float64() < p.loss
	p.mu.Unlock()
	if d {
		p.dropped.Add(1)
	} else {
		p.passed.Add(1)
	}
	return d
}

func (p *lossyProxy) fromClients() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := p.ln.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		up, err := p.upstream(from)
		if err != nil {
			return
		}
		if !p.drop() {
			up.Write(buf[:n])
		}
	}
}

// upstream is client from's socket towards the relay, started with its
// reader on first use.
func (p *lossyProxy) upstream(from netip.AddrPort) (*net.UDPConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if up := p.peers[from]; up != nil {
		return up, nil
	}
	up, err := net.DialUDP("udp", nil, p.relay)
	if err != nil {
		return nil, err
	}
	p.peers[from] = up
	p.wg.Go(func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := up.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err == nil && !p.drop() {
				p.ln.WriteToUDPAddrPort(buf[:n], from)
			}
		}
	})
	return up, nil
}

// TestUDPLoginsSurviveLoss: with 20% of the datagrams dropped both ways
// (joins, joined replies, sends, deliveries), every UDP client still logs
// in within the login timeout, by sending its join again, and the fleet
// reports the deliveries it lost instead of hiding them.
func TestUDPLoginsSurviveLoss(t *testing.T) {
	t.Parallel()
	const clients, loss = 24, 0.2
	r := startRelay(t)
	px := startLossyProxy(t, r.UDP, loss)
	path := writeCapture(t, castScript())
	res := replay(t, "--capture", path, "--target", px.addr(), "--transport", "udp", "--clients", fmt.Sprint(clients),
		"--room-size", "8", "--loop", "200ms,300ms", "--login-interval", "20ms", "--login-timeout", "10s",
		"--after-logins", "5s")
	// Loss far past --max-loss: the run fails, saying how much was lost.
	if res.code != 1 || !strings.Contains(lastLine(res.stderr), "deliveries owed were lost") {
		t.Errorf("exit %d, last line %q; want 1 and the loss", res.code, lastLine(res.stderr))
	}
	s := res.sum
	if d := s.Deliveries; !d.Measured() || d.LossPercent < 20 || d.LossPercent > 55 {
		t.Errorf("deliveries %+v: want about 36%% of those owed lost", d)
	}
	t.Logf("proxy dropped %d, passed %d; logins %d, join retries %d, relay join repeats %v; sent %d, received %d, lost %d (%.1f%%)",
		px.dropped.Load(), px.passed.Load(), s.LoginsSucceeded, s.UDPJoinRetries, relayMetric(t, r, "relay_udp_join_repeats_total"),
		s.MessagesSent, s.MessagesReceived, s.MessagesLost, s.LossPercent)
	if s.LoginsSucceeded != clients || len(s.LoginsFailed) != 0 {
		t.Errorf("logged in %d of %d, failed %v: a lost join datagram must be sent again, not counted as a failed login", s.LoginsSucceeded, clients, s.LoginsFailed)
	}
	if s.UDPJoinRetries == 0 {
		t.Errorf("no join retries with %.0f%% of the datagrams dropped", 100*loss)
	}
	// A room-wide delivery crosses the proxy twice (send, deliver): about
	// 1 − 0.8² = 36% lost. The figure must be there and of that size.
	if s.LossPercent < 20 || s.LossPercent > 55 {
		t.Errorf("loss %.1f%% (%d lost), want about 36%% for %.0f%% dropped each way", s.LossPercent, s.MessagesLost, 100*loss)
	}
}
