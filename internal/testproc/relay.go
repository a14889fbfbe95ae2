package testproc

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Relay is a running relay binary and the addresses it announced.
type Relay struct {
	*Proc
	TCP, UDP, Metrics string // "off" when disabled
}

// RelayStartTimeout bounds how long StartRelay waits for the listening line.
const RelayStartTimeout = 20 * time.Second

var listening = regexp.MustCompile(`^listening tcp=(\S+) udp=(\S+) metrics=(\S+)`)

// StartRelay starts the relay binary bin on free loopback ports
// (--listen 127.0.0.1:0 --metrics 127.0.0.1:0, then args, which may
// override them) and returns the addresses of its first stdout line,
// which must be the listening line. It fails the test with the relay's
// stderr when the line does not come within RelayStartTimeout. The
// cleanup stops the relay with SIGTERM.
func StartRelay(t testing.TB, bin string, args ...string) *Relay {
	t.Helper()
	p := Start(t, bin, append([]string{"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"}, args...)...)
	p.StopSignal = syscall.SIGTERM
	ctx, cancel := context.WithTimeout(context.Background(), RelayStartTimeout)
	defer cancel()
	m, err := p.WaitOutput(ctx, p.Stdout, regexp.MustCompile(`^.*\n`))
	if err != nil {
		_ = p.Stop(syscall.SIGKILL, Grace)
		t.Fatalf("relay did not start: %v\nstderr:\n%s", err, Tail(p.Stderr.String(), 40))
	}
	line := strings.TrimSuffix(m[0], "\n")
	a := listening.FindStringSubmatch(line)
	if a == nil {
		t.Fatalf("relay's first line %q is not its listening line", line)
	}
	return &Relay{Proc: p, TCP: a[1], UDP: a[2], Metrics: a[3]}
}
