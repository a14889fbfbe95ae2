package testproc

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// SyncBuffer collects a process's output: exec's copying goroutine writes
// while the test reads. The zero value is ready to use.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Grace is how long the end-of-test cleanup waits after StopSignal before
// it kills a process.
const Grace = 10 * time.Second

// Proc is a program a test started. Unless it exited before, the test's
// cleanup sends it StopSignal, waits up to Grace, then kills it, and
// reports a timeout or a failed exit as a test error; when the test
// failed, it logs the end of the program's stderr.
type Proc struct {
	Name   string // base name of the binary, for messages
	Cmd    *exec.Cmd
	Stdout *SyncBuffer // what the program printed (unless the Cmd came with its own writers)
	Stderr *SyncBuffer // the same buffer as Stdout for StartCombined
	// StopSignal is what the cleanup sends; os.Interrupt (a user's Ctrl-C)
	// unless changed before the test ends.
	StopSignal os.Signal

	done chan struct{}
	err  error // the exit; set before done closes
}

// Start starts bin with args, its stdout and stderr in separate buffers.
func Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	return StartCmd(t, exec.Command(bin, args...))
}

// StartCombined starts bin with stdout and stderr in one buffer, in the
// order the program wrote them.
func StartCombined(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	out := &SyncBuffer{}
	cmd := exec.Command(bin, args...)
	// The same writer for both: exec gives the child one pipe for the two.
	cmd.Stdout, cmd.Stderr = out, out
	return StartCmd(t, cmd)
}

// StartCmd starts a command the caller prepared (a wrapper such as
// `ip netns exec`, credentials); nil Stdout or Stderr go to the Proc's
// buffers.
func StartCmd(t testing.TB, cmd *exec.Cmd) *Proc {
	t.Helper()
	p := &Proc{Name: filepath.Base(cmd.Path), Cmd: cmd, StopSignal: os.Interrupt, done: make(chan struct{})}
	p.Stdout, _ = cmd.Stdout.(*SyncBuffer)
	p.Stderr, _ = cmd.Stderr.(*SyncBuffer)
	if cmd.Stdout == nil {
		p.Stdout = &SyncBuffer{}
		cmd.Stdout = p.Stdout
	}
	if cmd.Stderr == nil {
		p.Stderr = &SyncBuffer{}
		cmd.Stderr = p.Stderr
	}
	if p.Stdout == nil {
		p.Stdout = &SyncBuffer{}
	}
	if p.Stderr == nil {
		p.Stderr = &SyncBuffer{}
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.Name, err)
	}
	go func() { // owned by p: ends when the process does
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.Exited() {
			if err := p.Stop(p.StopSignal, Grace); err != nil {
				t.Errorf("%s: %v", p.Name, err)
			}
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", p.Name, Tail(p.Stderr.String(), 100))
		}
	})
	return p
}

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit (nil for status 0); valid once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Signal sends sig to the process.
func (p *Proc) Signal(sig os.Signal) error {
	if err := p.Cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s to %s: %w", sig, p.Name, err)
	}
	return nil
}

// Patience is how long a test may wait for a program that runs to its own
// end (a search, a fixed-duration run): the time left before the test
// binary's -timeout, less a margin in which the test still reports the
// program's output. A fixed bound would measure the host's load, not the
// program (a capacity search that ends in 30 s on an idle host took over
// 2 minutes at a load of 30 on 2 cores); a program that hangs still fails
// the test, with its output, before go test's timeout panics.
func Patience(t testing.TB) time.Duration {
	deadline, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return 10 * time.Minute
	}
	d, ok := deadline.Deadline()
	if !ok {
		return 10 * time.Minute
	}
	left := time.Until(d)
	return max(left-min(30*time.Second, left/10), time.Second)
}

// Wait waits up to timeout for the process to exit and returns its exit
// error; it leaves a process that outlives timeout running.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		return fmt.Errorf("%s did not exit within %v", p.Name, timeout)
	}
}

// Stop sends sig (unless the process already exited), waits up to grace
// and kills the process after that. It returns the exit error, or one
// saying the process had to be killed.
func (p *Proc) Stop(sig os.Signal, grace time.Duration) error {
	if p.Exited() {
		return p.err
	}
	_ = p.Cmd.Process.Signal(sig) // it may exit meanwhile: the wait tells
	select {
	case <-p.done:
		return p.err
	case <-time.After(grace):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not exit within %v of %v; killed", grace, sig)
	}
}

// WaitOutput waits until the text in buf (one of p's buffers) matches re
// and returns the submatches; it gives up when the process exits first or
// ctx ends.
func (p *Proc) WaitOutput(ctx context.Context, buf *SyncBuffer, re *regexp.Regexp) ([]string, error) {
	for {
		if m := re.FindStringSubmatch(buf.String()); m != nil {
			return m, nil
		}
		select {
		case <-p.done:
			// The last words may have come with the exit.
			if m := re.FindStringSubmatch(buf.String()); m != nil {
				return m, nil
			}
			return nil, fmt.Errorf("%s exited (%v) before printing %s; stderr:\n%s", p.Name, p.err, re, Tail(p.Stderr.String(), 20))
		case <-ctx.Done():
			return nil, fmt.Errorf("%s did not print %s: %w", p.Name, re, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Tail returns the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
