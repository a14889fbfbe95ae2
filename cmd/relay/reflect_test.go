package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// reflectWindow is how long TestForgedSourceJoin watches the victim: by
// default a little over the confirm timeout, so the forged session's end
// falls inside it; REPRISE_REFLECT_SECONDS=10 for the full 10 s.
func reflectWindow(t *testing.T) time.Duration {
	if v := os.Getenv("REPRISE_REFLECT_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("REPRISE_REFLECT_SECONDS=%q: want a positive number of seconds", v)
		}
		return time.Duration(n) * time.Second
	}
	return 4 * time.Second
}

// TestForgedSourceJoin sends a join from a raw socket with a forged source
// address (the "victim", 127.0.0.2, which listens and counts what it gets)
// into a busy room: the victim must get no more bytes than the join had,
// however long the room talks, and the forged session must end unconfirmed.
// It needs root (a raw socket), as CI has.
func TestForgedSourceJoin(t *testing.T) {
	p := startRelay(t)
	raw, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if errors.Is(err, syscall.EPERM) {
		testproc.Unavailable(t, "raw sockets need root (CI runs as root)")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(raw)

	victim, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	var (
		mu                 sync.Mutex
		gotBytes, gotDgram int
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			n, err := victim.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			gotBytes += n
			gotDgram++
			mu.Unlock()
		}
	}()

	// A busy room: members broadcasting over TCP for the whole window.
	window := reflectWindow(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; i < 4; i++ {
		c := join(t, p.TCP, "busy", fmt.Sprintf("member-%d", i))
		c.SetDeadline(time.Now().Add(window + 30*time.Second))
		defer c.Close() // before wg.Wait: ends the reader
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				if _, err := c.Recv(); err != nil {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				if c.Send(wire.Send{Mode: wire.Broadcast, Payload: make([]byte, 200)}) != nil {
					return
				}
			}
		}()
	}

	relayAddr := netip.MustParseAddrPort(p.UDP)
	from := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(victim.LocalAddr().(*net.UDPAddr).Port))
	join := wire.AppendDatagram(nil, 0)
	join = wire.AppendJoin(join, "busy", "forger", nil, wire.UDPJoinPad-wire.TokenSize-len(wire.AppendJoin(nil, "busy", "forger", nil, 0)))
	pkt := ipv4UDP(from, relayAddr, join)
	to := syscall.SockaddrInet4{Addr: relayAddr.Addr().As4()}
	if err := syscall.Sendto(raw, pkt, 0, &to); err != nil {
		t.Fatalf("raw send: %v", err)
	}
	// The relay saw the join: the forger is a member (unconfirmed).
	p.waitMetric(t, `relay_joins_total{result="ok"}`, 5)
	time.Sleep(window)
	close(stop)

	mu.Lock()
	b, d := gotBytes, gotDgram
	mu.Unlock()
	t.Logf("victim got %d bytes in %d datagrams in %s from a %d-byte join", b, d, window, len(join))
	if b > len(join) || d > 1 {
		t.Errorf("victim got %d bytes in %d datagrams, more than the %d-byte join", b, d, len(join))
	}
	if d == 0 {
		t.Errorf("victim got no joined: the relay did not take the forged join")
	}
	if window > 3*time.Second+time.Second {
		p.waitMetric(t, `relay_disconnects_total{reason="unconfirmed"}`, 1)
	}
	victim.Close()
	<-done
}

// ipv4UDP builds an IPv4 packet (header checksum and length left to the
// kernel, UDP checksum 0: none) carrying payload from src to dst.
func ipv4UDP(src, dst netip.AddrPort, payload []byte) []byte {
	const ipHdr, udpHdr = 20, 8
	b := make([]byte, ipHdr+udpHdr, ipHdr+udpHdr+len(payload))
	b[0] = 0x45 // version 4, 5 words
	binary.BigEndian.PutUint16(b[2:], uint16(ipHdr+udpHdr+len(payload)))
	b[8] = 64 // TTL
	b[9] = syscall.IPPROTO_UDP
	s, d := src.Addr().As4(), dst.Addr().As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[20:], src.Port())
	binary.BigEndian.PutUint16(b[22:], dst.Port())
	binary.BigEndian.PutUint16(b[24:], uint16(udpHdr+len(payload)))
	return append(b, payload...)
}

// TestUnconfirmedSessionLimits: a source address holds at most
// --udp-max-unconfirmed-per-source unconfirmed sessions (the next join gets
// server_full, no larger than itself); a confirmation frees a place, and
// sessions left unconfirmed end after --udp-confirm-timeout, silently,
// freeing theirs.
//
// Two UDP workers: the limit holds over all of them, whichever worker the
// kernel hashes each source port to.
func TestUnconfirmedSessionLimits(t *testing.T) {
	p := startRelay(t, "--udp-workers", "2", "--udp-max-unconfirmed-per-source", "3", "--udp-confirm-timeout", "500ms")
	joinAs := func(user string) (*net.UDPConn, *wire.Frame, int) {
		uc := rawUDP(t, p.UDP)
		d := wire.AppendJoin(wire.AppendDatagram(nil, 0), "limit", user, nil, wire.UDPJoinPad-wire.TokenSize-len(wire.AppendJoin(nil, "limit", user, nil, 0)))
		f, n := exchange(t, uc, d)
		return uc, f, n
	}
	var first *net.UDPConn
	var token uint64
	for i := 0; i < 3; i++ {
		uc, f, _ := joinAs(fmt.Sprintf("u%d", i))
		if f.Type != wire.TypeJoined {
			t.Fatalf("join %d: %v %s, want joined", i, f.Type, f.Code)
		}
		if i == 0 {
			first, token = uc, f.SessionToken
		}
	}
	if _, f, n := joinAs("u3"); f.Type != wire.TypeError || f.Code != wire.ErrServerFull || n > wire.UDPJoinPad {
		t.Fatalf("4th unconfirmed join: %v %s in %d bytes, want server_full", f.Type, f.Code, n)
	}
	// Confirming one frees its place; the notices held for it (u1 and u2
	// joined) come before the heartbeat's reply.
	f, _ := exchange(t, first, wire.AppendHeartbeat(wire.AppendDatagram(nil, token), 1))
	for f.Type == wire.TypeMemberJoined {
		f, _ = recvDatagram(t, first)
	}
	if f.Type != wire.TypeHeartbeatReply {
		t.Fatalf("confirmation answered with %v", f.Type)
	}
	if _, f, _ := joinAs("u4"); f.Type != wire.TypeJoined {
		t.Fatalf("join after a confirmation: %v %s, want joined", f.Type, f.Code)
	}
	// The three left unconfirmed end within the timeout (and a sweep),
	// and their places are free again.
	p.waitMetric(t, `relay_disconnects_total{reason="unconfirmed"}`, 3)
	for i := 5; i < 8; i++ {
		if _, f, _ := joinAs(fmt.Sprintf("u%d", i)); f.Type != wire.TypeJoined {
			t.Fatalf("join %d after the expiry: %v %s, want joined", i, f.Type, f.Code)
		}
	}
}
