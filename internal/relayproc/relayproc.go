// Package relayproc runs reprise's relay binary as a child process of
// replay when no --target is given: on free loopback ports, with the
// user's extra flags, its log in a file of the output folder, and stopped
// at the end (SIGTERM, then SIGKILL after a grace period; the kernel sends
// SIGTERM too if replay dies first). The relay being its own process is
// what makes its CPU and memory figures its own, not the fleet's.
//
// It is not the relay (internal/relay, which it never imports: it talks to
// the binary through its command line and its listening line) nor a
// general process supervisor.
package relayproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults.
const (
	// Name is the relay binary's file name, beside replay's.
	Name = "relay"
	// StartTimeout bounds the wait for the relay's listening line.
	StartTimeout = 20 * time.Second
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL.
	StopGrace = 10 * time.Second
)

// Config is one relay child.
type Config struct {
	// Bin is the relay binary (Beside finds the one next to replay).
	Bin string
	// Args are extra relay flags; they come after the loopback defaults
	// (--listen 127.0.0.1:0 --metrics 127.0.0.1:0, no per-source caps), so
	// they may override them.
	Args []string
	// Log receives the relay's log (its stderr, and its stdout after the
	// listening line); nil discards it.
	Log io.Writer
	// StartTimeout bounds the wait for the listening line; 0 means
	// StartTimeout.
	StartTimeout time.Duration
}

// Relay is a running relay child and the addresses it announced.
type Relay struct {
	// TCP, UDP and Metrics are the bound addresses ("off" when disabled).
	TCP, UDP, Metrics string

	cmd  *exec.Cmd
	args []string
	tail *tailBuffer
	done chan struct{}
	err  error // the exit; set before done closes
}

// listening is the relay's first stdout line (cmd/relay).
var listening = regexp.MustCompile(`^listening tcp=(\S+) udp=(\S+) metrics=(\S+)`)

// Beside returns the path of the relay binary in the directory of the
// running executable, or an error that says how to get one.
func Beside() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the relay binary: %w", err)
	}
	path := filepath.Join(filepath.Dir(exe), Name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no relay binary beside %s (%w): build both with `make build`, name one with --relay-bin, or point at a running relay with --target", filepath.Base(exe), err)
	}
	return path, nil
}

// Start starts the relay and waits for its listening line. The child runs
// in its own process group, so a Ctrl-C at the terminal reaches replay
// only: replay stops the relay when it has finished (its report needs the
// relay's last metrics).
func Start(ctx context.Context, cfg Config) (*Relay, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = StartTimeout
	}
	// The fleet is one source address on loopback: the relay's per-source
	// caps (a quarter of its connections, rooms and queue budget) would cap
	// the fleet.
	args := append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
		"--max-connections-per-source", "-1", "--max-rooms-per-source", "-1", "--queue-budget-per-source", "-1"}, cfg.Args...)
	cmd := exec.Command(cfg.Bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	r := &Relay{cmd: cmd, args: args, tail: &tailBuffer{max: 4096}, done: make(chan struct{})}
	logw := &lockedWriter{w: io.MultiWriter(cfg.Log, r.tail)}
	cmd.Stderr = logw
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start relay %s: %w", cfg.Bin, err)
	}
	first := make(chan string, 1)
	// Owned by r: reads the child's stdout to its end (the child's exit),
	// then reaps it; Stop waits for it through done.
	go func() {
		br := bufio.NewReader(stdout)
		line, _ := br.ReadString('\n')
		first <- strings.TrimSuffix(line, "\n")
		io.Copy(logw, br)
		r.err = cmd.Wait()
		close(r.done)
	}()
	timer := time.NewTimer(cfg.StartTimeout)
	defer timer.Stop()
	select {
	case line := <-first:
		m := listening.FindStringSubmatch(line)
		if m == nil {
			r.Stop(StopGrace)
			return nil, fmt.Errorf("relay %s did not start: %s", cfg.Bin, r.why(line))
		}
		r.TCP, r.UDP, r.Metrics = m[1], m[2], m[3]
		return r, nil
	case <-timer.C:
		r.Stop(StopGrace)
		return nil, fmt.Errorf("relay %s printed no listening line within %v: %s", cfg.Bin, cfg.StartTimeout, r.why(""))
	case <-ctx.Done():
		r.Stop(StopGrace)
		return nil, fmt.Errorf("start relay: %w", ctx.Err())
	}
}

// why explains a failed start from the first stdout line and the end of
// the relay's log.
func (r *Relay) why(line string) string {
	select {
	case <-r.done:
	case <-time.After(time.Second):
	}
	msg := strings.TrimSpace(r.tail.String())
	if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
		msg = msg[i+1:]
	}
	switch {
	case msg != "":
		return msg
	case line != "":
		return fmt.Sprintf("unexpected first line %q", line)
	default:
		return "no output"
	}
}

// PID is the child's process id.
func (r *Relay) PID() int { return r.cmd.Process.Pid }

// MetricsURL is the relay's /metrics URL ("" when its metrics are off).
func (r *Relay) MetricsURL() string {
	if r.Metrics == "off" || r.Metrics == "" {
		return ""
	}
	return "http://" + r.Metrics + "/metrics"
}

// CommandLine is the relay's command line, for reports.
func (r *Relay) CommandLine() string {
	return filepath.Base(r.cmd.Path) + " " + strings.Join(r.args, " ")
}

// Done is closed when the child has exited and been reaped.
func (r *Relay) Done() <-chan struct{} { return r.done }

// Stop sends SIGTERM, waits up to grace, then kills the child; it returns
// once the child is reaped. The error says how it ended when that was not
// a clean exit on SIGTERM.
func (r *Relay) Stop(grace time.Duration) error {
	select {
	case <-r.done:
		return r.exitErr("had exited")
	default:
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM) // it may exit meanwhile: done tells
	select {
	case <-r.done:
		return r.exitErr("stopped")
	case <-time.After(grace):
		_ = r.cmd.Process.Kill()
		<-r.done
		return fmt.Errorf("relay (pid %d) did not exit within %v of SIGTERM; killed", r.PID(), grace)
	}
}

func (r *Relay) exitErr(how string) error {
	if r.err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(r.err, &ee) {
		return fmt.Errorf("relay (pid %d) %s: %v: %s", r.PID(), how, r.err, r.why(""))
	}
	return fmt.Errorf("relay (pid %d): %w", r.PID(), r.err)
}

// lockedWriter serialises the two copies into the log (stderr by exec's
// goroutine, stdout by the reader).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// tailBuffer keeps the last max bytes written, for error messages.
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
