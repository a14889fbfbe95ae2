package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/capture"
	"github.com/reprise-harness/reprise/internal/profile"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

var bins map[string]string // the built record, relay and vrclient by name

func TestMain(m *testing.M) {
	os.Exit(testproc.Main(m, &bins, testproc.Options{}, "record", "relay", "vrclient"))
}

// proc is a started binary; out holds its stdout and stderr together.
type proc struct {
	*testproc.Proc
	out *testproc.SyncBuffer
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := testproc.StartCombined(t, bins[name], args...)
	return &proc{Proc: p, out: p.Stdout}
}

func (p *proc) waitFor(t *testing.T, s string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.WaitOutput(ctx, p.out, regexp.MustCompile(regexp.QuoteMeta(s))); err != nil {
		t.Fatalf("%s: no %q in output (%v):\n%s", p.Cmd.Path, s, err, p.out.String())
	}
}

func (p *proc) wait(t *testing.T) error {
	t.Helper()
	err := p.Wait(20 * time.Second)
	if !p.Exited() {
		t.Fatalf("%s did not exit:\n%s", p.Cmd.Path, p.out.String())
	}
	return err
}

func (p *proc) stop(t *testing.T, sig os.Signal) error {
	t.Helper()
	if err := p.Signal(sig); err != nil {
		t.Fatalf("%v\n%s", err, p.out.String())
	}
	return p.wait(t)
}

// startRelay runs the relay binary on a port of its own choosing (port
// 0: a port chosen here could be taken before it binds it) and returns its
// address.
func startRelay(t *testing.T) string {
	t.Helper()
	return testproc.StartRelay(t, bins["relay"], "--metrics", "off").TCP
}

// startProxy runs `record proxy` on a port of its own choosing with args
// after --listen and returns it and the address it says it listens on.
func startProxy(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	rec := start(t, "record", append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...)...)
	ctx, cancel := context.WithTimeout(context.Background(), testproc.Patience(t))
	defer cancel()
	m, err := rec.WaitOutput(ctx, rec.out, regexp.MustCompile(`record: proxy on (\S+) `))
	if err != nil {
		t.Fatalf("record proxy: %v\n%s", err, rec.out)
	}
	return rec, m[1]
}

// vrclient runs the sample client to completion and returns the frames it
// sent, from its --sent-log.
func vrclient(t *testing.T, target, transport, user string, d time.Duration) [][]byte {
	t.Helper()
	log := filepath.Join(t.TempDir(), user+".sent")
	p := start(t, "vrclient", "--target", target, "--transport", transport, "--user", user, "--room", "lobby",
		"--duration", d.String(), "--heartbeat", "500ms", "--seed", "3", "--sent-log", log)
	if err := p.wait(t); err != nil {
		t.Fatalf("vrclient %s: %v\n%s", user, err, p.out.String())
	}
	return readSentLog(t, log)
}

func readSentLog(t *testing.T, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		b, err := hex.DecodeString(sc.Text())
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// flowOf finds the flow whose client joined as user.
func flowOf(t *testing.T, c *capture.Capture, user string) *capture.Flow {
	t.Helper()
	for _, f := range c.Flows {
		if len(f.ClientFrames) == 0 || wire.Type(f.ClientFrames[0].Bytes[wire.LenSize]) != wire.TypeJoin {
			continue
		}
		var j wire.Frame
		if _, err := wire.Decode(f.ClientFrames[0].Bytes, wire.DefaultMaxFrame, &j); err == nil && string(j.User) == user {
			return f
		}
	}
	t.Fatalf("no flow for %s among %v (warnings %q)", user, c.Flows, c.Warnings)
	return nil
}

// samePrefix checks that the flow's client frames are the first frames
// sent, byte for byte and in order; all of them when whole is set.
func samePrefix(t *testing.T, f *capture.Flow, sent [][]byte, whole bool) {
	t.Helper()
	got := f.ClientFrames
	if whole && len(got) != len(sent) {
		t.Fatalf("%s: %d client frames, the client sent %d (notes %q)", f, len(got), len(sent), f.Notes)
	}
	if len(got) > len(sent) || len(got) == 0 {
		t.Fatalf("%s: %d client frames, the client sent %d", f, len(got), len(sent))
	}
	for i := range got {
		if !bytes.Equal(got[i].Bytes, sent[i]) {
			t.Fatalf("%s: frame %d differs:\n got %x\nsent %x", f, i, got[i].Bytes, sent[i])
		}
	}
}

func tsharkCount(t *testing.T, path string) int {
	t.Helper()
	cmd := exec.Command(testproc.NeedTool(t, "tshark", "tshark"), "-n", "-r", path, "-T", "fields", "-e", "frame.number")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark -r %s: %v\n%s", path, err, errOut.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(errOut.String()), "\n") {
		if line != "" && !strings.Contains(line, "Running as user") && !strings.Contains(line, "could be dangerous") {
			t.Fatalf("tshark complained: %s", errOut.String())
		}
	}
	return len(strings.Fields(out.String()))
}

func TestProxyRecordsClients(t *testing.T) {
	relay := startRelay(t)
	out := filepath.Join(t.TempDir(), "proxy.pcap")
	rec, listen := startProxy(t, "--upstream", relay, "--out", out)

	var wg sync.WaitGroup
	sent := map[string][][]byte{}
	var mu sync.Mutex
	for _, c := range []struct{ user, transport string }{{"tcp-a", "tcp"}, {"tcp-b", "tcp"}, {"udp-a", "udp"}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := vrclient(t, listen, c.transport, c.user, 2*time.Second)
			mu.Lock()
			sent[c.user] = s
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := rec.stop(t, os.Interrupt); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, rec.out.String())
	}
	c, err := capture.ReadFile(out, reprise(0))
	if err != nil {
		t.Fatal(err)
	}
	for user, s := range sent {
		f := flowOf(t, c, user)
		if f.Server.String() != relay {
			t.Fatalf("%s: server %s, want the relay %s", user, f.Server, relay)
		}
		samePrefix(t, f, s, true)
	}
	if n := tsharkCount(t, out); n != c.Packets {
		t.Fatalf("tshark counts %d packets, the reader %d", n, c.Packets)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	testproc.NeedRoot(t, "live capture")
}

// TestLiveRecordsClients captures lo while the sample client talks to the
// relay over TCP and UDP, and finds every frame each client sent.
func TestLiveRecordsClients(t *testing.T) {
	requireRoot(t)
	relay := startRelay(t)
	_, port, _ := net.SplitHostPort(relay)
	for _, name := range []string{"live.pcap", "live.pcapng"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), name)
			rec := start(t, "record", "live", "--iface", "lo", "--port", port, "--out", out)
			rec.waitFor(t, "capturing on lo")
			var wg sync.WaitGroup
			var tcpSent, udpSent [][]byte
			wg.Add(2)
			go func() { defer wg.Done(); tcpSent = vrclient(t, relay, "tcp", "live-tcp", 2*time.Second) }()
			go func() { defer wg.Done(); udpSent = vrclient(t, relay, "udp", "live-udp", 2*time.Second) }()
			wg.Wait()
			time.Sleep(200 * time.Millisecond)
			if err := rec.stop(t, os.Interrupt); err != nil {
				t.Fatalf("record live: %v\n%s", err, rec.out.String())
			}
			if !strings.Contains(rec.out.String(), "libpcap received") {
				t.Fatalf("no final stats:\n%s", rec.out.String())
			}
			c, err := capture.ReadFile(out, reprise(mustPort(t, port)))
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range c.Warnings {
				// The tail of the relay's readiness probe may be in view.
				if !strings.Contains(w, "carried no protocol frames") && !cpuReorder(w) {
					t.Fatalf("warnings on a clean capture: %q", c.Warnings)
				}
			}
			samePrefix(t, flowOf(t, c, "live-tcp"), tcpSent, true)
			samePrefix(t, flowOf(t, c, "live-udp"), udpSent, true)
		})
	}
}

// reorderWarning is the reader's note on packets stamped earlier than
// the one before them.
var reorderWarning = regexp.MustCompile(`packets were earlier than a packet before them in the file \(first: packet \d+, by up to ([^)]+)\)`)

// cpuReorder reports whether w says packets were out of time order by
// under a millisecond: the kernel stamps a loopback packet on the CPU that
// sends it, so the two clients' packets may reach the capture a few µs out
// of order (seen: 2.145µs at load 20). The frames must still match what
// the clients sent, which the test checks.
func cpuReorder(w string) bool {
	m := reorderWarning.FindStringSubmatch(w)
	if m == nil {
		return false
	}
	d, err := time.ParseDuration(m[1])
	return err == nil && d < time.Millisecond
}

func mustPort(t *testing.T, s string) uint16 {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	return uint16(n)
}

// TestLiveStopMidCapture stops record while traffic flows: SIGINT must
// leave a file that reads to its end, kill -9 one that reads up to its last
// whole record (a cut tail is reported, not an error).
func TestLiveStopMidCapture(t *testing.T) {
	requireRoot(t)
	relay := startRelay(t)
	_, port, _ := net.SplitHostPort(relay)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cut.pcap")
			rec := start(t, "record", "live", "--iface", "lo", "--port", port, "--out", out)
			rec.waitFor(t, "capturing on lo")
			user := "cut-" + strconv.Itoa(int(sig))
			var sent [][]byte
			done := make(chan struct{})
			go func() { defer close(done); sent = vrclient(t, relay, "tcp", user, 3*time.Second) }()
			rec.waitFor(t, "record: ") // progress lines show traffic
			time.Sleep(1500 * time.Millisecond)
			err := rec.stop(t, sig)
			if sig == syscall.SIGINT && err != nil {
				t.Fatalf("record after SIGINT: %v\n%s", err, rec.out.String())
			}
			<-done
			c, err := capture.ReadFile(out, reprise(mustPort(t, port)))
			if err != nil {
				t.Fatalf("reading the file after %s: %v", sig, err)
			}
			f := flowOf(t, c, user)
			samePrefix(t, f, sent, false)
			if len(f.ClientFrames) >= len(sent) {
				t.Fatalf("captured all %d frames: the stop came too late", len(sent))
			}
			tail := strings.Contains(strings.Join(c.Warnings, "\n"), "cut tail")
			if sig == syscall.SIGINT && tail {
				t.Fatalf("SIGINT left a cut tail: %q", c.Warnings)
			}
			t.Logf("%s: %d packets, %d of %d frames; warnings %q", sig, c.Packets, len(f.ClientFrames), len(sent), c.Warnings)
		})
	}
}

func TestErrors(t *testing.T) {
	// Under /tmp itself, so nobody can reach it in the permission test.
	dir, err := os.MkdirTemp("", "record-errors")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o777)
	tests := []struct {
		name   string
		args   []string
		nobody bool
		want   []string
	}{
		{"unknown interface", []string{"live", "--iface", "nope0", "--out", filepath.Join(dir, "a.pcap")}, false, []string{`unknown interface "nope0"`, "lo"}},
		{"unwritable output", []string{"live", "--out", "/nonexistent-dir/a.pcap"}, false, []string{"cannot write output file", "/nonexistent-dir/a.pcap"}},
		{"no permission", []string{"live", "--out", filepath.Join(dir, "b.pcap")}, true, []string{"root or CAP_NET_RAW", "record proxy"}},
		{"bad proto", []string{"live", "--proto", "sctp", "--out", filepath.Join(dir, "c.pcap")}, false, []string{"--proto"}},
		{"no out", []string{"proxy"}, false, []string{`"out" not set`}},
		{"proxy unwritable output", []string{"proxy", "--out", "/nonexistent-dir/a.pcap"}, false, []string{"create capture file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bins["record"], tc.args...)
			if tc.nobody {
				testproc.NeedRoot(t, "dropping to nobody")
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
			}
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("exit 0:\n%s", out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			last := lines[len(lines)-1]
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Fatalf("last line %q lacks %q", last, w)
				}
			}
		})
	}
}

// TestFailedStartKeepsFile: a record that cannot start (a proxy whose
// address is taken, a live capture with a bad filter, an unknown
// interface) leaves an existing --out file byte for byte as it was, and
// leaves no temporary file behind.
func TestFailedStartKeepsFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "session.pcap")
	want := bytes.Repeat([]byte("a precious capture "), 50000)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name string
		args []string
		root bool
	}{
		{"proxy address taken", []string{"proxy", "--listen", busy.Addr().String(), "--out", out}, false},
		{"bad filter", []string{"live", "--filter", "this is not bpf((", "--out", out}, true},
		{"unknown interface", []string{"live", "--iface", "nope0", "--out", out}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.root {
				requireRoot(t)
			}
			if err := os.WriteFile(out, want, 0o644); err != nil {
				t.Fatal(err)
			}
			b, err := exec.Command(bins["record"], tt.args...).CombinedOutput()
			if err == nil {
				t.Fatalf("record started:\n%s", b)
			}
			got, err := os.ReadFile(out)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("the existing file changed (%d bytes, err %v); record said:\n%s", len(got), err, b)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 {
				t.Errorf("files left: %v", ents)
			}
		})
	}
}

// TestLiveStopsWithNoPackets: a live capture on a port nobody uses ends on
// time at --duration, and promptly on the first SIGTERM, with a valid file.
func TestLiveStopsWithNoPackets(t *testing.T) {
	requireRoot(t)
	port := strconv.Itoa(testproc.FreePort(t)) // a filter only: nothing binds it
	t.Run("duration", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "quiet.pcap")
		start := time.Now()
		b, err := exec.Command(bins["record"], "live", "--iface", "lo", "--port", port, "--out", out, "--duration", "2s").CombinedOutput()
		if took := time.Since(start); err != nil || took > 6*time.Second {
			t.Fatalf("exit %v after %v:\n%s", err, took, b)
		}
		if _, err := capture.ReadFile(out, reprise(0)); err != nil {
			t.Errorf("file: %v", err)
		}
	})
	t.Run("SIGTERM", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "quiet.pcap")
		rec := start(t, "record", "live", "--iface", "lo", "--port", port, "--out", out)
		rec.waitFor(t, "capturing on lo")
		time.Sleep(1500 * time.Millisecond)
		begin := time.Now()
		if err := rec.stop(t, syscall.SIGTERM); err != nil {
			t.Fatalf("record after SIGTERM: %v\n%s", err, rec.out.String())
		}
		if took := time.Since(begin); took > 3*time.Second {
			t.Errorf("SIGTERM took %v to end the capture", took)
		}
		if _, err := capture.ReadFile(out, reprise(0)); err != nil {
			t.Errorf("file: %v", err)
		}
	})
}

// TestExitCodes: bad usage exits 2, a failure at run time 1.
func TestExitCodes(t *testing.T) {
	tests := []struct {
		args []string
		code int
	}{
		{[]string{"live", "--bogus"}, 2},
		{[]string{"live"}, 2}, // --out missing
		{[]string{"proxy", "extra-arg", "--out", "x.pcap"}, 2},
		{[]string{"live", "--proto", "sctp", "--out", "x.pcap"}, 2},
		{[]string{"nonsense"}, 2},
		{[]string{"proxy", "--out", "/nonexistent-dir/a.pcap"}, 1},
		// Addresses are host:port, refused when parsed, before a file is
		// made or a port bound.
		{[]string{"proxy", "--out", "a.pcap", "--upstream", "7400"}, 2},
		{[]string{"proxy", "--out", "a.pcap", "--upstream", "127.0.0.1"}, 2},
		{[]string{"proxy", "--out", "a.pcap", "--upstream", ":7400"}, 2},
		{[]string{"proxy", "--out", "a.pcap", "--listen", "7500"}, 2},
		{[]string{"proxy", "--out", "a.pcap", "--listen", "127.0.0.1:x"}, 2},
	}
	for _, tt := range tests {
		cmd := exec.Command(bins["record"], tt.args...)
		cmd.Dir = t.TempDir()
		b, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tt.code {
			t.Errorf("record %v: exit %d, want %d:\n%s", tt.args, code, tt.code, b)
		}
		if tt.code == 2 && strings.Contains(strings.Join(tt.args, " "), "a.pcap") {
			if _, err := os.Stat(filepath.Join(cmd.Dir, "a.pcap")); err == nil {
				t.Errorf("record %v: refused, yet wrote a.pcap", tt.args)
			}
			if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "want host:port") {
				t.Errorf("record %v: want one line saying host:port, got:\n%s", tt.args, b)
			}
		}
	}
}

// reprise are capture options as the reprise profile reads a recording
// of the relay on port (0: its default port).
func reprise(port uint16) capture.Options {
	if port == 0 {
		port = wire.DefaultPort
	}
	return capture.Options{Framer: profile.RepriseFramer(0), ServerPort: port}
}
