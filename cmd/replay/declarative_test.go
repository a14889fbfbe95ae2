package main

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// acmeServer is a small length-prefixed binary room server written for
// this test (not internal/wire), speaking the made-up protocol of
// examples/profiles/acme-binary.yaml: u16 length of what follows, u8
// type, body. It hands each client a random token in its WELCOME; a CHAT,
// PING or BYE without that token is refused (DENIED 3) and counted.
type acmeServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]*sync.Mutex
	users map[string]bool

	hellos, chats, badToken, delivered atomic.Int64
}

func startAcme(t *testing.T) *acmeServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &acmeServer{ln: ln, conns: map[net.Conn]*sync.Mutex{}, users: map[string]bool{}}
	s.wg.Go(s.accept)
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *acmeServer) addr() string { return s.ln.Addr().String() }

func (s *acmeServer) accept() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = &sync.Mutex{}
		s.mu.Unlock()
		s.wg.Go(func() { s.serve(c) })
	}
}

func acmeMsg(typ byte, body ...[]byte) []byte {
	n := 1
	for _, b := range body {
		n += len(b)
	}
	out := binary.BigEndian.AppendUint16(nil, uint16(n))
	out = append(out, typ)
	for _, b := range body {
		out = append(out, b...)
	}
	return out
}

func (s *acmeServer) write(c net.Conn, b []byte) {
	s.mu.Lock()
	mu := s.conns[c]
	s.mu.Unlock()
	if mu == nil {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	c.Write(b)
}

func (s *acmeServer) serve(c net.Conn) {
	var user string
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		delete(s.users, user)
		s.mu.Unlock()
		c.Close()
	}()
	var token []byte
	hdr := make([]byte, 3)
	for {
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		body := make([]byte, int(binary.BigEndian.Uint16(hdr))-1)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		if hdr[2] == 0x01 { // HELLO user
			s.mu.Lock()
			taken := s.users[string(body)]
			s.users[string(body)] = true
			s.mu.Unlock()
			if taken || token != nil {
				s.write(c, acmeMsg(0x82, []byte{1}))
				return
			}
			user, token = string(body), make([]byte, 8)
			rand.Read(token)
			s.hellos.Add(1)
			s.write(c, acmeMsg(0x81, token))
			continue
		}
		if token == nil || len(body) < 8 || !bytes.Equal(body[:8], token) {
			s.badToken.Add(1)
			s.write(c, acmeMsg(0x82, []byte{3}))
			continue
		}
		switch hdr[2] {
		case 0x02: // CHAT: to everyone
			s.chats.Add(1)
			out := acmeMsg(0x83, body[8:])
			s.mu.Lock()
			all := make([]net.Conn, 0, len(s.conns))
			for o := range s.conns {
				all = append(all, o)
			}
			s.mu.Unlock()
			for _, o := range all {
				s.write(o, out)
				s.delivered.Add(1)
			}
		case 0x04: // BYE
			return
		}
	}
}

// acmeClient is the recorded client: HELLO, the token from WELCOME in
// every later message, 20 chats 50 ms apart, a ping, BYE.
func acmeClient(t *testing.T, addr string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write(acmeMsg(0x01, []byte("alice001")))
	welcome := make([]byte, 11)
	if _, err := io.ReadFull(c, welcome); err != nil || welcome[2] != 0x81 {
		t.Fatalf("welcome %x: %v", welcome, err)
	}
	token := welcome[3:]
	var wg sync.WaitGroup
	wg.Go(func() { io.Copy(io.Discard, c) })
	for i := range 20 {
		c.Write(acmeMsg(0x02, token, fmt.Appendf(nil, "hello %02d", i), make([]byte, 8)))
		time.Sleep(50 * time.Millisecond)
	}
	c.Write(acmeMsg(0x03, token))
	time.Sleep(50 * time.Millisecond)
	c.Write(acmeMsg(0x04, token))
	wg.Wait()
}

// TestDeclarativeProfile records a client of a length-prefixed binary
// server written here and replays it through the example profile file:
// every client logs in with its own id, carries the token the server
// handed it (correlation), and the server's counts match the fleet's.
// The same replay without the correlation is refused by the server.
func TestDeclarativeProfile(t *testing.T) {
	t.Parallel()
	srv := startAcme(t)
	capPath := filepath.Join(t.TempDir(), "acme.pcap")
	p, listen := startRecordProxy(t, srv.addr(), capPath)
	acmeClient(t, listen)
	if err := p.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record proxy: %v", err)
	}
	prof := filepath.Join("..", "..", "examples", "profiles", "acme-binary.yaml")
	out, err := execReplay("profile", "check", prof, "--capture", capPath)
	loop := suggestedLoop.FindStringSubmatch(out)
	if err != nil || !strings.Contains(out, "ok for flow") || !strings.Contains(out, "correlation token") || loop == nil {
		t.Fatalf("profile check: %v (or no loop suggested)\n%s", err, out)
	}
	srv.chats.Store(0)
	srv.delivered.Store(0)
	srv.hellos.Store(0)
	res := replay(t, "--profile", prof, "--capture", capPath, "--target", srv.addr(),
		"--clients", "50", "--senders", "5", "--loop", loop[1], "--login-interval", "5ms", "--after-logins", "3s")
	mustOK(t, res)
	s := res.sum
	if s.LoginsSucceeded != 50 || len(s.LoginsFailed) != 0 || srv.hellos.Load() != 50 {
		t.Fatalf("logins %d failed %v, server hellos %d", s.LoginsSucceeded, s.LoginsFailed, srv.hellos.Load())
	}
	if n := srv.badToken.Load(); n != 0 {
		t.Errorf("the server refused %d messages for a wrong token", n)
	}
	if !within(float64(srv.chats.Load()), float64(s.MessagesSent), 1) || !within(float64(srv.delivered.Load()), float64(s.MessagesReceived), 1) {
		t.Errorf("server chats %d delivered %d; fleet sent %d received %d", srv.chats.Load(), srv.delivered.Load(), s.MessagesSent, s.MessagesReceived)
	}
	t.Logf("fleet sent %d received %d (latency p50 %.2f ms); server chats %d delivered %d bad tokens %d",
		s.MessagesSent, s.MessagesReceived, s.LatencyMS.P50, srv.chats.Load(), srv.delivered.Load(), srv.badToken.Load())
	if s.LatencyMS.P50 <= 0 {
		t.Errorf("no latency measured through the profile's stamp: %+v", s.LatencyMS)
	}

	// Without the correlation every later message carries the recorded
	// token: the server refuses them.
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	noCorr := filepath.Join(t.TempDir(), "no-corr.yaml")
	os.WriteFile(noCorr, b[:bytes.Index(b, []byte("correlation:"))], 0o644)
	srv.badToken.Store(0)
	res = replay(t, "--profile", noCorr, "--capture", capPath, "--target", srv.addr(),
		"--clients", "5", "--senders", "5", "--loop", loop[1], "--login-interval", "5ms", "--after-logins", "1s")
	t.Logf("without the correlation: %d messages refused for their token", srv.badToken.Load())
	if srv.badToken.Load() == 0 || res.sum.LoginsSucceeded == 0 {
		t.Errorf("without the correlation the server refused %d messages (want > 0); logins %d", srv.badToken.Load(), res.sum.LoginsSucceeded)
	}

	// Receive-only clients heartbeat at the profile's heartbeat.interval
	// unless --heartbeat says otherwise (the default, 60 s, would send
	// none in 2 s). Each client is held at least 2 s after its login (6
	// heartbeats due), and sends at most one per interval while the run
	// lasts.
	fast := filepath.Join(t.TempDir(), "fast-heartbeat.yaml")
	os.WriteFile(fast, bytes.Replace(b, []byte("interval: 5s"), []byte("interval: 300ms"), 1), 0o644)
	for _, tc := range []struct {
		args []string
		min  int64 // heartbeats the fleet sent, at least
		each bool  // and at most one per 300 ms of the run, per client
	}{
		{nil, 3 * 3, true}, // 3 clients, 2 s at 300 ms (a loaded machine plays late)
		{[]string{"--heartbeat", "0"}, 0, false},
	} {
		res = replay(t, append([]string{"--profile", fast, "--capture", capPath, "--target", srv.addr(),
			"--clients", "3", "--receive-only", "--login-interval", "5ms", "--after-logins", "2s"}, tc.args...)...)
		mustOK(t, res)
		most := int64(0)
		if tc.each {
			most = 3 * (int64(res.sum.DurationS/0.3) + 1)
		}
		if n := res.sum.FramesSent["heartbeat"]; n < tc.min || n > most {
			t.Errorf("receive-only %v: %d heartbeats in %.2f s, want %d to %d (frames %v)", tc.args, n, res.sum.DurationS, tc.min, most, res.sum.FramesSent)
		}
	}
}
