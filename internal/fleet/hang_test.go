package fleet

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// resetServer speaks the ping server's line protocol (drain_test.go) to
// clients it then resets: from a client's first SAY (it is logged in and
// its shard sends) it writes deliveries with a PING every 100 lines as
// fast as the client takes them, for 300 ms, and resets the connection,
// the client's reader still far behind.
type resetServer struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startResetServer(t *testing.T) *resetServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &resetServer{ln: ln}
	s.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(conn.(*net.TCPConn)) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *resetServer) serve(conn *net.TCPConn) {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HELLO") {
		return
	}
	if _, err := conn.Write([]byte("OK\n")); err != nil {
		return
	}
	for !strings.HasPrefix(line, "SAY") {
		if line, err = br.ReadString('\n'); err != nil {
			return
		}
	}
	// Read (and drop) what the client sends until the reset.
	s.wg.Go(func() {
		for {
			if _, err := br.ReadString('\n'); err != nil {
				return
			}
		}
	})
	chunk := []byte(strings.Repeat("MSG flood\n", 100) + "PING\n")
	conn.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
	for {
		if _, err := conn.Write(chunk); err != nil {
			break
		}
	}
	conn.SetLinger(0) // the close resets
}

// TestServerResetDoesNotHang: a server that resets its clients while
// their readers are still answering its PINGs and their shard is still
// sending ends each client for good, and the run ends. The shard's
// failed write closed the connection holding the client's write lock, and
// a close waits for the reader's read callback, which waited for that lock
// to answer a PING: the shard hung for good, and the run with it.
func TestServerResetDoesNotHang(t *testing.T) {
	srv := startResetServer(t)
	c := baseConfig()
	c.Frames = nil
	c.Capture, c.Profile = lookedUp(t)(writePingCapture(t, "tcp"))
	c.Target = srv.ln.Addr().String()
	c.Clients = 8
	c.Loop = "10ms,410ms"
	c.LoginInterval = time.Millisecond
	c.Duration = 2 * time.Second
	c.DrainTimeout = 100 * time.Millisecond
	c.LeaveTimeout = time.Second
	f, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		s   Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := f.Run(context.Background())
		done <- result{s, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		var gone int64
		for _, n := range r.s.Disconnects {
			gone += n
		}
		if r.s.LoginsSucceeded != int64(c.Clients) || gone != int64(c.Clients) {
			t.Errorf("logins %d, disconnects %v: want every client logged in, then gone", r.s.LoginsSucceeded, r.s.Disconnects)
		}
	case <-time.After(c.Duration + 20*time.Second):
		t.Fatalf("the run did not end %v after its duration of %v", 20*time.Second, c.Duration)
	}
}
