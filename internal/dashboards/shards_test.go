package dashboards

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// TestFleetDashboardShards: a fleet run as 2 shards, both in the fleet job
// of the project's Prometheus config: the fleet dashboard counts 2 shards,
// sums their clients and logins to the whole fleet's, and shows each
// shard's host CPU idle as its own series labelled with its shard.
func TestFleetDashboardShards(t *testing.T) {
	promBin := requireTool(t, "prometheus", "prometheus")
	root := repoRoot(t)
	dashboards := loadDashboards(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()

	// Shard 0 serves the barrier on a listener bound here (--barrier-fd),
	// as each shard serves /metrics on one (--metrics-fd).
	barrier, barrierLn := testproc.Inherit(t)
	var shards []string
	var lns []*os.File
	for range 2 {
		addr, f := testproc.Inherit(t)
		shards, lns = append(shards, addr), append(lns, f)
	}
	relay := testproc.StartRelay(t, bins["relay"], "--log-level", "warn")
	relayMetrics, relayTCP := relay.Metrics, relay.TCP

	b, err := os.ReadFile(filepath.Join(root, "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(b), `"127.0.0.1:9400"`, strconv.Quote(relayMetrics), 1)
	cfg = strings.Replace(cfg, `"127.0.0.1:9401"`, strconv.Quote(shards[0])+", "+strconv.Quote(shards[1]), 1)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	_, ports := testproc.StartServer(t, 1, func(p []int) *exec.Cmd {
		return exec.Command(promBin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", p[0]), "--log.level=warn")
	})
	p := prom{base: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	if err := waitReady(ctx, p.base); err != nil {
		t.Fatal(err)
	}
	capture := filepath.Join(root, "captures", "vr-session.pcap")
	for i := range shards {
		args := []string{"--capture", capture, "--loop", "12s,48s", "--target", relayTCP,
			"--clients", strconv.Itoa(e2eClients), "--login-interval", e2eLoginInterval.String(), "--duration", "60s",
			"--shard", fmt.Sprintf("%d/2", i), "--barrier", barrier}
		var inherit []*os.File
		if i == 0 {
			inherit = []*os.File{barrierLn}
		}
		startReplayOn(t, lns[i], inherit, args...)
	}
	if err := waitValue(ctx, p, `sum(replay_clients_logged_in{job="fleet"})`, e2eClients); err != nil {
		t.Fatal(err)
	}
	select {
	case <-time.After(e2eSteady):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	at := scrapedAt(ctx, t, p, 3)
	values := evalAll(ctx, t, p, dashboards, at, map[string]string{"relay": relayMetrics, "fleet": shards[0] + "|" + shards[1]})
	for _, c := range []struct {
		title string
		want  float64
	}{{"Shards", 2}, {"Clients requested", e2eClients}, {"Logged in", e2eClients}} {
		if got := values.get(t, "reprise-fleet", c.title); got != c.want {
			t.Errorf("fleet dashboard %q: %v, want %v (summed over the shards)", c.title, got, c.want)
		}
	}
	idle := values["reprise-fleet"]["Fleet host CPU idle %"]
	if len(idle) != 1 {
		t.Fatalf("CPU idle panel: %d queries", len(idle))
	}
	var labels []string
	for _, s := range idle[0] {
		labels = append(labels, s.Labels["shard"]+"/"+s.Labels["shards"])
	}
	slices.Sort(labels)
	if !slices.Equal(labels, []string{"0/2", "1/2"}) {
		t.Errorf("CPU idle series by shard %v, want one per shard (0/2, 1/2): %v", labels, idle[0])
	}
}
