package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// needNATSServer is the nats-server binary: skipped without it, failed in
// CI; scripts/deps.sh installs it (scripts/go-tools pins its version).
func needNATSServer(t *testing.T) string {
	t.Helper()
	if path, err := exec.LookPath("nats-server"); err == nil {
		return path
	}
	testproc.Unavailable(t, "nats-server not installed (scripts/deps.sh test installs it, see scripts/go-tools; .ci/run does through make test)")
	return ""
}

// startConverseNATS starts nats-server on 127.0.0.1 with the given ping
// interval (a client that leaves maxOut pings unanswered is dropped as a
// stale connection) and its monitoring port; it returns both addresses.
func startConverseNATS(t *testing.T, ping time.Duration, maxOut int) (addr, mon string) {
	t.Helper()
	bin := needNATSServer(t)
	port, mport := startNATSConf(t, bin, fmt.Sprintf("ping_interval: \"%v\"\nping_max: %d\nmax_connections: 10000\n", ping, maxOut))
	return fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", mport)
}

// recordNATSSession records a small NATS client session through `record
// proxy`: INFO, CONNECT named rec-user-01 with a PING, a subscription,
// then 20 publishes 100 ms apart.
func recordNATSSession(t *testing.T, upstream string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "nats.pcap")
	p, listen := startRecordProxy(t, upstream, out)
	if err := natsClientSession(listen); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, p.Stderr)
	}
	return out
}

func natsClientSession(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(c)
	expect := func(prefix string) error {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return fmt.Errorf("nats session: waiting for %s: %v", prefix, err)
			}
			if strings.HasPrefix(line, prefix) {
				return nil
			}
		}
	}
	if err := expect("INFO "); err != nil {
		return err
	}
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"rec-user-01\",\"lang\":\"go\",\"version\":\"1.0\",\"protocol\":1}\r\nPING\r\n")
	if err := expect("PONG"); err != nil {
		return err
	}
	fmt.Fprintf(c, "SUB chat.lobby 1\r\n")
	for i := range 20 {
		time.Sleep(100 * time.Millisecond)
		fmt.Fprintf(c, "PUB chat.lobby 8\r\nhello-%02d\r\n", i)
	}
	fmt.Fprintf(c, "PING\r\n")
	return expect("PONG")
}

// natsConnz samples /connz: connections open, and distinct client names.
type natsConnz struct {
	mu    sync.Mutex
	peak  int
	names map[string]bool
}

func (z *natsConnz) sample(mon string) {
	resp, err := http.Get("http://" + mon + "/connz?limit=5000")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var v struct {
		Num   int `json:"num_connections"`
		Conns []struct {
			Name string `json:"name"`
		} `json:"connections"`
	}
	if json.NewDecoder(resp.Body).Decode(&v) != nil {
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if v.Num > z.peak {
		z.peak = v.Num
	}
	for _, c := range v.Conns {
		if c.Name != "" {
			z.names[c.Name] = true
		}
	}
}

// follow samples /connz every 250 ms until stop is closed.
func (z *natsConnz) follow(mon string, stop <-chan struct{}, done *sync.WaitGroup) {
	done.Go(func() {
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				z.sample(mon)
			}
		}
	})
}

// TestNATSReactionsKeepClientsAlive runs the fleet against nats-server
// pinging every 250 ms and dropping a client with 40 pings unanswered (a
// deadline of about 10 s, as TestNATSServer's: 4 s cut 7 of 200 -race
// clients on a host at load 25 whose readers were not scheduled for
// seconds): with the profile's PING -> PONG reaction, 200 receive-only
// clients, and 200 clients of which 10 send, are held past a deadline
// after every login with no disconnect (on a host that starved the
// fleet, only clients the server cut as stale), and the server sees 200
// distinct users; with the reaction removed, against a server whose
// deadline is 4 s, every client is dropped and counted by the server's
// own reason.
func TestNATSReactionsKeepClientsAlive(t *testing.T) {
	t.Parallel()
	const ping, pingMax = 250 * time.Millisecond, 40
	addr, mon := startConverseNATS(t, ping, pingMax)
	capPath := recordNATSSession(t, addr)
	prof := filepath.Join("testdata", "nats-converse.yaml")
	hold := ping*(pingMax+1) + 2*time.Second
	base := []string{"--profile", prof, "--capture", capPath, "--clients", "200",
		"--login-interval", "2ms", "--after-logins", hold.String(), "--heartbeat", "60s"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"receive-only", []string{"--receive-only"}},
		{"10 senders", []string{"--senders", "10", "--loop", suggestedLoopOf(t, prof, capPath)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := &natsConnz{names: map[string]bool{}}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			z.follow(mon, stop, &wg)
			res := replay(t, append(append([]string{"--target", addr}, base...), tc.args...)...)
			close(stop)
			wg.Wait()
			mustOK(t, res)
			s := res.sum
			if s.LoginsSucceeded != 200 || len(s.LoginsFailed) != 0 {
				t.Fatalf("logins %d failed %v, want 200 logged in\n%s", s.LoginsSucceeded, s.LoginsFailed, res.stdout)
			}
			// Held past the deadline with no cut is the proof the pings
			// were answered; how many the server sent is its choice
			// (nats-server skips a PING to a client it heard from within
			// the interval: 7,595 pongs, 38 a client, for 10 senders at
			// load 20), so the count asks one answer a client.
			cut := cutOnlyIfStarved(t, s, "stale_connection")
			if s.FramesSent["pong"] < 200-cut {
				t.Errorf("pongs sent %d: want at least one per client kept (pings every %v, held %v after the last login)", s.FramesSent["pong"], ping, hold)
			}
			if int64(z.peak)+cut < 200 || len(z.names) < 200 {
				t.Errorf("nats-server saw at most %d connections and %d distinct names, want 200", z.peak, len(z.names))
			}
			t.Logf("%s: pongs %d, frames %v, server peak %d connections, %d names", tc.name, s.FramesSent["pong"], s.FramesSent, z.peak, len(z.names))
		})
	}
	t.Run("without the reaction", func(t *testing.T) {
		b, err := os.ReadFile(prof)
		if err != nil {
			t.Fatal(err)
		}
		doc, _, _ := strings.Cut(string(b), "reactions:")
		silent := filepath.Join(t.TempDir(), "silent.yaml")
		if err := os.WriteFile(silent, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		const quickPing, quickMax = time.Second, 3
		quick, _ := startConverseNATS(t, quickPing, quickMax)
		args := append([]string{"--target", quick}, base...)
		args[3] = silent
		res := replay(t, append(args, "--receive-only", "--after-logins", (quickPing*(quickMax+1)+3*time.Second).String())...)
		s := res.sum
		if s.LoginsSucceeded != 200 || s.Disconnects["stale_connection"] != 200 {
			t.Fatalf("logins %d disconnects %v, want 200 logged in and 200 stale_connection (the server's reason)\n%s\n%s", s.LoginsSucceeded, s.Disconnects, res.stdout, testproc.Tail(res.stderr, 20))
		}
	})
}
