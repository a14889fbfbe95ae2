package testproc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var bins map[string]string

func TestMain(m *testing.M) { os.Exit(Main(m, &bins, Options{CheckLeaks: true}, "relay")) }

func TestStartStop(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		sig     os.Signal
		wantErr string
	}{
		// The script writes to stderr before "up": the test signals as
		// soon as it sees "up", and sh runs the trap before its next
		// command, so a line written after "up" may never be.
		{"exits on interrupt", `trap 'echo bye; exit 0' INT; echo oops >&2; echo up; while :; do sleep 0.05; done`, os.Interrupt, ""},
		{"fails on term", `trap 'exit 3' TERM; echo up; while :; do sleep 0.05; done`, syscall.SIGTERM, "exit status 3"},
		{"ignores interrupt", `trap '' INT; echo up; while :; do sleep 0.05; done`, os.Interrupt, "killed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Start(t, "sh", "-c", tt.script)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := p.WaitOutput(ctx, p.Stdout, regexp.MustCompile(`up\n`)); err != nil {
				t.Fatal(err)
			}
			err := p.Stop(tt.sig, 500*time.Millisecond)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("stop: %v, want %q", err, tt.wantErr)
			}
			if !p.Exited() || p.Err() != nil && tt.wantErr == "" {
				t.Fatalf("exited %v err %v", p.Exited(), p.Err())
			}
			if tt.wantErr == "" && (p.Stdout.String() != "up\nbye\n" || p.Stderr.String() != "oops\n") {
				t.Errorf("stdout %q stderr %q", p.Stdout, p.Stderr)
			}
		})
	}
}

func TestStartCombined(t *testing.T) {
	p := StartCombined(t, "sh", "-c", "echo one; echo two >&2; echo three")
	if err := p.Wait(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Stdout != p.Stderr || p.Stdout.String() != "one\ntwo\nthree\n" {
		t.Errorf("combined output %q", p.Stdout)
	}
}

func TestWaitOutputExited(t *testing.T) {
	p := Start(t, "sh", "-c", "echo nothing useful >&2; exit 2")
	_, err := p.WaitOutput(context.Background(), p.Stdout, regexp.MustCompile(`never`))
	if err == nil || !strings.Contains(err.Error(), "exit status 2") || !strings.Contains(err.Error(), "nothing useful") {
		t.Fatalf("WaitOutput on an exited process: %v", err)
	}
}

func TestStartRelay(t *testing.T) {
	r := StartRelay(t, bins["relay"], "--udp", "off")
	if r.UDP != "off" {
		t.Errorf("udp %q, want off", r.UDP)
	}
	for _, a := range []string{r.TCP, r.Metrics} {
		if !strings.HasPrefix(a, "127.0.0.1:") {
			t.Errorf("address %q not on loopback", a)
		}
	}
	c, err := net.DialTimeout("tcp", r.TCP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := r.Stop(r.StopSignal, Grace); err != nil {
		t.Fatalf("relay after SIGTERM: %v", err)
	}
}

func TestTail(t *testing.T) {
	for _, tt := range []struct {
		in   string
		n    int
		want string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb", 5, "a\nb"},
		{"", 3, ""},
	} {
		if got := Tail(tt.in, tt.n); got != tt.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}

// TestGolden: -update writes the file (its directory made), a match
// passes, and FirstDiff names the first line that differs.
func TestGolden(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "x.golden")
	Golden(t, path, []byte("a\nb\n"), true, "-update")
	if got := ReadGolden(t, path, []byte("a\nc\n"), false, "-update"); string(got) != "a\nb\n" {
		t.Fatalf("ReadGolden without update rewrote the file: %q", got)
	}
	for _, tc := range []struct{ got, want, diff string }{
		{"a\nb\n", "a\nc\n", "line 2:\n got: b\nwant: c"},
		{"a\n", "a\nb\n", "line 2:\n got: \nwant: b"},
		{"a\r\n", "a\n", "line 1:\n got: a\r\nwant: a"},
		{"a", "a", "same lines, different bytes"},
	} {
		if d := FirstDiff([]byte(tc.got), []byte(tc.want)); d != tc.diff {
			t.Errorf("FirstDiff(%q, %q) = %q, want %q", tc.got, tc.want, d, tc.diff)
		}
	}
}

// TestServeTLS: each connection gets its own handler; the test's cleanup
// closes a connection the client left open and waits for its handler.
func TestServeTLS(t *testing.T) {
	ended := make(chan struct{}, 2)
	var c *tls.Conn
	t.Run("serve", func(t *testing.T) {
		cert := SelfSigned(t, time.Now().Add(time.Hour))
		addr := ServeTLS(t, &tls.Config{Certificates: []tls.Certificate{cert}}, func(c net.Conn) {
			defer func() { ended <- struct{}{} }()
			_, _ = io.Copy(c, c)
		})
		for i := range 2 {
			var err error
			c, err = tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("echo")); err != nil {
				t.Fatal(err)
			}
			b := make([]byte, 4)
			if _, err := io.ReadFull(c, b); err != nil || string(b) != "echo" {
				t.Fatalf("connection %d: read %q, %v", i, b, err)
			}
			if i == 0 {
				c.Close()
			}
		}
	})
	defer c.Close()
	// The subtest's cleanup has run: both handlers have returned, the
	// second because the server closed its connection.
	for range 2 {
		select {
		case <-ended:
		default:
			t.Fatal("a handler outlived the test's cleanup")
		}
	}
}

// TestStartServerPortTaken: a server whose port another process took
// before it bound it (here the test holds it) exits saying the address is
// in use; StartServer starts it again on another port, where it listens.
func TestStartServerPortTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	taken := held.Addr().(*net.TCPAddr).Port
	var tried []int
	p, ports := StartServer(t, 1, func(ports []int) *exec.Cmd {
		port := ports[0]
		if len(tried) == 0 {
			port = taken // the first start finds its port taken
		}
		tried = append(tried, port)
		return exec.Command(bins["relay"], "--listen", fmt.Sprintf("127.0.0.1:%d", port), "--udp", "off", "--metrics", "off")
	})
	if len(tried) != 2 || tried[0] != taken || tried[1] != ports[0] || p.Exited() {
		t.Fatalf("tried ports %v (taken %d), listening on %v, exited %v", tried, taken, ports, p.Exited())
	}
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0]), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestNotListeningNamesTheCause: a server that exits because its port was
// taken is ErrPortTaken (started again); one that exits for any other
// reason is not (the test fails at once, not after PortTries starts).
func TestNotListeningNamesTheCause(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	for _, tc := range []struct {
		args  []string
		taken bool
	}{
		{[]string{"--listen", held.Addr().String(), "--udp", "off", "--metrics", "off"}, true},
		{[]string{"--no-such-flag"}, false},
	} {
		p := Start(t, bins["relay"], tc.args...)
		err := WaitListening(t, p, fmt.Sprintf("127.0.0.1:%d", FreePort(t))) // never answers: the wait ends at the exit
		if err == nil || errors.Is(err, ErrPortTaken) != tc.taken {
			t.Errorf("%v: %v; want taken %v", tc.args, err, tc.taken)
		}
	}
}
