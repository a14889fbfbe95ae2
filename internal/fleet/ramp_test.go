package fleet

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/wire"
)

func TestProgressReasons(t *testing.T) {
	if got := progressReasons(" / disconnected", map[string]int64{}); got != "" {
		t.Errorf("no disconnects: %q", got)
	}
	got := progressReasons(" / disconnected", map[string]int64{"reset": 2, "slow_consumer": 10, "idle_timeout": 2})
	if want := " / disconnected 14 (slow_consumer 10, idle_timeout 2, reset 2)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestRampWarnings: a ramp longer than --duration is warned about at start
// and the progress line shows how far the ramp is.
func TestRampWarnings(t *testing.T) {
	c := testConfig(t)
	c.Clients = 100
	c.LoginInterval = 100 * time.Millisecond
	c.Duration = 1500 * time.Millisecond
	var out syncBuf
	c.Out = &out
	s, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	text := out.String()
	if !strings.Contains(text, "WARNING: the login ramp takes 9.9s") || !strings.Contains(text, "--duration is 1.5s") {
		t.Errorf("no ramp warning:\n%s", text)
	}
	if !strings.Contains(text, "| ramp ") || !strings.Contains(text, "/100, last login in ") {
		t.Errorf("progress line without the ramp:\n%s", text)
	}
	if len(s.Warnings) == 0 || !strings.Contains(s.Warnings[0], "login ramp") {
		t.Errorf("summary warnings %q", s.Warnings)
	}
}

// syncBuf is an io.Writer safe for the fleet's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestNotReprise: a target that answers the first login with something
// other than joined or error (an HTTP server, the case of a --target
// pointed at a metrics port; a server sending a valid frame of the wrong
// kind; a stream of garbage) ends the run at once with ErrWrongProtocol
// quoting its first bytes, well within the login timeout.
func TestNotReprise(t *testing.T) {
	httpLn := listen(t)
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second}
	go srv.Serve(httpLn)
	defer srv.Close()
	deliver := serve(t, func(c net.Conn) {
		c.Write(wire.AppendDeliver(nil, wire.Broadcast, "x", false, 0, []byte("hello")))
	})
	binary := serve(t, func(c net.Conn) { c.Write([]byte{0, 0, 0, 5, 0xee, 1, 2, 3, 4, 5}) })
	tests := []struct {
		name, target, want string
	}{
		{"http", httpLn.Addr().String(), `"HTTP/1.1 400 Bad Request`},
		{"wrong frame", deliver, `0x`},
		{"garbage", binary, `(hex 00 00 00 05 ee`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := baseConfig()
			c.Target = tt.target
			c.Clients = 3
			c.LoginTimeout = 10 * time.Second
			c.Duration = 30 * time.Second
			start := time.Now()
			s, err := Run(context.Background(), c)
			if !errors.Is(err, ErrWrongProtocol) {
				t.Fatalf("err %v, want ErrWrongProtocol", err)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %v: the failure waited for a timeout", took)
			}
			if tt.name != "wrong frame" && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not quote the first bytes (want %q)", err, tt.want)
			}
			// The ramp does not wait for the first result: the attempts
			// due meanwhile fail the same way.
			if s.LoginsFailed[reasonProtocol] != s.LoginAttempts || s.LoginAttempts == 0 {
				t.Errorf("failed %v after %d attempts, want all protocol_error", s.LoginsFailed, s.LoginAttempts)
			}
		})
	}
}

// TestSilentTarget: a server that accepts and says nothing fails each
// login with timeout after --login-timeout, counted; with no login done
// by then (and a second for the attempt to report) the run ends with
// ErrNoLogin, long before its --duration, and without one.
func TestSilentTarget(t *testing.T) {
	silent := serve(t, func(net.Conn) {})
	for _, d := range []time.Duration{time.Minute, 0} {
		c := baseConfig()
		c.Target = silent
		c.Clients = 2
		c.LoginTimeout = 300 * time.Millisecond
		c.Duration = d
		start := time.Now()
		s, err := Run(context.Background(), c)
		if !errors.Is(err, ErrNoLogin) || !strings.Contains(err.Error(), "timeout=2") {
			t.Fatalf("--duration %v: err %v", d, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("--duration %v: the run took %v", d, took)
		}
		if s.LoginsFailed["timeout"] != 2 {
			t.Errorf("failed %v, want 2 timeouts", s.LoginsFailed)
		}
	}
}

func TestSourceIPNotLocal(t *testing.T) {
	c := baseConfig()
	c.Target = "127.0.0.1:9"                         // never dialled: refused before
	c.SourceIPs = []string{"127.0.0.2", "192.0.2.7"} // TEST-NET-1: never this host's
	_, err := New(c)
	if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "192.0.2.7: not an address of this host") {
		t.Fatalf("err %v", err)
	}
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// serve accepts on a loopback listener and runs fn on each connection
// after the client's first bytes arrived, then reads until the client
// closes; it returns the address.
func serve(t *testing.T, fn func(net.Conn)) string {
	ln := listen(t)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				r := bufio.NewReader(c)
				r.Peek(1)
				fn(c)
				io.Copy(io.Discard, r)
			})
		}
	})
	return ln.Addr().String()
}

// TestRampProgressLevel: while a capacity search's ramp steps through
// levels, the progress line says which level of how many it is at, and
// "holding" while it waits at one to be judged; without levels it says
// none; with every login attempted, no ramp part at all.
func TestRampProgressLevel(t *testing.T) {
	tests := []struct {
		name     string
		levels   []int
		done     int32
		holding  bool
		attempts int64
		want     string // the part after the attempts
	}{
		{"first level", []int{50, 100, 150}, 0, false, 10, ", level 1 of 3 (50 clients), last login in "},
		{"holding the first", []int{50, 100, 150}, 0, true, 50, ", holding level 1 of 3 (50 clients), last login in "},
		{"second level", []int{50, 100, 150}, 1, false, 60, ", level 2 of 3 (100 clients), last login in "},
		{"every level passed", []int{50, 100, 150}, 3, false, 149, ", level 3 of 3 (150 clients), last login in "},
		{"no levels", nil, 0, false, 10, ", last login in "},
	}
	for _, tt := range tests {
		f := &Fleet{cfg: Config{Clients: 150, LoginInterval: 100 * time.Millisecond, Levels: tt.levels}, epoch: time.Now()}
		f.levelsDone.Store(tt.done)
		f.holding.Store(tt.holding)
		got := f.rampProgress(tt.attempts)
		if prefix := fmt.Sprintf(" | ramp %d/150", tt.attempts); !strings.HasPrefix(got, prefix+tt.want) {
			t.Errorf("%s: %q, want %q then the time", tt.name, got, prefix+tt.want)
		}
	}
	f := &Fleet{cfg: Config{Clients: 150, LoginInterval: time.Millisecond, Levels: []int{50, 150}}, epoch: time.Now()}
	if got := f.rampProgress(150); got != "" {
		t.Errorf("every login attempted: %q, want no ramp part", got)
	}
}
