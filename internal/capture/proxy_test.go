package capture

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/reprise-harness/reprise/internal/client"
	"github.com/reprise-harness/reprise/internal/relay"
	"github.com/reprise-harness/reprise/internal/testproc"
	"github.com/reprise-harness/reprise/internal/wire"
)

// startRelay runs the real relay in-process on a free 127.0.0.1 port.
func startRelay(t *testing.T) (string, func()) {
	t.Helper()
	s, stop := startRelayServer(t)
	return s.Addr().String(), stop
}

// startRelayServer is startRelay, returning the relay itself.
func startRelayServer(t *testing.T) (*relay.Server, func()) {
	t.Helper()
	s, err := relay.New(relay.Config{Listen: "127.0.0.1:0", UDP: relay.UDPSameAsTCP, Metrics: "off"}, zap.NewNop(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return s, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}
}

// playClient joins through addr, sends a few frames, leaves, and returns its
// local address and the frames it sent (without UDP tokens).
func playClient(ctx context.Context, addr string, udp bool, id int) (netip.AddrPort, [][]byte, error) {
	dial := client.Dial
	if udp {
		dial = client.DialUDP
	}
	c, err := dial(ctx, addr)
	if err != nil {
		return netip.AddrPort{}, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	user := fmt.Sprintf("user-%d", id)
	var sent [][]byte // every frame, the UDP join's confirmation included
	c.OnSend(func(frame []byte) { sent = append(sent, bytes.Clone(frame)) })
	if _, err := c.Join("lobby", user, nil); err != nil {
		return netip.AddrPort{}, nil, err
	}
	for i := 0; i < 20; i++ {
		m := wire.Send{Mode: wire.Othercast, HasTrace: true, Trace: int64(i), Payload: bytes.Repeat([]byte{byte(id), byte(i)}, 60)}
		if err := c.Send(m); err != nil {
			return netip.AddrPort{}, nil, err
		}
	}
	if err := c.Heartbeat(99); err != nil {
		return netip.AddrPort{}, nil, err
	}
	if _, err := c.RecvType(wire.TypeHeartbeatReply); err != nil {
		return netip.AddrPort{}, nil, err
	}
	if err := c.Leave(); err != nil {
		return netip.AddrPort{}, nil, err
	}
	local := netip.MustParseAddrPort(c.NetConn().LocalAddr().String())
	return unmap(local), sent, nil
}

func TestProxyRecordsEveryFrame(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, name := range []string{"session.pcap", "session.pcapng"} {
		t.Run(name, func(t *testing.T) { testProxy(t, name) })
	}
}

func testProxy(t *testing.T, name string) {
	srv, stopRelay := startRelayServer(t)
	defer stopRelay()
	upstream := srv.Addr().String()
	path := filepath.Join(t.TempDir(), name)
	w, err := Create(path, 1, DefaultSnaplen)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(ProxyConfig{Listen: "127.0.0.1:0", Upstream: upstream, Writer: w})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()

	type result struct {
		local netip.AddrPort
		sent  [][]byte
		udp   bool
		err   error
	}
	results := make([]result, 5)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			udp := i >= 3
			local, sent, err := playClient(ctx, p.Addr().String(), udp, i)
			results[i] = result{local, sent, udp, err}
		}()
	}
	wg.Wait()
	// A client's last frame (its leave) may still be on its way through
	// the proxy, which writes a frame to the capture before it forwards
	// it: wait until the relay has seen every client end, TCP or UDP.
	for deadline := time.Now().Add(testproc.Patience(t)); srv.Connections() > 0; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the relay still counts %d connections after every client left", srv.Connections())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	packets, _ := w.Stats()

	c := readPath(t, path)
	if int64(c.Packets) != packets {
		t.Fatalf("read %d packets, wrote %d", c.Packets, packets)
	}
	flows := map[netip.AddrPort]*Flow{}
	for _, f := range c.Flows {
		flows[f.Client] = f
	}
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("client %d: %v", i, r.err)
		}
		f := flows[r.local]
		if f == nil {
			t.Fatalf("client %d (%s): no flow; flows %v", i, r.local, c.Flows)
		}
		if want := map[bool]Transport{false: TCP, true: UDP}[r.udp]; f.Transport != want || f.Server.String() != upstream {
			t.Fatalf("client %d: flow %s, want %s to %s", i, f, want, upstream)
		}
		equalFrames(t, fmt.Sprintf("client %d", i), f.ClientFrames, r.sent)
		if f.Resynced || len(f.Notes) > 0 {
			t.Fatalf("client %d: notes %q", i, f.Notes)
		}
	}
	checkTshark(t, path, c.Packets)
}

// checkTshark reads the file with tshark: no error output, same packets.
func checkTshark(t *testing.T, path string, packets int) {
	t.Helper()
	tshark := testproc.NeedTool(t, "tshark", "tshark")
	cmd := exec.Command(tshark, "-n", "-r", path, "-T", "fields", "-e", "frame.number")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("tshark -r %s: %v: %s", path, err, errOut.String())
	}
	if s := strings.TrimSpace(errOut.String()); s != "" && !strings.Contains(s, "Running as user") {
		t.Fatalf("tshark complained: %s", s)
	}
	lines := strings.Fields(out.String())
	if len(lines) != packets {
		t.Fatalf("tshark counts %d packets, we read %d", len(lines), packets)
	}
	if last, _ := strconv.Atoi(lines[len(lines)-1]); last != packets {
		t.Fatalf("tshark's last frame is %d, want %d", last, packets)
	}
}
