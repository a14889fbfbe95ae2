package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// wsRoomStats is bench/cmd/wsroom's /stats.
type wsRoomStats struct {
	Accepted, Connections, In, Out, Dropped int64
}

func getWSRoomStats(t *testing.T, addr string) wsRoomStats {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/stats")
	if err != nil {
		t.Fatalf("wsroom stats: %v", err)
	}
	defer resp.Body.Close()
	var s wsRoomStats
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("wsroom stats: %v", err)
	}
	return s
}

// buildWSRoom builds bench/cmd/wsroom (the bench module's) into a test
// directory.
func buildWSRoom(t *testing.T) string {
	t.Helper()
	root, err := testproc.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "wsroom")
	if out, err := exec.Command("go", "build", "-C", filepath.Join(root, "bench"), "-o", bin, "./cmd/wsroom").CombinedOutput(); err != nil {
		t.Fatalf("build bench/cmd/wsroom: %v\n%s", err, out)
	}
	return bin
}

// TestWSRoomServer keeps `make bench-fleet`'s WebSocket room server and
// its profile from rotting: bench/cmd/wsroom runs as its own process, its
// scripted client (200 B text messages at 20 Hz) is recorded through
// record proxy, and 40 clients in 4 rooms of 10 replay the recording N:N
// with bench/wsroom.yaml. The server's own counts equal the fleet's
// exactly: messages in = sent, messages out = received, none dropped.
func TestWSRoomServer(t *testing.T) {
	t.Parallel()
	bin := buildWSRoom(t)
	srv := testproc.Start(t, bin, "--listen", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := srv.WaitOutput(ctx, srv.Stdout, regexp.MustCompile(`listening ws=(\S+)`))
	if err != nil {
		t.Fatal(err)
	}
	addr := m[1]

	capPath := filepath.Join(t.TempDir(), "wsroom.pcap")
	proxy, listen := startRecordProxy(t, addr, capPath)
	if out, err := exec.Command(bin, "client", "--url", "ws://"+listen+"/ws?room=lobby&user=alice01",
		"--duration", "2s").CombinedOutput(); err != nil {
		t.Fatalf("wsroom client: %v\n%s", err, out)
	}
	if err := proxy.Stop(os.Interrupt, 10*time.Second); err != nil {
		t.Fatalf("record proxy: %v\n%s", err, proxy.Stderr)
	}

	prof := filepath.Join("..", "..", "bench", "wsroom.yaml")
	before := getWSRoomStats(t, addr)
	res := replay(t, "--profile", prof, "--capture", capPath, "--target", addr,
		"--clients", "40", "--room-size", "10", "--loop", suggestedLoopOf(t, prof, capPath), "--login-interval", "5ms",
		"--login-timeout", "30s", "--after-logins", "3s", "--heartbeat", "0", "--drain-deliveries", "10s")
	mustOK(t, res)
	// The server's counts settle once every connection closed.
	var after wsRoomStats
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		after = getWSRoomStats(t, addr)
		if after.Connections == 0 || time.Now().After(end) {
			break
		}
	}
	s := res.sum
	in, out := after.In-before.In, after.Out-before.Out
	if s.LoginsSucceeded != 40 || len(s.Disconnects) != 0 || s.MessagesSent == 0 || s.MessagesReceived == 0 {
		t.Fatalf("logins %d, disconnects %v, sent %d, received %d\n%s", s.LoginsSucceeded, s.Disconnects, s.MessagesSent, s.MessagesReceived, res.stdout)
	}
	if s.MessagesSent != in || s.MessagesReceived != out || after.Dropped != before.Dropped || after.Accepted-before.Accepted != 40 {
		t.Errorf("fleet sent %d received %d; server in %d out %d dropped %d accepted %d",
			s.MessagesSent, s.MessagesReceived, in, out, after.Dropped-before.Dropped, after.Accepted-before.Accepted)
	}
	if s.LatencyMS.P50 <= 0 {
		t.Errorf("no latency measured: %+v", s.LatencyMS)
	}
	if s.ClientsPolled != 40 {
		t.Errorf("%d of the 40 WebSocket clients read by the schedulers' pollers", s.ClientsPolled)
	}
	t.Logf("wsroom, 40 clients in rooms of 10 for 4 s: fleet sent %d received %d, server in %d out %d; latency p50 %.2f p99 %.2f ms",
		s.MessagesSent, s.MessagesReceived, in, out, s.LatencyMS.P50, s.LatencyMS.P99)
}
