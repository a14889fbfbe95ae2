package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

var updateBroken = flag.Bool("update-broken", false, "rewrite testdata/broken/*.golden from the runs")

// hostile is a small server of the test's own that lets every client in
// (a joined frame after the join) and then misbehaves in one way.
type hostile struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

// after says what a hostile TCP server does once it sent joined.
type after func(c net.Conn)

// startHostile serves TCP clients: it reads the join (never, when
// login is false: the login is left unanswered), answers joined and hands
// the connection to then.
func startHostile(t *testing.T, login bool, then after) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &hostile{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		h.mu.Lock()
		for _, c := range h.conns {
			c.Close()
		}
		h.mu.Unlock()
		h.wg.Wait()
	})
	h.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			h.wg.Go(func() {
				if !login {
					io.Copy(io.Discard, c)
					return
				}
				var p wire.Parser
				joined := false
				buf := make([]byte, 4096)
				for !joined {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					p.Feed(buf[:n], func(fr *wire.Frame) error {
						if fr.Type == wire.TypeJoin {
							joined = true
						}
						return nil
					})
				}
				if _, err := c.Write(wire.AppendJoined(nil, 1, "", nil)); err != nil {
					return
				}
				then(c)
			})
		}
	})
	return ln.Addr().String()
}

// afterFirstSend answers the client's first send with b: the client
// consumed joined in a read of its own by then (it sends only once logged
// in), so the bytes quoted as the protocol error are b's.
func afterFirstSend(b []byte) after {
	return func(c net.Conn) {
		if _, err := c.Read(make([]byte, 4096)); err != nil {
			return
		}
		c.Write(b)
		io.Copy(io.Discard, c)
	}
}

// startUDPGarbage answers every join datagram with joined and then sends
// that client datagrams that are no frame.
func startUDPGarbage(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	wg.Go(func() {
		buf := make([]byte, 64<<10)
		garbage := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 8)
		for {
			n, from, err := pc.ReadFromUDP(buf)
			if err != nil {
				return
			}
			var fr wire.Frame
			d := buf[:n]
			if len(d) < wire.TokenSize {
				continue
			}
			if _, err := wire.Decode(d[wire.TokenSize:], wire.DefaultMaxFrame, &fr); err != nil || fr.Type != wire.TypeJoin {
				// Anything after the join: answer with garbage.
				pc.WriteToUDP(garbage, from)
				continue
			}
			pc.WriteToUDP(wire.AppendJoined(nil, 7, "", nil), from)
		}
	})
	return pc.LocalAddr().String()
}

// TestBrokenServersFail: runs that logged in and then found the server
// broken exit 1 with one line naming the cause, and their summaries say
// what was owed and what arrived; the one line and the summary's figures
// that do not depend on timing are golden (testdata/broken; -update-broken
// rewrites them). The servers are the test's own, each broken one way, and
// the real relay with a room rate limit far under the offered rate.
func TestBrokenServersFail(t *testing.T) {
	t.Parallel()
	path := writeCapture(t, castScript())
	// A loop of othercasts, so every client is owed deliveries.
	base := []string{"--capture", path, "--clients", "4", "--login-interval", "10ms", "--heartbeat", "0", "--loop", "200ms,300ms"}
	limited := startRelay(t, "--room-rate-messages", "5", "--room-rate-messages-burst", "5")
	cases := []struct {
		name   string
		target string
		args   []string
		// vary: numbers in the summary depend on timing; they are
		// masked, and in the line too when line is set. cut: the
		// clients were cut at a moment that decides what they were owed,
		// so the deliveries are left out.
		vary, line, cut bool
	}{
		{"garbage", startHostile(t, true, afterFirstSend([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))),
			[]string{"--duration", "1500ms"}, false, false, true},
		{"huge-length", startHostile(t, true, afterFirstSend([]byte{0x40, 0, 0, 0, byte(wire.TypeDeliver)})),
			[]string{"--duration", "1500ms"}, false, false, true},
		{"closes", startHostile(t, true, func(c net.Conn) { c.Close() }),
			[]string{"--duration", "1500ms"}, false, false, false},
		{"resets", startHostile(t, true, func(c net.Conn) { c.(*net.TCPConn).SetLinger(0); c.Close() }),
			[]string{"--duration", "1500ms"}, true, false, true},
		{"delivers-nothing", startHostile(t, true, func(c net.Conn) { io.Copy(io.Discard, c) }),
			[]string{"--duration", "1500ms"}, true, true, false},
		{"never-reads", startHostile(t, true, func(c net.Conn) { time.Sleep(10 * time.Second) }),
			[]string{"--duration", "1500ms"}, true, true, false},
		{"never-answers-login", startHostile(t, false, nil),
			[]string{"--login-timeout", "1s"}, false, false, false},
		{"udp-garbage", startUDPGarbage(t),
			[]string{"--transport", "udp", "--duration", "1500ms"}, true, true, false},
		{"relay-room-limit", limited.TCP,
			[]string{"--duration", "2s"}, true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := replay(t, append(append([]string{"--target", tc.target}, base...), tc.args...)...)
			got := brokenAnswer(res, tc.vary, tc.line, tc.cut)
			want := string(testproc.ReadGolden(t, filepath.Join("testdata", "broken", tc.name+".golden"), []byte(got), *updateBroken, "-update-broken"))
			if got != want {
				t.Errorf("answer:\n%s\nwant:\n%s\nstderr:\n%s", got, want, res.stderr)
			}
			if res.code != 1 {
				t.Errorf("exit %d, want 1", res.code)
			}
		})
	}
}

// brokenAnswer is what a broken server's run answered: its exit code, its
// last line, the summary's text rows that judge it and its JSON figures
// that do not depend on timing.
func brokenAnswer(res result, vary, maskLine, cut bool) string {
	var b strings.Builder
	line := addr.ReplaceAllString(lastLine(res.stderr), "ADDR")
	if maskLine {
		line = maskNumbers(line)
	}
	fmt.Fprintf(&b, "exit %d\n%s\n", res.code, line)
	card := addr.ReplaceAllString(answerCard(res.stdout, vary), "ADDR")
	if cut {
		// What the cut clients were owed depends on when they were cut.
		card = deliveriesMark.ReplaceAllString(card, "· deliveries")
	}
	b.WriteString(card)
	for _, l := range strings.Split(res.stdout, "\n") {
		rows := []string{"deliveries expected", "deliveries per receiver", "sequence gaps", "first protocol error", "undecodable", "disconnects"}
		if cut {
			rows = rows[3:]
		}
		for _, key := range rows {
			if strings.HasPrefix(l, key) {
				if vary {
					l = maskNumbers(l)
				}
				b.WriteString(strings.TrimRight(l, " ") + "\n")
			}
		}
	}
	s := res.sum
	d := s.Deliveries
	figures := map[string]any{
		"logins_succeeded": s.LoginsSucceeded, "disconnects": s.Disconnects,
		"first_protocol_error": s.FirstProtocolError, "undecodable": keys(s.Undecodable),
	}
	if !cut {
		figures["deliveries_measured"], figures["owed_some"], figures["received_none"], figures["receivers"] = d.Measured(), d.Expected > 0, d.Received == 0, d.Receivers
	}
	if !vary && !cut {
		figures["receivers_with_none"] = d.Starved
	}
	j, _ := json.MarshalIndent(figures, "", "  ")
	b.Write(j)
	b.WriteString("\n")
	return b.String()
}

var addr = regexp.MustCompile(`127\.0\.0\.1:\d+`)

var deliveriesMark = regexp.MustCompile(`[✓✗?–] deliveries( \(could not judge: [^)]*\))?`)

var number = regexp.MustCompile(`\d+(\.\d+)?`)

// maskNumbers replaces each number by N.
func maskNumbers(s string) string { return number.ReplaceAllString(s, "N") }

func keys(m map[string]int64) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	return out
}
