package fleet

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket/layers"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
)

// pingServer speaks a line protocol over TCP or UDP (a line per
// datagram): HELLO is answered OK, then the client gets a PING every 5 ms
// until it says BYE (or closes), as a server that keeps every connection
// alive does; each SAY comes back as a MSG (the delivery) 20 ms later,
// unless the client said BYE by then: a server that drops a leaving
// member's deliveries. With flood it also sends a MSG every 5 ms of its
// own, deliveries that never stop.
type pingServer struct {
	flood bool
	wg    sync.WaitGroup
	done  chan struct{}

	mu                     sync.Mutex
	says, delivered, pongs int
	udp                    *net.UDPConn
	udpPeers               map[string]*pingPeer
	addr                   string
}

// pingPeer is one client as the server knows it; its writes go through
// write under mu.
type pingPeer struct {
	mu    sync.Mutex
	bye   bool
	write func([]byte) error
}

// send writes b unless the client said BYE; delivery counts it.
func (s *pingServer) send(p *pingPeer, b []byte, delivery bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bye || p.write(b) != nil {
		return false
	}
	if delivery {
		s.mu.Lock()
		s.delivered++
		s.mu.Unlock()
	}
	return true
}

// line handles one client line; false ends a TCP connection.
func (s *pingServer) line(p *pingPeer, line string) bool {
	switch {
	case strings.HasPrefix(line, "HELLO"):
		if !s.send(p, []byte("OK\n"), false) {
			return false
		}
		s.wg.Go(func() { s.ping(p) })
	case strings.HasPrefix(line, "SAY"):
		s.mu.Lock()
		s.says++
		s.mu.Unlock()
		msg := []byte("MSG" + strings.TrimSuffix(line[3:], "\n") + "\n")
		s.wg.Go(func() {
			select {
			case <-s.done:
			case <-time.After(20 * time.Millisecond):
				s.send(p, msg, true)
			}
		})
	case strings.HasPrefix(line, "PONG"):
		s.mu.Lock()
		s.pongs++
		s.mu.Unlock()
	case strings.HasPrefix(line, "BYE"):
		p.mu.Lock()
		p.bye = true
		p.mu.Unlock()
	}
	return true
}

// ping writes a PING (and with flood a MSG) every 5 ms until the client
// leaves.
func (s *pingServer) ping(p *pingPeer) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		if !s.send(p, []byte("PING\n"), false) || (s.flood && !s.send(p, []byte("MSG flood\n"), true)) {
			return
		}
	}
}

func startPingServer(t *testing.T, udp, flood bool) *pingServer {
	t.Helper()
	s := &pingServer{flood: flood, done: make(chan struct{}), udpPeers: map[string]*pingPeer{}}
	var closer func()
	if udp {
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		s.udp, s.addr, closer = conn, conn.LocalAddr().String(), func() { conn.Close() }
		s.wg.Go(s.serveUDP)
	} else {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s.addr = ln.Addr().String()
		var cmu sync.Mutex
		var conns []net.Conn
		closer = func() {
			ln.Close()
			cmu.Lock()
			for _, c := range conns {
				c.Close()
			}
			cmu.Unlock()
		}
		s.wg.Go(func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				cmu.Lock()
				conns = append(conns, conn)
				cmu.Unlock()
				s.wg.Go(func() { s.serveTCP(conn) })
			}
		})
	}
	t.Cleanup(func() {
		close(s.done)
		closer()
		s.wg.Wait()
	})
	return s
}

// serveTCP reads a connection's lines until the client closes, then
// closes (the fleet's leave reads until it does).
func (s *pingServer) serveTCP(conn net.Conn) {
	defer conn.Close()
	p := &pingPeer{write: func(b []byte) error {
		// Long: a fleet the host starves reads late, and a server that
		// gave up on it after 1 s delivered 304 of 790 at load 20 (the
		// cleanup's close ends a write that would wait for ever).
		conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
		_, err := conn.Write(b)
		return err
	}}
	defer func() {
		p.mu.Lock()
		p.bye = true // closed: nothing more is written, or counted
		p.mu.Unlock()
	}()
	br := bufio.NewReader(conn)
	for {
		line, err := br.ReadString('\n')
		if err != nil || !s.line(p, line) {
			return
		}
	}
}

func (s *pingServer) serveUDP() {
	buf := make([]byte, 2048)
	for {
		n, from, err := s.udp.ReadFromUDP(buf)
		if err != nil {
			return
		}
		p := s.udpPeers[from.String()]
		if p == nil {
			p = &pingPeer{write: func(b []byte) error {
				_, err := s.udp.WriteToUDP(b, from)
				return err
			}}
			s.udpPeers[from.String()] = p
		}
		s.line(p, string(buf[:n]))
	}
}

func (s *pingServer) counts() (says, delivered, pongs int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.says, s.delivered, s.pongs
}

// lookedUp passes a capture on and looks its profile file up, as the
// command does with --profile at its edge.
func lookedUp(t *testing.T) func(pcap, prof string) (string, *profile.Profile) {
	return func(pcap, prof string) (string, *profile.Profile) {
		t.Helper()
		p, err := profile.Lookup(prof)
		if err != nil {
			t.Fatalf("profile %s: %v", prof, err)
		}
		return pcap, p
	}
}

// writePingCapture writes a recorded session of the ping server's line
// protocol (HELLO, OK, then a SAY every 10 ms) over tcp or udp, and the
// profile that answers its PINGs and counts its MSGs as deliveries.
func writePingCapture(t *testing.T, transport string) (pcap, prof string) {
	t.Helper()
	dir := t.TempDir()
	pcap, prof = filepath.Join(dir, "ping.pcap"), filepath.Join(dir, "ping.yaml")
	doc := `name: pings
transport: ` + transport + `
port: 7000
framing: {type: delimiter, delimiter: "\n"}
kinds:
  client: [{name: hello, match: {prefix: HELLO}}, {name: say, match: {prefix: SAY}}, {name: pong, match: {prefix: PONG}}, {name: bye, match: {prefix: BYE}}]
  server: [{name: ok, match: {prefix: OK}}, {name: ping, match: {prefix: PING}}, {name: msg, match: {prefix: MSG}}]
login: {send: [hello], success: ok}
reactions: [{on: ping, send: {text: "PONG\n"}, as: pong}]
expects: [{on: ping, answer: pong}]
leave: {text: "BYE\n"}
sends: [say]
delivery: [msg]
identity: {user: {regexp: "HELLO (\\S+)"}}
`
	if err := os.WriteFile(prof, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := capture.Create(pcap, layers.LinkTypeEthernet, 65535)
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cli, srv := netip.MustParseAddrPort("10.0.0.1:50000"), netip.MustParseAddrPort("10.0.0.2:7000")
	data := func(at time.Time, fromClient bool, b string) error {
		if fromClient {
			return w.UDP(at, cli, srv, []byte(b))
		}
		return w.UDP(at, srv, cli, []byte(b))
	}
	var conn *capture.TCPConn
	if transport == "tcp" {
		conn, err = w.OpenTCP(t0, cli, srv)
		must(err)
		data = func(at time.Time, fromClient bool, b string) error { return conn.Data(at, fromClient, []byte(b)) }
	}
	must(data(t0, true, "HELLO alice\n"))
	must(data(t0.Add(time.Millisecond), false, "OK\n"))
	at := t0
	for ts := 10; ts < 410; ts += 10 {
		at = t0.Add(ms(ts))
		must(data(at, true, fmt.Sprintf("SAY hello %d\n", ts))) // distinct: equal datagrams read as copies
	}
	if conn != nil {
		must(conn.Close(at.Add(time.Millisecond), true))
	}
	must(w.Close())
	return pcap, prof
}

// TestDrainCountsDeliveriesOnly: the end-of-run drain waits for the
// deliveries in flight, and for nothing else. Against a server that pings
// every client every 5 ms until it leaves, the run ends about the drain's
// quiet period after its duration, not at the drain's bound (it waited
// for a quiet period without any byte, which never came), and every
// send's delivery, due 20 ms after it and dropped once the client says
// BYE, arrived and was counted. A server whose deliveries never stop
// holds the drain to its bound, and the run says so.
func TestDrainCountsDeliveriesOnly(t *testing.T) {
	for _, transport := range []string{"tcp", "udp"} {
		for _, flood := range []bool{false, true} {
			name := transport + "/pings"
			if flood {
				name = transport + "/deliveries never stop"
			}
			t.Run(name, func(t *testing.T) {
				srv := startPingServer(t, transport == "udp", flood)
				c := baseConfig()
				c.Frames = nil
				c.Capture, c.Profile = lookedUp(t)(writePingCapture(t, transport))
				c.Target = srv.addr
				c.Clients = 4
				c.Loop = "10ms,410ms"
				c.LoginInterval = time.Millisecond
				c.Duration = time.Second
				c.DrainTimeout = 20 * time.Second
				if flood {
					c.DrainTimeout = 300 * time.Millisecond
				}
				c.LeaveTimeout = 5 * time.Second
				if transport == "udp" {
					// A UDP write's deadline lapses WriteTimeout after the
					// shard's last write: the pings' answers during the
					// drain need their own.
					c.WriteTimeout = 100 * time.Millisecond
				}
				f, err := New(c)
				if err != nil {
					t.Fatal(err)
				}
				drops0 := udpInErrors(t)
				began := time.Now()
				s, err := f.Run(context.Background())
				took := time.Since(began)
				if err != nil {
					t.Fatal(err)
				}
				says, delivered, pongs := srv.counts()
				drops := udpInErrors(t) - drops0
				warned := strings.Contains(strings.Join(s.Warnings, "\n"), "ended the wait")
				t.Logf("took %v (duration %v, drain bound %v); fleet sent %d received %d, pongs %d; the server read %d says and %d pongs, delivered %d; warnings %q; join retries %d, loops %d, lag p99 %v",
					took.Round(time.Millisecond), c.Duration, c.DrainTimeout, s.MessagesSent, s.MessagesReceived, s.FramesSent["pong"], says, pongs, delivered, s.Warnings, s.UDPJoinRetries, s.LoopsCompleted, s.ScheduleLagMS.P99)
				// A UDP write times out only when its goroutine waited past
				// its deadline for a CPU (the short WriteTimeout above): a
				// starved fleet, which it must say it was.
				starved := s.Saturation["fleet"]+s.Saturation["host_busy"] > 0
				cut := int64(0)
				for reason, n := range s.Disconnects {
					if reason != "write_timeout" || transport != "udp" || !starved {
						t.Errorf("disconnect %s=%d (saturation %v): want none, or a UDP write_timeout on a starved host", reason, n, s.Saturation)
					}
					cut += n
				}
				if s.LoginsSucceeded != 4 || s.FramesSent["pong"] == 0 || s.MessagesSent == 0 {
					t.Fatalf("logins %d disconnects %v frames %v", s.LoginsSucceeded, s.Disconnects, s.FramesSent)
				}
				// Over TCP the pollers read the logged-in clients and
				// answer the pings (poll.go); the leave's drain is their
				// goroutines'.
				if handed := pollerHanded(f); transport == "tcp" && handed != 4 {
					t.Errorf("%d clients handed to the pollers, want 4", handed)
				}
				if flood {
					// Held to the bound, and said so.
					if !warned || took < c.Duration+c.DrainTimeout {
						t.Errorf("deliveries that never stop: took %v, warned %v; want the drain's bound reached and a warning", took, warned)
					}
					return
				}
				// The pings go on until the leave: a drain that waited for
				// no byte at all would reach its bound of 20 s, and say so.
				if warned {
					t.Errorf("the run took %v with a duration of %v and a drain bound of %v, and warned: the drain waited for the pings to stop", took, c.Duration, c.DrainTimeout)
				}
				// Every send's delivery came before the leave, and was
				// counted. Over UDP a datagram a starved reader left in a
				// full receive buffer is the kernel's to drop (620 of 673
				// at load 20): each one missing must be a drop it counted.
				missing := s.MessagesSent - int64(says) + int64(delivered) - s.MessagesReceived
				exact := missing == 0 || (transport == "udp" && missing <= drops)
				// A client cut for its write (a starved host, judged above)
				// receives nothing more: no count to hold it to.
				if cut > 0 {
					t.Logf("%d clients cut on a starved host: the counts are not judged", cut)
				} else if int64(says) > s.MessagesSent || delivered != says || int64(delivered) < s.MessagesReceived || !exact {
					t.Errorf("the server read %d sends and delivered %d; the fleet sent %d and received %d; the kernel dropped %d UDP datagrams meanwhile", says, delivered, s.MessagesSent, s.MessagesReceived, drops)
				}
			})
		}
	}
}

// TestSendersNeedSends: senders on a flow whose replayed part holds no
// message the profile counts as a send (here it counts only pongs, which
// a reaction makes) are refused at New: the run would measure nothing.
// Receive-only clients are not.
func TestSendersNeedSends(t *testing.T) {
	c := baseConfig()
	c.Frames = nil
	var prof string
	c.Capture, prof = writePingCapture(t, "tcp")
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prof, bytes.Replace(b, []byte("sends: [say]"), []byte("sends: [pong]"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Capture, c.Profile = lookedUp(t)(c.Capture, prof)
	c.Target, c.Clients = "127.0.0.1:1", 2
	_, err = New(c)
	if err == nil || !strings.Contains(err.Error(), "--senders: the replayed part of the flow") || !strings.Contains(err.Error(), "--receive-only") {
		t.Fatalf("senders with nothing to send: %v", err)
	}
	c.ReceiveOnly = true
	f, err := New(c)
	if err != nil {
		t.Fatalf("receive-only: %v", err)
	}
	f.Close()
}

// udpInErrors is the host's count of datagrams the kernel dropped on
// receipt: UDP's InErrors (a full receive buffer among them) from
// /proc/net/snmp, and the packets a CPU's backlog had no room for
// (/proc/net/softnet_stat's second column; 43 datagrams missing at load
// 20 where InErrors said 29). On loopback the only ways one is lost.
func udpInErrors(t testing.TB) int64 {
	t.Helper()
	return snmpUDPInErrors(t) + softnetDropped(t)
}

// softnetDropped sums /proc/net/softnet_stat's dropped column (hex) over
// the CPUs.
func softnetDropped(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/softnet_stat")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		d, err := strconv.ParseInt(f[1], 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		n += d
	}
	return n
}

// snmpUDPInErrors is /proc/net/snmp's Udp InErrors.
func snmpUDPInErrors(t testing.TB) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	var head []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if head == nil {
			head = f
			continue
		}
		for i, name := range head {
			if name == "InErrors" && i < len(f) {
				n, err := strconv.ParseInt(f[i], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
	}
	t.Fatal("/proc/net/snmp has no Udp InErrors")
	return 0
}
