package testproc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// A server no one here wrote (mosquitto, redis, nats-server, a node app)
// cannot be told port 0 and asked which port it got, nor handed a
// listener: the test chooses its ports and the server binds them a moment
// later, in another process. Meanwhile any other process on the host (a
// parallel test's relay, another engineer's suite) may take one; the
// server then exits saying the address is in use. StartOnPorts starts it
// again on other ports instead of failing the test for the host's luck.

// PortTries bounds how many times StartOnPorts starts a server whose port
// was taken before it bound it.
const PortTries = 5

// FreePort returns a port of 127.0.0.1 free a moment ago for both TCP and
// UDP (record's proxy and some servers listen on both at one port, and a
// port free for TCP may be a busy UDP one: relays of parallel tests bind
// UDP on random ports), never one handed out before in this process (the
// kernel may give a port just closed again, and a server given the same
// port twice, as mosquitto's three listeners, exits before it listens).
func FreePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		ln.Close()
		if err != nil {
			continue
		}
		pc.Close()
		issued.Lock()
		seen := issued.m[port]
		issued.m[port] = true
		issued.Unlock()
		if !seen {
			return port
		}
	}
	t.Fatal("no port free for both TCP and UDP in 50 tries")
	return 0
}

// issued are the ports FreePort handed out.
var issued = struct {
	sync.Mutex
	m map[int]bool
}{m: map[int]bool{}}

// addrInUse is how the servers the tests start say that a port they were
// given is taken: Go's and libuv's "address already in use" (nats-server,
// prometheus, node), mosquitto's and redis's "Address already in use",
// EADDRINUSE from node's error codes.
var addrInUse = regexp.MustCompile(`(?i)address already in use|EADDRINUSE`)

// ErrPortTaken is what a start function of StartOnPorts returns (wrapped)
// when its server could not bind a port it was given.
var ErrPortTaken = errors.New("a port was taken before the server bound it")

// NotListening is the error a start function returns when p exited before
// it listened: ErrPortTaken when its output says its address was in use.
func NotListening(p *Proc, addr string) error {
	out := p.Stdout.String() + p.Stderr.String()
	err := fmt.Errorf("%s exited (%v) before it listened on %s:\n%s", p.Name, p.Err(), addr, Tail(out, 20))
	if addrInUse.MatchString(out) {
		return fmt.Errorf("%w: %w", ErrPortTaken, err)
	}
	return err
}

// WaitListening waits until addr, where the server p should listen,
// accepts TCP connections: nil once it does, NotListening's error when p
// exited first. It waits as long as the test may (Patience): a fixed bound
// would measure the host's load.
func WaitListening(t testing.TB, p *Proc, addr string) error {
	t.Helper()
	end := time.Now().Add(Patience(t))
	for time.Now().Before(end) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		if p.Exited() {
			return NotListening(p, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("nothing listens on %s", addr)
}

// StartOnPorts starts a server on n ports that FreePort chose: start
// starts it on ports and returns once it listens, or with an error. When
// the error is ErrPortTaken (another process bound a port in between), the
// server is started again on n other ports, at most PortTries times; any
// other error fails the test. It returns start's value and the ports the
// server listens on.
func StartOnPorts[S any](t testing.TB, n int, start func(ports []int) (S, error)) (S, []int) {
	t.Helper()
	var err error
	for range PortTries {
		ports := make([]int, n)
		for i := range ports {
			ports[i] = FreePort(t)
		}
		var s S
		if s, err = start(ports); err == nil {
			return s, ports
		}
		if !errors.Is(err, ErrPortTaken) {
			break
		}
		t.Logf("starting again on other ports: %v", err)
	}
	t.Fatal(err)
	var zero S
	return zero, nil
}

// StartServer starts a server no one here wrote on n ports that FreePort
// chose, listening on TCP at each: cmd makes its command for the ports
// (flags, a configuration file, environment). When it exits saying a port
// was taken, it is started again on other ports (StartOnPorts).
func StartServer(t testing.TB, n int, cmd func(ports []int) *exec.Cmd) (*Proc, []int) {
	t.Helper()
	return StartOnPorts(t, n, func(ports []int) (*Proc, error) {
		p := StartCmd(t, cmd(ports))
		for _, port := range ports {
			addr := fmt.Sprintf("127.0.0.1:%d", port)
			if err := WaitListening(t, p, addr); err != nil {
				return p, err
			}
			// What answered may be the process that took the port, the
			// server on its way out for it.
			if p.Exited() {
				return p, NotListening(p, addr)
			}
		}
		return p, nil
	})
}

// Inherit binds a TCP listener on 127.0.0.1 port 0 for a child process to
// inherit (an *exec.Cmd's ExtraFiles, served there as --metrics-fd or
// --barrier-fd): the port is bound here and served there, never chosen
// here and bound in another process (another test could take it in
// between). The file is a duplicate the child serves; this process only
// holds it until the test's end.
func Inherit(t testing.TB) (addr string, f *os.File) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f, err = l.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	addr = l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return addr, f
}

// InheritArg adds f to cmd's inherited files and returns its descriptor
// in the child, as a flag's value.
func InheritArg(cmd *exec.Cmd, f *os.File) string {
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	return strconv.Itoa(2 + len(cmd.ExtraFiles))
}
