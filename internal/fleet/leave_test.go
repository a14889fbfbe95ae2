package fleet

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/capture"
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
	// lines speaks a line protocol instead: HELLO answered OK, then a
	// PING every 5 ms instead of deliveries; SAY lines are the sends.
	lines bool
	wg    sync.WaitGroup

	mu    sync.Mutex
	conns []net.Conn
	sends int
}

func startPauseRelay(t *testing.T, pauseAt, pauseFor time.Duration, lines bool) *pauseRelay {
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
	r := &pauseRelay{ln: ln, pauseAt: pauseAt, pauseFor: pauseFor, lines: lines}
	r.wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, conn)
			r.mu.Unlock()
			if lines {
				r.wg.Go(func() { r.serveLines(conn) })
			} else {
				r.wg.Go(func() { r.serve(conn) })
			}
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

// serveLines is serve for the line protocol.
func (r *pauseRelay) serveLines(conn net.Conn) {
	defer conn.Close()
	var wmu sync.Mutex
	done := make(chan struct{})
	defer close(done)
	var joinedAt time.Time
	br := bufio.NewReaderSize(conn, 4<<10)
	for {
		if !joinedAt.IsZero() {
			if at := joinedAt.Add(r.pauseAt); time.Now().After(at) && time.Now().Before(at.Add(r.pauseFor)) {
				time.Sleep(time.Until(at.Add(r.pauseFor)))
			}
		}
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		switch {
		case strings.HasPrefix(line, "HELLO") && joinedAt.IsZero():
			joinedAt = time.Now()
			wmu.Lock()
			_, err := conn.Write([]byte("OK\n"))
			wmu.Unlock()
			if err != nil {
				return
			}
			r.wg.Go(func() { r.deliver(conn, &wmu, done) })
		case strings.HasPrefix(line, "SAY"):
			r.mu.Lock()
			r.sends++
			r.mu.Unlock()
		}
	}
}

// deliver writes a delivery (a PING in lines) every 5 ms until done.
func (r *pauseRelay) deliver(conn net.Conn, wmu *sync.Mutex, done <-chan struct{}) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	msg := wire.AppendDeliver(nil, wire.Othercast, "other", false, 0, []byte("pose"))
	if r.lines {
		msg = []byte("PING\n")
	}
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
		lines bool // the line protocol, whose pings a reaction answers
		leave time.Duration
		cut   bool
	}{
		{"bound outlasts the pause", false, 5 * time.Second, false},
		{"bound shorter than the pause", false, 300 * time.Millisecond, true},
		// A ping during the leave is not answered: a write on the shut
		// write side would fail and end the drain early.
		{"pings answered until the leave", true, 5 * time.Second, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startPauseRelay(t, 900*time.Millisecond, 1800*time.Millisecond, tt.lines)
			c := baseConfig()
			if tt.lines {
				c.Frames = nil
				c.Capture, c.Profile = lookedUp(t)(writeLinesCapture(t))
			} else {
				fr := []session.Frame{{Offset: 0, Bytes: wire.AppendJoin(nil, "lobby", "alice", nil, 0)}}
				payload := make([]byte, 1<<10)
				for ts := 10; ts < 410; ts += 10 {
					fr = append(fr, session.Frame{Offset: ms(ts), Bytes: wire.AppendSend(nil, wire.Send{Mode: wire.Othercast, Payload: payload})})
				}
				c.Frames = fr
			}
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
			if s.LoginsSucceeded != 4 || len(s.Disconnects) != 0 || (tt.lines && s.FramesSent["pong"] == 0) {
				t.Fatalf("logins %d disconnects %v frames %v", s.LoginsSucceeded, s.Disconnects, s.FramesSent)
			}
			// The server closes once it read each end: wait for its count
			// (a cut run never gets there).
			deadline := time.Now().Add(5 * time.Second)
			for !tt.cut && r.sent() < int(s.MessagesSent) && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			warned := strings.Contains(strings.Join(s.Warnings, "\n"), "clients closed before the server did")
			t.Logf("fleet sent %d, the server read %d; cut %d clients, %d bytes; frames %v; warnings %q", s.MessagesSent, r.sent(), f.stats.leaveCut.Load(), f.stats.leaveUnsent.Load(), s.FramesSent, s.Warnings)
			// The summary's deliveries carry what the kernel still held
			// (SIOCOUTQ): sends counted as sent the server may not read.
			var text strings.Builder
			if err := s.WriteText(&text); err != nil {
				t.Fatal(err)
			}
			if d := s.Deliveries; d.UnackedAtLeaveBytes != f.stats.leaveUnsent.Load() || d.ClientsUnackedAtLeave != f.stats.leaveCut.Load() ||
				(d.ClientsUnackedAtLeave > 0) != strings.Contains(text.String(), "unacknowledged by the server's TCP at the leave") {
				t.Errorf("deliveries %+v: unacked %d bytes of %d clients, want the leave's %d and %d, in the text too", d, d.UnackedAtLeaveBytes, d.ClientsUnackedAtLeave, f.stats.leaveUnsent.Load(), f.stats.leaveCut.Load())
			}
			if tt.cut {
				if !warned || f.stats.leaveUnsent.Load() == 0 || s.Deliveries.UnackedAtLeaveBytes == 0 {
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

// writeLinesCapture writes a recorded line-protocol session (HELLO, OK,
// then a 1 KiB SAY every 10 ms) and the profile that answers its PINGs.
func writeLinesCapture(t *testing.T) (pcap, prof string) {
	doc := `name: lines
port: 7000
framing: {type: delimiter, delimiter: "\n"}
kinds:
  client: [{name: hello, match: {prefix: HELLO}}, {name: say, match: {prefix: SAY}}, {name: pong, match: {prefix: PONG}}]
  server: [{name: ok, match: {prefix: OK}}, {name: ping, match: {prefix: PING}}]
login: {send: [hello], success: ok}
reactions: [{on: ping, send: {text: "PONG\n"}, as: pong}]
sends: [say]
identity: {user: {regexp: "HELLO (\\S+)"}}
`
	steps := []lineStep{{0, true, "HELLO alice\n"}, {ms(1), false, "OK\n"}}
	say := "SAY " + strings.Repeat("x", 1<<10) + "\n"
	for ts := 10; ts < 410; ts += 10 {
		steps = append(steps, lineStep{ms(ts), true, say})
	}
	return writeLineSession(t, "lines", doc, steps)
}

// lineStep is one recorded message of a line-protocol session: when
// after the first, which way, and its bytes.
type lineStep struct {
	at         time.Duration
	fromClient bool
	b          string
}

// writeLineSession writes a recorded TCP session of steps (the client
// closes 1 ms after the last) as name.pcap and the profile doc as
// name.yaml, in a temporary directory.
func writeLineSession(t *testing.T, name, doc string, steps []lineStep) (pcap, prof string) {
	t.Helper()
	return writeLineFlows(t, name, doc, lineFlow{port: 7000, steps: steps})
}

// lineFlow is one recorded TCP connection of a line-protocol client
// (10.0.0.1:50000+its index) to 10.0.0.2:port, from start after the
// capture's first packet.
type lineFlow struct {
	port  uint16
	start time.Duration
	steps []lineStep
}

// writeLineFlows is writeLineSession of one client's connections, in
// the order given.
func writeLineFlows(t *testing.T, name, doc string, flows ...lineFlow) (pcap, prof string) {
	t.Helper()
	dir := t.TempDir()
	pcap, prof = filepath.Join(dir, name+".pcap"), filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(prof, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := capture.Create(pcap, layers.LinkTypeEthernet, 65535)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for k, fl := range flows {
		at := t0.Add(fl.start)
		conn, err := w.OpenTCP(at, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), uint16(50000+k)), netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), fl.port))
		if err != nil {
			t.Fatal(err)
		}
		var last time.Duration
		for _, st := range fl.steps {
			if err := conn.Data(at.Add(st.at), st.fromClient, []byte(st.b)); err != nil {
				t.Fatal(err)
			}
			last = st.at
		}
		if err := conn.Close(at.Add(last+time.Millisecond), true); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return pcap, prof
}
