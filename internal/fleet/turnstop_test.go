package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/testproc"
)

// TestStopBetweenTurns: the run ended (replay's Ctrl-C cancels Run's
// context) while every client has left its first connection and waits
// on its next login, at a server that never answers. Run returns at
// once, not at the 5 minute login timeout; each client is one login, its
// first connection left in turn, its next tried and stopped by the
// run's end (not failed); and no goroutine is left (TestMain's leak
// check fails a passing package that leaves one).
func TestStopBetweenTurns(t *testing.T) {
	first := lineServer(t, func(c net.Conn, in *bufio.Reader) {
		for {
			l, err := in.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(l, "HELLO ") {
				io.WriteString(c, "OK\n")
			}
		}
	})
	var waiting atomic.Int64
	next := lineServer(t, func(c net.Conn, in *bufio.Reader) {
		if _, err := in.ReadString('\n'); err != nil {
			return
		}
		waiting.Add(1)
		io.Copy(io.Discard, in) // never answers, until the client goes
	})
	const clients = 5
	c := baseConfig()
	c.Frames = nil
	c.Capture, c.Profile = lookedUp(t)(writeTurnsCapture(t, next.port))
	c.Flows = profile.FlowSet{All: true}
	c.Target = first.addr
	c.Clients = clients
	c.LoginTimeout = 5 * time.Minute
	c.Heartbeat = 0
	f, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ran struct {
		s   Summary
		err error
	}
	done := make(chan ran, 1)
	go func() {
		s, err := f.Run(ctx)
		done <- ran{s, err}
	}()
	for end := time.Now().Add(time.Minute); waiting.Load() < clients; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			cancel()
			r := <-done
			t.Fatalf("%d of %d next logins reached the silent server: %v %+v", waiting.Load(), clients, r.err, r.s.NextConnections)
		}
	}
	cancel()
	var r ran
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not return a minute after its context ended")
	}
	s, n := r.s, r.s.NextConnections
	if r.err != nil || s.LoginsSucceeded != clients || s.LoginAttempts != clients || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 ||
		n == nil || n.Tried != clients || n.LoggedIn != 0 || n.Stopped != clients || len(n.Failed) != 0 ||
		s.Deliveries.LeftInTurn == nil || s.Deliveries.LeftInTurn.Connections != clients {
		t.Errorf("err %v, logins %d of %d, failed %v, disconnects %v, next %+v, left in turn %+v; want %d of %d and %d next tried, all stopped",
			r.err, s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, s.Disconnects, n, s.Deliveries.LeftInTurn, clients, clients, clients)
	}
}

// testServer is a TCP server of the test's on 127.0.0.1.
type testServer struct {
	addr string
	port uint16
}

// lineServer serves each connection with serve until the test ends.
func lineServer(t *testing.T, serve func(net.Conn, *bufio.Reader)) testServer {
	t.Helper()
	addr := testproc.ServeTCP(t, func(c net.Conn) { serve(c, bufio.NewReader(c)) })
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return testServer{addr, ap.Port()}
}

// writeTurnsCapture writes one client's line-protocol session on two
// servers in turn (user alice01: HELLO, OK, five SAYs, a close on
// 10.0.0.2:7000, then the same 200 ms on, on 10.0.0.2:nextPort), and
// its profile.
func writeTurnsCapture(t *testing.T, nextPort uint16) (pcap, prof string) {
	t.Helper()
	doc := `name: lines
framing: {type: delimiter, delimiter: "\n"}
kinds:
  client: [{name: hello, match: {prefix: HELLO}}, {name: say, match: {prefix: SAY}}]
  server: [{name: ok, match: {prefix: OK}}]
login: {send: [hello], success: ok}
sends: [say]
identity: {user: {regexp: "HELLO (\\S+)"}}
`
	steps := []lineStep{{0, true, "HELLO alice01\n"}, {ms(1), false, "OK\n"}}
	for i := range 5 {
		steps = append(steps, lineStep{ms(10 + 20*i), true, fmt.Sprintf("SAY %d\n", i)})
	}
	return writeLineFlows(t, "turns", doc, lineFlow{7000, 0, steps}, lineFlow{nextPort, 200 * time.Millisecond, steps})
}
