package fleet

import (
	"context"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/session"
	"github.com/reprise-harness/reprise/internal/wire"
)

// pauseRelay is a relay stand-in that answers joins, sends each client a
// delivery every 5 ms for as long as the connection lasts, counts the
// sends it reads, and stops reading each connection for pauseFor from
// pauseAt after its join: a server too busy to read at the end of a run
// while it still writes (a starved socket.io app broadcasting). Its
// receive buffer is small, so what it does not read waits in the
// client's send queue. It closes a connection once it read its end.
type pauseRelay struct {
	ln                net.Listener
	pauseAt, pauseFor time.Duration
	wg                sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
	sends int
}

func startPauseRelay(t *testing.T, pauseAt, pauseFor time.Duration) *pauseRelay {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &pauseRelay{ln: ln, pauseAt: pauseAt, pauseFor: pauseFor}
	r.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, conn)
			r.mu.Unlock()
			r.wg.Go(func() { r.serve(conn) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *pauseRelay) serve(conn net.Conn) {
	defer conn.Close()
	var p wire.Parser
	var wmu sync.Mutex
	done := make(chan struct{})
	defer close(done)
	var joinedAt time.Time
	buf := make([]byte, 4<<10)
	for {
		if !joinedAt.IsZero() {
			if at := joinedAt.Add(r.pauseAt); time.Now().After(at) && time.Now().Before(at.Add(r.pauseFor)) {
				time.Sleep(time.Until(at.Add(r.pauseFor)))
			}
		}
		n, err := conn.Read(buf)
		ferr := p.Feed(buf[:n], func(f *wire.Frame) error {
			switch f.Type {
			case wire.TypeJoin:
				joinedAt = time.Now()
				user := string(f.User)
				wmu.Lock()
				_, err := conn.Write(wire.AppendJoined(nil, 0, user, []string{user}))
				wmu.Unlock()
				r.wg.Go(func() { r.deliver(conn, &wmu, done) })
				return err
			case wire.TypeSend:
				r.mu.Lock()
				r.sends++
				r.mu.Unlock()
			}
			return nil
		})
		if ferr != nil || err != nil {
			return
		}
	}
}

// deliver writes a delivery every 5 ms until done.
func (r *pauseRelay) deliver(conn net.Conn, wmu *sync.Mutex, done <-chan struct{}) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	msg := wire.AppendDeliver(nil, wire.Othercast, "other", false, 0, []byte("pose"))
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		wmu.Lock()
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := conn.Write(msg)
		wmu.Unlock()
		if err != nil {
			return
		}
	}
}

func (r *pauseRelay) sent() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sends
}

// TestLeaveWaitsForTheServer: every send the fleet counts reaches a
// server that stops reading near the end of the run while it keeps
// writing, when the leave's bound outlasts the pause: each client
// half-closes and reads until the server, having read everything, closes.
// A close before that (the old fixed 1 s leave) answers the server's next
// bytes with a reset, which drops the sends still in the client's send
// queue. With a bound shorter than the pause the fleet says so.
func TestLeaveWaitsForTheServer(t *testing.T) {
	tests := []struct {
		name  string
		leave time.Duration
		cut   bool
	}{
		{"bound outlasts the pause", 5 * time.Second, false},
		{"bound shorter than the pause", 300 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startPauseRelay(t, 900*time.Millisecond, 1800*time.Millisecond)
			c := baseConfig()
			fr := []session.Frame{{Offset: 0, Bytes: wire.AppendJoin(nil, "lobby", "alice", nil, 0)}}
			payload := make([]byte, 1<<10)
			for ts := 10; ts < 410; ts += 10 {
				fr = append(fr, session.Frame{Offset: ms(ts), Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, Payload: payload})})
			}
			c.Frames = fr
			c.Target = r.ln.Addr().String()
			c.Clients = 4
			c.Loop = "10ms,410ms"
			c.LoginInterval = time.Millisecond
			c.Duration = 1200 * time.Millisecond
			c.DrainTimeout = 100 * time.Millisecond
			c.WriteTimeout = 10 * time.Second
			c.LeaveTimeout = tt.leave
			f, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			s, err := f.Run(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if s.LoginsSucceeded != 4 || len(s.Disconnects) != 0 {
				t.Fatalf("logins %d disconnects %v", s.LoginsSucceeded, s.Disconnects)
			}
			// The server closes once it read each end: wait for its count
			// (a cut run never gets there).
			deadline := time.Now().Add(5 * time.Second)
			for !tt.cut && r.sent() < int(s.MessagesSent) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			warned := strings.Contains(strings.Join(s.Warnings, "\n"), "closed at the leave's bound")
			t.Logf("fleet sent %d, the server read %d; cut %d clients, %d bytes; warnings %q", s.MessagesSent, r.sent(), f.stats.leaveCut.Load(), f.stats.leaveUnsent.Load(), s.Warnings)
			if tt.cut {
				if !warned || f.stats.leaveUnsent.Load() == 0 {
					t.Errorf("a leave cut short by its bound was not reported")
				}
				return
			}
			if got := r.sent(); int64(got) != s.MessagesSent || warned {
				t.Errorf("the server read %d sends, the fleet counted %d (warned %v)", got, s.MessagesSent, warned)
			}
		})
	}
}
