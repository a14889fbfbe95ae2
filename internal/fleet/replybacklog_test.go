package fleet

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestReplyBacklogDrains: an answer the kernel took only in part (the
// server was not reading) goes out as soon as the server reads again, not
// at the client's next scheduled frame, which a client whose script has
// ended never gets before its leave; and the wait does not count as a
// write timeout from the start of the run. The server pings 300 times
// while it reads nothing, each ping answered with a 16 KiB PONG, then
// reads again and notes when the last answer came. Answers that outgrow
// the send backlog end the client as send_backlog_full, as sends do.
func TestReplyBacklogDrains(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backlog int
		why     string // the disconnect expected; "" none
	}{
		{"drains", 16 << 20, ""},                     // holds every answer: the drain is under test
		{"overfills", 64 << 10, "send_backlog_full"}, // the default: the answers outgrow it
	} {
		t.Run(tc.name, func(t *testing.T) {
			const pings = 300
			srv := startDeafServer(t, pings)
			c := baseConfig()
			c.Frames = nil
			c.Capture, c.Profile = lookedUp(t)(writeBigPongCapture(t))
			c.Target = srv.addr
			c.Clients = 1
			c.Duration = 6 * time.Second
			c.WriteTimeout = 2 * time.Second
			c.SendBacklog = tc.backlog
			s, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			pongs, complete, bye, deafFor := srv.result()
			t.Logf("pongs %d of %d, all in %v after the server read again, BYE at %v; fleet pongs %d, disconnects %v", pongs, pings, complete, bye, s.FramesSent["pong"], s.Disconnects)
			if s.LoginsSucceeded != 1 {
				t.Fatalf("logins %d", s.LoginsSucceeded)
			}
			if tc.why != "" {
				if len(s.Disconnects) != 1 || s.Disconnects[tc.why] != 1 {
					t.Errorf("disconnects %v, want one %s", s.Disconnects, tc.why)
				}
				return
			}
			if len(s.Disconnects) != 0 {
				t.Fatalf("disconnects %v", s.Disconnects)
			}
			if pongs != pings || s.FramesSent["pong"] != pings {
				t.Fatalf("the server read %d answers to %d pings; the fleet sent %d", pongs, pings, s.FramesSent["pong"])
			}
			if deafFor < 100*time.Millisecond {
				t.Fatalf("the client's socket never filled (the server was deaf for %v): the test proves nothing", deafFor)
			}
			// Drained by the scheduler's retries (a millisecond apart),
			// not by the leave 6 s into the run; 2 s of margin for a
			// loaded host.
			if complete > 2*time.Second {
				t.Errorf("the last answers arrived %v after the server read again (BYE at %v): the backlog waited for the leave", complete, bye)
			}
		})
	}
}

// deafServer answers HELLO with OK, then pings without reading until a
// PING cannot be written at once (the client's answers filled both
// sockets' buffers) or it sent all; then it reads the answers again.
type deafServer struct {
	addr  string
	pings int
	wg    sync.WaitGroup
	ln    net.Listener

	mu              sync.Mutex
	pongs           int
	readAgain, done time.Time
	bye             time.Time
	deafFor         time.Duration
}

func startDeafServer(t *testing.T, pings int) *deafServer {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			// Small buffers, inherited by the accepted socket: the
			// client's answers fill them soon.
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &deafServer{addr: ln.Addr().String(), pings: pings, ln: ln}
	s.wg.Go(func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		s.serve(conn)
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *deafServer) serve(conn net.Conn) {
	br := bufio.NewReader(conn)
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HELLO") {
		return
	}
	if _, err := conn.Write([]byte("OK\n")); err != nil {
		return
	}
	deaf := time.Now()
	for i := 0; i < s.pings; i++ {
		if _, err := conn.Write([]byte("PING\n")); err != nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
	// Deaf a while longer: the client's last answers meet full buffers.
	time.Sleep(200 * time.Millisecond)
	s.mu.Lock()
	s.readAgain, s.deafFor = time.Now(), time.Since(deaf)
	s.mu.Unlock()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		s.mu.Lock()
		switch {
		case strings.HasPrefix(line, "PONG"):
			if s.pongs++; s.pongs == s.pings {
				s.done = time.Now()
			}
		case strings.HasPrefix(line, "BYE"):
			s.bye = time.Now()
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
}

// result: answers read, how long after reading again the last came (or
// the BYE did, when they never all came), when the BYE came, and how long
// the server read nothing.
func (s *deafServer) result() (pongs int, complete, bye time.Duration, deafFor time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := s.done
	if end.IsZero() {
		end = s.bye
	}
	return s.pongs, end.Sub(s.readAgain), s.bye.Sub(s.readAgain), s.deafFor
}

// writeBigPongCapture writes a session of the deaf server's protocol
// (HELLO, OK, one SAY) and a profile that answers each PING with a
// 16 KiB PONG line.
func writeBigPongCapture(t *testing.T) (pcap, prof string) {
	doc := `name: deaf
transport: tcp
port: 7000
framing: {type: delimiter, delimiter: "\n"}
kinds:
  client: [{name: hello, match: {prefix: HELLO}}, {name: say, match: {prefix: SAY}}, {name: pong, match: {prefix: PONG}}, {name: bye, match: {prefix: BYE}}]
  server: [{name: ok, match: {prefix: OK}}, {name: ping, match: {prefix: PING}}]
login: {send: [hello], success: ok}
reactions: [{on: ping, send: {text: "PONG ` + strings.Repeat("x", 16<<10) + `\n"}, as: pong}]
leave: {text: "BYE\n"}
sends: [say]
identity: {user: {regexp: "HELLO (\\S+)"}}
`
	return writeLineSession(t, "deaf", doc, []lineStep{{0, true, "HELLO alice\n"}, {ms(1), false, "OK\n"}, {ms(10), true, "SAY hello\n"}})
}
