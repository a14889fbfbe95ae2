package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/wire"
)

// dropProxy forwards one UDP client's datagrams to the relay and back,
// dropping the ones whose 1-based index (per direction) is listed.
type dropProxy struct {
	ln, up   *net.UDPConn
	toRelay  map[int]bool
	toClient map[int]bool
	wg       sync.WaitGroup
}

func startDropProxy(t *testing.T, relay *net.UDPAddr, toRelay, toClient []int) *dropProxy {
	t.Helper()
	ln, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	up, err := net.DialUDP("udp", nil, relay)
	if err != nil {
		t.Fatal(err)
	}
	set := func(ix []int) map[int]bool {
		m := map[int]bool{}
		for _, i := range ix {
			m[i] = true
		}
		return m
	}
	p := &dropProxy{ln: ln, up: up, toRelay: set(toRelay), toClient: set(toClient)}
	var mu sync.Mutex
	var client *net.UDPAddr
	p.wg.Go(func() {
		buf := make([]byte, 64<<10)
		for k := 1; ; k++ {
			n, from, err := ln.ReadFromUDP(buf)
			if err != nil {
				return
			}
			mu.Lock()
			client = from
			mu.Unlock()
			if !p.toRelay[k] {
				up.Write(buf[:n])
			}
		}
	})
	p.wg.Go(func() {
		buf := make([]byte, 64<<10)
		for k := 1; ; k++ {
			n, err := up.Read(buf)
			if err != nil {
				return
			}
			mu.Lock()
			to := client
			mu.Unlock()
			if !p.toClient[k] && to != nil {
				ln.WriteToUDP(buf[:n], to)
			}
		}
	})
	t.Cleanup(func() { ln.Close(); up.Close(); p.wg.Wait() })
	return p
}

// TestUDPJoinRetries: the first join, the first joined and the first
// confirming heartbeat are all lost; Join sends each again and the session
// works.
func TestUDPJoinRetries(t *testing.T) {
	s := startRelay(t)
	p := startDropProxy(t, s.UDPAddr().(*net.UDPAddr), []int{1, 4}, []int{1})
	c, err := client.DialUDP(context.Background(), p.ln.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	j, err := c.Join("lobby", "alice", nil)
	if err != nil {
		t.Fatalf("join through lost datagrams: %v", err)
	}
	if took := time.Since(start); took < 3*200*time.Millisecond {
		t.Errorf("joined in %v: three losses should have cost three waits", took)
	}
	if j.Token == 0 || len(j.Members) != 1 || j.Members[0] != "alice" {
		t.Errorf("joined %+v", j)
	}
	if err := c.Send(wire.Send{Mode: wire.Broadcast, Payload: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	f, err := c.RecvType(wire.TypeDeliver)
	if err != nil || string(f.Payload) != "hi" {
		t.Fatalf("deliver after the retried join: %v, %v", f, err)
	}
}
