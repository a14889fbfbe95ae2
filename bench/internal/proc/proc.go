// Package proc starts a server under test as its own process and reads its
// CPU time and resident memory from /proc, so both servers are measured the
// same way and never share a runtime with the load client. It is for
// benchmarks on this machine, not a process supervisor.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// userHZ is the unit of utime and stime in /proc/PID/stat. The kernel fixes
// USER_HZ at 100 in its user ABI on every architecture Go supports on
// Linux, whatever the kernel's internal HZ.
const userHZ = 100

// CPU returns the user+system CPU time of process pid (10 ms resolution).
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of pid %d: %w", pid, err)
	}
	return parseStatCPU(b)
}

// parseStatCPU reads utime and stime (fields 14 and 15) from a
// /proc/PID/stat line. The command name in field 2 may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat %q: no ')'", b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the command, want ≥ 13", len(f))
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat utime %q: %w", f[11], err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat stime %q: %w", f[12], err)
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// RSS returns the resident set size of process pid in bytes (VmRSS).
func RSS(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("rss of pid %d: %w", pid, err)
	}
	return parseStatusRSS(b)
}

func parseStatusRSS(b []byte) (uint64, error) {
	for line := range bytes.Lines(b) {
		rest, ok := bytes.CutPrefix(line, []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status VmRSS line %q", line)
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status VmRSS %q: %w", f[0], err)
		}
		return kb << 10, nil
	}
	return 0, errors.New("status: no VmRSS line")
}

// FreeAddr returns a loopback TCP address that was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	return addr, nil
}

// Server is a running server process.
type Server struct {
	Name string
	Args []string // the command line it was started with
	Addr string   // where it accepts the load's TCP connections
	cmd  *exec.Cmd
	out  *tailBuffer
	done chan struct{}
	err  error // Wait's result, set before done closes
}

// Start runs bin with args and returns once addr accepts TCP connections,
// or an error (with the tail of the process's output) if it exits or is not
// listening within 15 s.
func Start(ctx context.Context, name, bin string, args []string, addr string) (*Server, error) {
	s, err := Launch(name, bin, args)
	if err != nil {
		return nil, err
	}
	s.Addr = addr
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			if cerr := c.Close(); cerr != nil {
				return nil, errors.Join(fmt.Errorf("%s: probe close: %w", name, cerr), s.Stop())
			}
			return s, nil
		}
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s exited before listening on %s: %v; output: %s", name, addr, s.err, s.out.String())
		case <-ctx.Done():
			return nil, errors.Join(fmt.Errorf("%s: %w", name, ctx.Err()), s.Stop())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("%s not listening on %s after 15s: %w; output: %s", name, addr, err, s.out.String()), s.Stop())
		}
	}
}

// Launch runs bin with args and returns at once; the process's output is
// kept (its tail) for error messages.
func Launch(name, bin string, args []string) (*Server, error) {
	s := &Server{Name: name, Args: args, out: &tailBuffer{max: 4 << 10}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// Exited reports whether the process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// CPU is the server's CPU time so far.
func (s *Server) CPU() (time.Duration, error) { return CPU(s.Pid()) }

// RSS is the server's resident memory now.
func (s *Server) RSS() (uint64, error) { return RSS(s.Pid()) }

// Output is the tail of what the server printed.
func (s *Server) Output() string { return s.out.String() }

// Stop sends SIGTERM, waits up to 5 s, then kills. It reports a server
// that had already died on its own.
func (s *Server) Stop() error {
	select {
	case <-s.done:
		return fmt.Errorf("%s had exited: %v; output: %s", s.Name, s.err, s.out.String())
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop %s: %w", s.Name, err)
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(5 * time.Second):
		if err := s.cmd.Process.Kill(); err != nil {
			return fmt.Errorf("kill %s: %w", s.Name, err)
		}
		<-s.done
		return fmt.Errorf("%s did not stop within 5s of SIGTERM; killed", s.Name)
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// CountEstablished counts the established IPv4 TCP sockets on this machine
// whose local port is port: a server's accepted connections, read from
// /proc/net/tcp so it needs nothing from the server.
func CountEstablished(port int) (int, error) {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0, fmt.Errorf("count connections: %w", err)
	}
	return countEstablished(b, port), nil
}

func countEstablished(b []byte, port int) int {
	suffix := fmt.Sprintf(":%04X", port)
	n := 0
	for line := range bytes.Lines(b) {
		f := strings.Fields(string(line))
		// sl local_address rem_address st ...; st 01 is ESTABLISHED.
		if len(f) > 3 && f[3] == "01" && strings.HasSuffix(f[1], suffix) {
			n++
		}
	}
	return n
}
