package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/fleet"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// relayTurnClient is a recorded client's connection to one relay over
// proto (tcp or udp): it joins room as user, casts chats 40 ms apart and
// leaves. Over TCP it then reads until the relay closes; over UDP (the
// protocol's UDP specifics) its join is a padded datagram, its session
// is confirmed by a heartbeat, and every frame goes in a datagram with
// its session's token.
func relayTurnClient(proto, addr, user, room string, chats int) error {
	conn, err := net.Dial(proto, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	udp := proto == "udp"
	join := wire.AppendJoin(nil, room, user, nil, 0)
	if udp {
		join = wire.AppendJoin(wire.AppendDatagram(nil, 0), room, user, nil, 0)
		join = wire.AppendJoin(wire.AppendDatagram(nil, 0), room, user, nil, wire.UDPJoinPad-len(join))
	}
	if _, err := conn.Write(join); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	var f wire.Frame
	for f.Type != wire.TypeJoined {
		n, err := conn.Read(buf)
		if err != nil {
			return fmt.Errorf("join %s: %w", addr, err)
		}
		if !udp { // joined (the frame is not read: a TCP read may hold more)
			break
		}
		if _, err := wire.Decode(buf[:n], 1<<16, &f); err != nil {
			return fmt.Errorf("join %s: %w", addr, err)
		}
	}
	send := func(frame []byte) error {
		if udp {
			frame = append(wire.AppendDatagram(nil, f.SessionToken), frame...)
		}
		_, err := conn.Write(frame)
		return err
	}
	if udp {
		if err := send(wire.AppendHeartbeat(nil, time.Now().UnixNano())); err != nil { // the confirmation
			return err
		}
	}
	for i := range chats {
		time.Sleep(40 * time.Millisecond)
		if err := send(wire.AppendSend(nil, wire.Send{Mode: wire.Broadcast, Payload: fmt.Appendf(nil, "chat %d", i)})); err != nil {
			return err
		}
	}
	if err := send(wire.AppendLeave(nil)); err != nil || udp {
		return err
	}
	conn.(*net.TCPConn).CloseWrite()
	_, err = io.Copy(io.Discard, conn) // until the relay closes
	return err
}

// recordRelayTurns records, with record live on lo, one client of the
// relays over proto (tcp or udp) as user rec-user-01: room hall on the
// relay at first, then room arena on the one at next, 6 casts on each.
func recordRelayTurns(t *testing.T, proto, first, next string) string {
	t.Helper()
	return recordLiveOn(t, proto, first, next, func() {
		for _, s := range []struct{ addr, room string }{{first, "hall"}, {next, "arena"}} {
			if err := relayTurnClient(proto, s.addr, "rec-user-01", s.room, 6); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestTwoServersInTurn: one client played on one relay, then on another
// (a game server handing its player over): recorded live, replayed with
// --flows all and nothing written, each fleet client plays both
// connections in turn as one client, and each relay's own counts equal
// the fleet's for that connection: its joins, the messages it received
// and delivered.
func TestTwoServersInTurn(t *testing.T) {
	t.Parallel()
	a, b := startRelay(t), startRelay(t)
	capPath := recordRelayTurns(t, "tcp", a.TCP, b.TCP)
	// The relays' counts of the recorded client, before the fleet's.
	baseA, baseB := countsOf(t, a), countsOf(t, b)
	const clients = 20
	res := replay(t, "--capture", capPath, "--flows", "all", "--target", a.TCP, "--clients", fmt.Sprint(clients),
		"--login-interval", "5ms", "--login-timeout", "20s", "--after-logins", "1s", "--heartbeat", "0", "--drain-deliveries", "20s")
	mustOK(t, res)
	s := res.sum
	if !strings.Contains(res.stdout+res.stderr, "are one client's connections in turn") {
		t.Fatalf("the notes do not join the flows:\n%s%s", res.stdout, res.stderr)
	}
	if len(s.Flows) != 2 || s.Flows[0].Then || !s.Flows[1].Then {
		t.Fatalf("flows %+v; want the first connection's and the next's\n%s", s.Flows, res.stdout)
	}
	// A client is one login, on its first connection: N of N; its next
	// connection is counted apart.
	n := s.NextConnections
	if s.LoginAttempts != clients || s.LoginsSucceeded != clients || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 ||
		n == nil || n.Tried != clients || n.LoggedIn != clients || len(n.Failed) != 0 {
		t.Fatalf("logins %d of %d attempts, failed %v, disconnects %v, next connections %+v; want %d of %d, and %d of %d next\n%s%s",
			s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, s.Disconnects, n, clients, clients, clients, clients, res.stdout, res.stderr)
	}
	goldenAnswer(t, "turns", answerCard(res.stdout, false)+summaryRows(res.stdout, "clients requested", "login attempts", "logins succeeded", "logins failed", "next connections", "flow "))
	for k, r := range []struct {
		name string
		srv  relayCounts
		fc   fleet.FlowClients
	}{{"first", countsOf(t, a).minus(baseA), s.Flows[0]}, {"next", countsOf(t, b).minus(baseB), s.Flows[1]}} {
		// With no heartbeat, a connection sends its join, its script's
		// sends and one leave.
		if r.srv.joins != clients || r.fc.Logins != clients || r.srv.delivered != float64(r.fc.Received) ||
			r.srv.received != 2*r.srv.joins+float64(r.fc.Sent) || r.fc.Sent == 0 || r.fc.Received == 0 {
			t.Errorf("%s server (flow %d): joined %v, received %v frames, delivered %v; the fleet's connections: %d logins, %d sent (and a join and a leave each), %d received",
				r.name, k, r.srv.joins, r.srv.received, r.srv.delivered, r.fc.Logins, r.fc.Sent, r.fc.Received)
		}
	}
	if s.MessagesSent != s.Flows[0].Sent+s.Flows[1].Sent || s.MessagesReceived != s.Flows[0].Received+s.Flows[1].Received {
		t.Errorf("sent %d, received %d: not the connections' sums %+v", s.MessagesSent, s.MessagesReceived, s.Flows)
	}
	// The connections that stay to the end are judged as any client's;
	// the first connections' deliveries are reported apart (casts that
	// raced a leave reached the server before or after it).
	d := s.Deliveries
	if d.Lost != 0 || d.Received != s.Flows[1].Received ||
		d.LeftInTurn == nil || d.LeftInTurn.Connections != clients || d.LeftInTurn.Received != s.Flows[0].Received {
		t.Errorf("deliveries %+v (left in turn %+v); want none lost of the next connections' %d, and the first connections' %d apart",
			d, d.LeftInTurn, s.Flows[1].Received, s.Flows[0].Received)
	}
	var step *fleet.HTTPStepTimes
	for i := range s.HTTPSteps {
		if s.HTTPSteps[i].Step == fmt.Sprintf("flow%d", s.Flows[1].Flow) {
			step = &s.HTTPSteps[i]
		}
	}
	if step == nil || step.Answered != clients {
		t.Errorf("the next connection's logins are not timed: steps %+v", s.HTTPSteps)
	}
	t.Logf("%d clients: first server sent %d received %d, next server sent %d received %d; deliveries %+v",
		clients, s.Flows[0].Sent, s.Flows[0].Received, s.Flows[1].Sent, s.Flows[1].Received, s.Deliveries)

	// The next server gone: each client's next login fails, counted
	// with its connection's label; the run says so, exits non-zero and
	// ends once every login has its result.
	if err := b.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res = replay(t, "--capture", capPath, "--flows", "all", "--target", a.TCP, "--clients", "5",
		"--login-interval", "5ms", "--login-timeout", "10s", "--after-logins", "500ms", "--heartbeat", "0")
	s = res.sum
	want := fmt.Sprintf("flow%d_connect_refused", s.Flows[len(s.Flows)-1].Flow)
	n = s.NextConnections
	if n == nil || n.Failed[want] != 5 || len(n.Failed) != 1 || n.Tried != 5 || n.LoggedIn != 0 ||
		len(s.LoginsFailed) != 0 || s.LoginsSucceeded != 5 || s.LoginAttempts != 5 || res.code == 0 ||
		!strings.Contains(res.stderr, want) || strings.Contains(res.stderr, "goroutine ") {
		t.Errorf("next server gone: logins %d of %d, failed %v, next connections %+v, exit %d; want 5 of 5 logins and 5 × %s next, a non-zero exit\n%s%s",
			s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, n, res.code, want, res.stdout, res.stderr)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("next server gone: the run took %v", took)
	}
}

// relayCounts are a relay's own counts of its clients.
type relayCounts struct{ joins, received, delivered float64 }

func (r relayCounts) minus(b relayCounts) relayCounts {
	return relayCounts{r.joins - b.joins, r.received - b.received, r.delivered - b.delivered}
}

func countsOf(t *testing.T, r *testproc.Relay) relayCounts {
	return relayCounts{
		joins:     relayMetric(t, r, `relay_joins_total{result="ok"}`),
		received:  relayMetric(t, r, "relay_received_messages_total"),
		delivered: relayMetric(t, r, "relay_delivered_messages_total"),
	}
}

// summaryRows are the rows of a replay's summary table that begin with
// one of keys, in order, the client's address of a flow row and the
// message counts masked (they depend on the timing), the column gap
// one width.
func summaryRows(out string, keys ...string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		for _, k := range keys {
			if strings.HasPrefix(l, k) {
				l = flowClient.ReplaceAllString(l, "(client C)")
				l = flowMsgs.ReplaceAllString(l, "N messages sent, N received")
				b.WriteString(rowGap.ReplaceAllString(strings.TrimRight(l, " "), "  ") + "\n")
				break
			}
		}
	}
	return b.String()
}

var (
	flowClient = regexp.MustCompile(`\(client [^)]*\)`)
	flowMsgs   = regexp.MustCompile(`\d+ messages sent, \d+ received`)
	rowGap     = regexp.MustCompile(`  +`)
)

// TestTwoServersInTurnUDP: TestTwoServersInTurn over UDP, the
// recorded client's session confirmed as the protocol's UDP specifics
// say. A UDP connection's leave ends it at once (no close to drain to):
// deliveries to a first connection that raced its leave are the relay's
// and not the fleet's, so that connection's are at most the relay's;
// the last connections' are equal, as are the joins and the datagrams.
func TestTwoServersInTurnUDP(t *testing.T) {
	t.Parallel()
	a, b := startRelay(t), startRelay(t)
	capPath := recordRelayTurns(t, "udp", a.UDP, b.UDP)
	baseA, baseB := countsOf(t, a), countsOf(t, b)
	const clients = 10
	res := replay(t, "--capture", capPath, "--flows", "all", "--target", a.UDP, "--clients", fmt.Sprint(clients),
		"--login-interval", "5ms", "--login-timeout", "20s", "--after-logins", "1s", "--heartbeat", "0", "--drain-deliveries", "20s")
	mustOK(t, res)
	s, n := res.sum, res.sum.NextConnections
	if len(s.Flows) != 2 || !s.Flows[1].Then || s.LoginsSucceeded != clients || s.LoginAttempts != clients || len(s.LoginsFailed) != 0 ||
		n == nil || n.Tried != clients || n.LoggedIn != clients || len(n.Failed) != 0 {
		t.Fatalf("flows %+v, logins %d of %d, failed %v, next %+v; want %d of %d and %d of %d next\n%s%s",
			s.Flows, s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, n, clients, clients, clients, clients, res.stdout, res.stderr)
	}
	for k, r := range []relayCounts{countsOf(t, a).minus(baseA), countsOf(t, b).minus(baseB)} {
		fc := s.Flows[k]
		t.Logf("flow %d: relay joined %v, received %v frames, delivered %v; fleet: %d logins, sent %d, received %d", fc.Flow, r.joins, r.received, r.delivered, fc.Logins, fc.Sent, fc.Received)
		if r.joins != clients || fc.Logins != clients || fc.Sent == 0 || fc.Received == 0 ||
			(k == 1 && r.delivered != float64(fc.Received)) || float64(fc.Received) > r.delivered {
			t.Errorf("flow %d: relay joined %v, delivered %v; fleet %d logins, received %d", fc.Flow, r.joins, r.delivered, fc.Logins, fc.Received)
		}
	}
	// Every datagram the fleet wrote (joins and their retries, the
	// sessions' confirmations, sends, leaves) is one the relays took,
	// but those their sockets dropped.
	var wrote int64
	for _, n := range s.FramesSent {
		wrote += n
	}
	took := countsOf(t, a).minus(baseA).received + countsOf(t, b).minus(baseB).received
	drops := relayMetric(t, a, "relay_udp_receive_drops_total") + relayMetric(t, b, "relay_udp_receive_drops_total")
	if took+drops != float64(wrote) {
		t.Errorf("the relays took %v datagrams and dropped %v; the fleet wrote %d (%v)", took, drops, wrote, s.FramesSent)
	}
}

// TestFlowsSideBySideRooms: two clients recorded at once on one relay,
// one in room hall and one in arena, are two flows played side by side
// (--flows all: client i plays the (i mod 2)-th). The fleet's clients
// of a flow share that flow's room and never the other's, so what each
// is owed counts only its own room's casts: no loss, the relay's
// deliveries equal the fleet's, and what the fleet expected is what
// arrived (less casts that raced a join).
func TestFlowsSideBySideRooms(t *testing.T) {
	t.Parallel()
	r := startRelay(t)
	capPath := recordLiveOn(t, "tcp", r.TCP, r.TCP, func() {
		errs := make(chan error, 2)
		for _, room := range []string{"hall", "arena"} {
			go func() { errs <- relayTurnClient("tcp", r.TCP, "rec-"+room, room, 20) }()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	base := countsOf(t, r)
	const clients = 20
	res := replay(t, "--capture", capPath, "--flows", "all", "--target", r.TCP, "--clients", fmt.Sprint(clients),
		"--login-interval", "5ms", "--login-timeout", "20s", "--after-logins", "1s", "--heartbeat", "0", "--drain-deliveries", "20s")
	mustOK(t, res)
	s, srv := res.sum, countsOf(t, r).minus(base)
	if !strings.Contains(res.stderr, "replaying flows 0, 1; client i plays the (i mod 2)-th") || len(s.Flows) != 2 {
		t.Fatalf("flows %+v: want the two recorded clients played side by side\n%s%s", s.Flows, res.stdout, res.stderr)
	}
	// What a client is owed is counted from when it read its joined
	// answer, so a cast that raced its join may arrive unowed (a
	// surplus, never a loss); counted with the other flow's room it was
	// twice what arrived.
	d := s.Deliveries
	if s.LoginsSucceeded != clients || srv.joins != clients || d.Lost != 0 || d.Expected > d.Received || d.Expected < d.Received*9/10 ||
		float64(s.MessagesReceived) != srv.delivered || d.Received != s.MessagesReceived || d.Received == 0 {
		t.Errorf("logins %d, the relay's joins %v; deliveries %+v; the fleet received %d, the relay delivered %v\n%s%s",
			s.LoginsSucceeded, srv.joins, d, s.MessagesReceived, srv.delivered, res.stdout, res.stderr)
	}
	t.Logf("flows %+v; deliveries %+v", s.Flows, d)
}
