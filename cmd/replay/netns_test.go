package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// netns is a throw-away network namespace with loopback up and the
// ephemeral port range narrowed to ports.
type netns struct{ name string }

func newNetns(t *testing.T, ports int) netns {
	t.Helper()
	testproc.NeedRoot(t, "creating a network namespace (ip netns add)")
	testproc.NeedTool(t, "ip", "iproute2")
	ns := netns{name: fmt.Sprintf("reprise-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	if out, err := exec.Command("ip", "netns", "add", ns.name).CombinedOutput(); err != nil {
		testproc.Unavailable(t, "ip netns is unavailable here: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns.name).Run() })
	ns.must(t, "ip", "link", "set", "lo", "up")
	ns.must(t, "sysctl", "-q", "-w", fmt.Sprintf("net.ipv4.ip_local_port_range=40000 %d", 40000+ports-1))
	return ns
}

func (ns netns) cmd(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.name, name}, args...)...)
}

func (ns netns) must(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := ns.cmd(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v in netns: %v: %s", name, args, err, out)
	}
}

// TestPortExhaustionNetns: in a namespace with 110 ephemeral ports, 300
// clients to one relay port all log in when --source-ips spreads them over
// three local addresses; without it the fleet reports port_exhaustion
// promptly instead of hanging.
func TestPortExhaustionNetns(t *testing.T) {
	t.Parallel()
	const ports, clients = 110, 300
	path := writeCapture(t, castScript())
	for _, tt := range []struct {
		name      string
		sourceIPs string
	}{
		{"with source ips", "127.0.0.2,127.0.0.3,127.0.0.4"},
		{"without", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ns := newNetns(t, ports)
			relay := testproc.StartCmd(t, ns.cmd(bins["relay"], "--listen", "127.0.0.1:7400", "--metrics", ""))
			// The relay's listening line, not a fixed sleep: a starved
			// relay that had not bound yet refused every login.
			ctx, cancel := context.WithTimeout(context.Background(), testproc.RelayStartTimeout)
			_, err := relay.WaitOutput(ctx, relay.Stdout, regexp.MustCompile(`(?m)^listening tcp=`))
			cancel()
			if err != nil {
				t.Fatalf("relay in netns did not start: %v\n%s", err, relay.Stderr.String())
			}
			sumPath := filepath.Join(t.TempDir(), "summary.json")
			args := []string{"--capture", path, "--target", "127.0.0.1:7400", "--clients", fmt.Sprint(clients), "--receive-only",
				"--login-interval", "1ms", "--after-logins", "500ms", "--metrics", "", "--summary", sumPath}
			if tt.sourceIPs != "" {
				args = append(args, "--source-ips", tt.sourceIPs)
			}
			start := time.Now()
			out, err := ns.cmd(bins["replay"], args...).CombinedOutput()
			if err != nil {
				t.Fatalf("replay: %v\n%s", err, out)
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Errorf("run took %v: the fleet hung on exhausted ports", took)
			}
			s, _ := readSummary(t, sumPath)
			t.Logf("%s: attempts %d, logged in %d, failed %v", tt.name, s.LoginAttempts, s.LoginsSucceeded, s.LoginsFailed)
			if tt.sourceIPs != "" {
				if s.LoginsSucceeded != clients {
					t.Errorf("logged in %d of %d over three source addresses; failures %v", s.LoginsSucceeded, clients, s.LoginsFailed)
				}
				return
			}
			if s.LoginsSucceeded > ports || s.LoginsFailed["port_exhausted"] < clients-ports {
				t.Errorf("logged in %d, failed %v; want at most %d and the rest port_exhausted", s.LoginsSucceeded, s.LoginsFailed, ports)
			}
			if !strings.Contains(string(out), "local ports exhausted") {
				t.Errorf("no port exhaustion warning in:\n%s", out)
			}
		})
	}
}
