package main

// Hostile probes of connections in turn (--flows all): the next server
// of a turn that closes at the login or never answers, Ctrl-C while
// every client waits on its next login, and the recording cut short.

import (
	"bytes"
	"context"
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

	"github.com/gopacket/gopacket/pcapgo"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// What a turnGate does with a connection.
const (
	gateForward = iota // to the relay behind it (while the client is recorded)
	gateClose          // reads the login, then closes
	gateSilent         // reads the login and never answers
)

// turnGate is the next server of a turn as the tests make it misbehave:
// a listener forwarding to a relay, or, in a hostile mode, closing each
// connection once its login arrived or holding it unanswered.
type turnGate struct {
	ln     net.Listener
	addr   string
	next   string // the relay it forwards to
	mode   atomic.Int32
	logins atomic.Int64 // connections whose login arrived in a hostile mode
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool
}

func startTurnGate(t *testing.T, next string) *turnGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &turnGate{ln: ln, addr: ln.Addr().String(), next: next, conns: map[net.Conn]bool{}}
	g.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			g.mu.Lock()
			g.conns[c] = true
			g.mu.Unlock()
			g.wg.Go(func() {
				defer func() {
					g.mu.Lock()
					delete(g.conns, c)
					g.mu.Unlock()
					c.Close()
				}()
				g.serve(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		g.mu.Lock()
		for c := range g.conns {
			c.Close()
		}
		g.mu.Unlock()
		g.wg.Wait()
	})
	return g
}

func (g *turnGate) serve(c net.Conn) {
	c.SetDeadline(time.Now().Add(2 * time.Minute)) // bounds a test that went wrong
	mode := g.mode.Load()
	if mode == gateForward {
		up, err := net.Dial("tcp", g.next)
		if err != nil {
			return
		}
		defer up.Close()
		done := make(chan struct{})
		go func() {
			io.Copy(up, c)
			up.(*net.TCPConn).CloseWrite()
			close(done)
		}()
		io.Copy(c, up)
		c.(*net.TCPConn).CloseWrite()
		<-done
		return
	}
	buf := make([]byte, 4096)
	if _, err := c.Read(buf); err != nil {
		return
	}
	g.logins.Add(1)
	if mode == gateSilent {
		io.Copy(io.Discard, c) // until the client gives up
	}
}

// TestTurnsHostileNextServer: clients playing a relay's recorded session
// on two servers in turn, the next server hostile. Closing at the login,
// or never answering it: every client's first connection logs in, its
// next fails with a reason naming the connection, and the run exits
// non-zero with one line. (Refused: TestTwoServersInTurn.) Ctrl-C while
// every client waits on its next login: the run ends promptly with its
// summary, one line, the counts consistent (each client one login, its
// next connection tried and not reached), no panic.
func TestTurnsHostileNextServer(t *testing.T) {
	t.Parallel()
	a, b := startRelay(t), startRelay(t)
	g := startTurnGate(t, b.TCP)
	capPath := recordRelayTurns(t, "tcp", a.TCP, g.addr)
	args := func(clients int, timeout string) []string {
		return []string{"--capture", capPath, "--flows", "all", "--target", a.TCP, "--clients", fmt.Sprint(clients),
			"--login-interval", "5ms", "--login-timeout", timeout, "--after-logins", "300ms", "--heartbeat", "0"}
	}
	joined := func(t *testing.T, out string) {
		t.Helper()
		if !strings.Contains(out, "are one client's connections in turn") {
			t.Fatalf("the notes do not join the flows:\n%s", out)
		}
	}

	for _, tc := range []struct {
		name    string
		mode    int32
		timeout string
		reason  string
	}{
		{"closes at login", gateClose, "10s", "flow1_closed"},
		{"never answers", gateSilent, "4s", "flow1_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g.mode.Store(tc.mode)
			g.logins.Store(0)
			const clients = 5
			res := replay(t, args(clients, tc.timeout)...)
			joined(t, res.stdout+res.stderr)
			s, n := res.sum, res.sum.NextConnections
			if res.code == 0 || s.LoginsSucceeded != clients || s.LoginAttempts != clients || len(s.LoginsFailed) != 0 ||
				n == nil || n.Tried != clients || n.LoggedIn != 0 || n.Failed[tc.reason] != clients || len(n.Failed) != 1 ||
				g.logins.Load() != clients {
				t.Errorf("exit %d, logins %d of %d, failed %v, next %+v, the gate saw %d logins; want a non-zero exit, %d of %d logins and %d × %s next\n%s%s",
					res.code, s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, n, g.logins.Load(), clients, clients, clients, tc.reason, res.stdout, res.stderr)
			}
			oneLine(t, res.stderr, tc.reason)
			goldenAnswer(t, "turns-"+strings.ReplaceAll(tc.name, " ", "-"), answerCard(res.stdout, false)+
				summaryRows(res.stdout, "logins succeeded", "logins failed", "next connections", "flow ")+lastLine(res.stderr)+"\n")
		})
	}

	t.Run("interrupted", func(t *testing.T) {
		g.mode.Store(gateSilent)
		g.logins.Store(0)
		const clients = 10
		sumPath := filepath.Join(t.TempDir(), "summary.json")
		p := testproc.Start(t, bins["replay"], append([]string{"--metrics", "", "--summary", sumPath}, args(clients, "5m")...)...)
		// Every client's next login is at the silent server: its first
		// connection is over, its next not logged in.
		ctx, cancel := context.WithTimeout(context.Background(), testproc.Patience(t))
		defer cancel()
		for g.logins.Load() < clients && !p.Exited() && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		if g.logins.Load() != clients {
			t.Fatalf("the next server saw %d of %d logins\n%s%s", g.logins.Load(), clients, p.Stdout, p.Stderr)
		}
		began := time.Now()
		if err := p.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(testproc.Patience(t)); err != nil {
			t.Fatalf("replay after Ctrl-C: %v\n%s%s", err, p.Stdout, p.Stderr)
		}
		took := time.Since(began)
		stdout, stderr := p.Stdout.String(), p.Stderr.String()
		s := summaryIfWritten(t, sumPath)
		n, d := s.NextConnections, s.Deliveries
		joined(t, stdout+stderr)
		// Each client: one login, its first connection left (its
		// deliveries apart), its next login tried and stopped by the
		// run's end: not a failure, and not logged in.
		if s.LoginsSucceeded != clients || s.LoginAttempts != clients || len(s.LoginsFailed) != 0 || len(s.Disconnects) != 0 ||
			n == nil || n.Tried != clients || n.LoggedIn != 0 || n.Stopped != clients || len(n.Failed) != 0 ||
			len(s.Flows) != 2 || s.Flows[0].Logins != clients || s.Flows[1].Logins != 0 ||
			d.LeftInTurn == nil || d.LeftInTurn.Connections != clients {
			t.Errorf("logins %d of %d, failed %v, disconnects %v, next %+v, flows %+v, left in turn %+v; want %d of %d, %d next tried and stopped, %d left\n%s%s",
				s.LoginsSucceeded, s.LoginAttempts, s.LoginsFailed, s.Disconnects, n, s.Flows, d.LeftInTurn, clients, clients, clients, clients, stdout, stderr)
		}
		// The run ends at Ctrl-C with what it measured (exit 0, as any
		// run the user ends), its one line the stop's; it does not wait
		// out the 5 minutes the next logins had.
		row := fmt.Sprintf("next connections  %d tried, 0 logged in, %d stopped by the run's end, failed: 0\n", clients, clients)
		if code := p.Cmd.ProcessState.ExitCode(); code != 0 || summaryRows(stdout, "next connections") != row ||
			lastLine(stderr) != "replay: stopping: what ran so far follows (Ctrl-C again to exit now)" || took > time.Minute {
			t.Errorf("exit %d %v after Ctrl-C, summary row %q (want %q), stderr:\n%s", code, took, summaryRows(stdout, "next connections"), row, stderr)
		}
		if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
			t.Errorf("a stack trace:\n%s", stderr)
		}
	})

	// A capture cut short (a recorder killed mid-write) is read up to its
	// last whole packet, the cut named in one warning, as a killed
	// recorder's is (capture.go); one cut before any protocol frame is
	// unusable: one line, non-zero, from each command.
	t.Run("cut capture", func(t *testing.T) {
		g.mode.Store(gateForward)
		raw, err := os.ReadFile(capPath)
		if err != nil {
			t.Fatal(err)
		}
		ng := toPcapng(t, raw)
		dir := t.TempDir()
		for _, tc := range []struct {
			name   string
			b      []byte
			usable bool
		}{
			{"pcap cut in its last record", raw[:len(raw)-5], true},
			{"pcapng cut in its last block", ng[:len(ng)-5], true},
			{"pcap cut in its first record", raw[:24+16+10], false},
			{"pcapng cut in its first packet's block", ng[:firstPacketBlock(t, ng)+20], false},
		} {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(path, tc.b, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range [][]string{{"inspect", path}, {"inspect", "--profile", "reprise", path}} {
				r := runReplay(t, cmd...)
				cut := strings.Count(r.stdout, "the cut tail was skipped")
				if tc.usable && (r.code != 0 || cut != 1 || !strings.Contains(r.stdout, "2 flows with protocol frames")) ||
					!tc.usable && (r.code == 0 || !strings.Contains(lastLine(r.stderr), "unusable capture: no flow carried protocol frames")) ||
					strings.Contains(r.stderr, "goroutine ") {
					t.Errorf("%s: replay %s: exit %d\n%s%s", tc.name, strings.Join(cmd[:len(cmd)-1], " "), r.code, r.stdout, r.stderr)
				}
			}
			r := replay(t, "--capture", path, "--flows", "all", "--target", a.TCP, "--clients", "3", "--login-interval", "5ms",
				"--login-timeout", "10s", "--after-logins", "300ms", "--heartbeat", "0")
			n := r.sum.NextConnections
			if tc.usable && (r.code != 0 || !strings.Contains(r.stderr, "the cut tail was skipped") || !strings.Contains(r.stderr, "are one client's connections in turn") ||
				r.sum.LoginsSucceeded != 3 || n == nil || n.LoggedIn != 3) ||
				!tc.usable && (r.code == 0 || !strings.Contains(lastLine(r.stderr), "unusable capture: no flow carried protocol frames")) ||
				strings.Contains(r.stderr, "goroutine ") {
				t.Errorf("%s: replay --flows all: exit %d, logins %d, next %+v\n%s%s", tc.name, r.code, r.sum.LoginsSucceeded, n, r.stdout, r.stderr)
			}
		}
	})
}

// oneLine fails unless stderr ends in one line naming want, with no
// stack trace.
func oneLine(t *testing.T, stderr, want string) {
	t.Helper()
	if l := lastLine(stderr); !strings.Contains(l, want) || strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
		t.Errorf("stderr's last line %q does not name %s (or a stack trace):\n%s", l, want, stderr)
	}
}

// firstPacketBlock is the offset of the first Enhanced Packet Block of
// the pcapng b (after its section header and interface blocks).
func firstPacketBlock(t *testing.T, b []byte) int {
	t.Helper()
	for off := 0; off+12 <= len(b); {
		typ, size := binary.LittleEndian.Uint32(b[off:]), int(binary.LittleEndian.Uint32(b[off+4:]))
		if typ == 6 {
			return off
		}
		if size < 12 {
			break
		}
		off += size
	}
	t.Fatal("no packet block in the pcapng")
	return 0
}

// toPcapng is the classic pcap b written again as pcapng.
func toPcapng(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := pcapgo.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	w, err := pcapgo.NewNgWriter(&out, r.LinkType())
	if err != nil {
		t.Fatal(err)
	}
	for {
		data, ci, err := r.ReadPacketData()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := w.WritePacket(ci, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
