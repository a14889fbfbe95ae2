package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/reprise-harness/reprise/internal/testproc"
)

// bins are the real programs under test by name, built once in TestMain.
var bins map[string]string

func TestMain(m *testing.M) {
	os.Exit(testproc.Main(m, &bins, testproc.Options{CheckLeaks: true}, "relay", "replay"))
}

// e2e run parameters: small enough for a shared 2-core machine, long enough
// for rate() windows over steady traffic.
const (
	e2eClients       = 8
	e2eLoginInterval = 100 * time.Millisecond
	e2eRateInterval  = "10s" // what Grafana makes of $__rate_interval at 1 s scrapes on a 2 h range
	e2eSteady        = 12 * time.Second
)

// TestDashboardsEndToEnd runs a short relay + fleet load scraped by a real
// Prometheus with the project's own config, then evaluates every query of
// every panel of every dashboard through Prometheus's HTTP API, as Grafana
// would, and checks that each returns data that makes sense.
func TestDashboardsEndToEnd(t *testing.T) {
	promBin := requireTool(t, "prometheus", "prometheus")
	promtool := requireTool(t, "promtool", "prometheus")
	root := repoRoot(t)
	dashboards := loadDashboards(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	dir := t.TempDir()
	began := time.Now()

	// The relay binds port 0 and says where; the fleet serves /metrics on a
	// listener bound here (port 0) that it inherits; Prometheus is started
	// again on another port if its port was taken (testproc.StartServer).
	fleetMetrics, fleetLn := testproc.Inherit(t)
	relay := testproc.StartRelay(t, bins["relay"], "--log-level", "warn")
	relayMetrics, relayTCP := relay.Metrics, relay.TCP

	cfg := writePromConfig(t, root, dir, relayMetrics, fleetMetrics)
	if out, err := exec.Command(promtool, "check", "config", cfg).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config on the test's config: %v\n%s", err, out)
	}
	_, ports := testproc.StartServer(t, 1, func(p []int) *exec.Cmd {
		return exec.Command(promBin, "--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
			fmt.Sprintf("--web.listen-address=127.0.0.1:%d", p[0]), "--log.level=warn")
	})
	p := prom{base: fmt.Sprintf("http://127.0.0.1:%d", ports[0])}
	if err := waitReady(ctx, p.base); err != nil {
		t.Fatal(err)
	}

	summaryPath := filepath.Join(dir, "summary.json")
	// The bundled capture and the loop points the README's demo uses.
	capture, loop := filepath.Join(root, "captures", "vr-session.pcap"), "12s,48s"
	fleet := startReplayOn(t, fleetLn, nil,
		"--capture", capture,
		"--loop", loop,
		"--target", relayTCP,
		"--clients", strconv.Itoa(e2eClients),
		"--login-interval", e2eLoginInterval.String(),
		"--duration", "60s", // stopped with Ctrl-C once the queries ran
		"--summary", summaryPath)

	// Prometheus starts scraping a few seconds after it is ready; wait
	// until it has seen every client logged in, then for steady traffic to
	// fill the rate windows.
	loggedIn := `sum(replay_clients_logged_in{job="fleet"})`
	if err := waitValue(ctx, p, loggedIn, e2eClients); err != nil {
		t.Fatal(err)
	}
	t.Logf("Prometheus saw %d clients logged in %v after start", e2eClients, time.Since(began).Round(time.Millisecond))
	select {
	case <-time.After(e2eSteady):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	at := scrapedAt(ctx, t, p, 2)

	checkMetricsLint(ctx, t, promtool, relayMetrics, fleetMetrics)
	checkVariables(ctx, t, p, dashboards, map[string]string{"relay": relayMetrics, "fleet": fleetMetrics})
	values := evalAll(ctx, t, p, dashboards, at, map[string]string{"relay": relayMetrics, "fleet": fleetMetrics})
	checkSanity(ctx, t, p, values, at)

	// Ctrl-C ends the run; the fleet writes its summary, its own count.
	if err := fleet.Stop(syscall.SIGINT, 15*time.Second); err != nil {
		t.Fatalf("replay: %v; stderr:\n%s", err, testproc.Tail(fleet.Stderr.String(), 20))
	}
	var summary struct {
		PeakLoggedIn   float64 `json:"peak_logged_in"`
		LoginsOK       float64 `json:"logins_succeeded"`
		BytesReceived  float64 `json:"bytes_received"`
		MessagesRecvd  float64 `json:"messages_received"`
		ClientsWanted  float64 `json:"clients_requested"`
		LoginAttempts  float64 `json:"login_attempts"`
		MessagesSent   float64 `json:"messages_sent"`
		BytesSent      float64 `json:"bytes_sent"`
		DurationSecond float64 `json:"duration_s"`
	}
	b, err := os.ReadFile(summaryPath)
	if err != nil {
		t.Fatalf("fleet summary: %v", err)
	}
	if err := json.Unmarshal(b, &summary); err != nil {
		t.Fatalf("fleet summary: %v\n%s", err, b)
	}
	dash := values.get(t, "reprise-fleet", "Logged in")
	if dash != summary.PeakLoggedIn || summary.PeakLoggedIn != e2eClients {
		t.Errorf("logged in: dashboard %v, fleet summary peak_logged_in %v, clients %d; want all equal", dash, summary.PeakLoggedIn, e2eClients)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, b); err == nil {
		b = compact.Bytes()
	}
	t.Logf("fleet summary: %s", b)
	t.Logf("whole test %v", time.Since(began).Round(time.Millisecond))
}

// writePromConfig writes prometheus/prometheus.yml with its two default
// targets replaced by the addresses of the programs this test started.
func writePromConfig(t *testing.T, root, dir, relayMetrics, fleetMetrics string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "prometheus", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for def, addr := range map[string]string{`"127.0.0.1:9400"`: relayMetrics, `"127.0.0.1:9401"`: fleetMetrics} {
		if strings.Count(cfg, def) != 1 {
			t.Fatalf("prometheus.yml must hold target %s exactly once", def)
		}
		cfg = strings.Replace(cfg, def, strconv.Quote(addr), 1)
	}
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitValue polls expr until it equals want.
func waitValue(ctx context.Context, p prom, expr string, want float64) error {
	var last []sample
	var lastErr error
	for {
		last, lastErr = p.query(ctx, expr, time.Now())
		if lastErr == nil && len(last) == 1 && last[0].Value == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never reached %v (last %v, %v): %w", expr, want, last, lastErr, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// scrapedAt is a recent instant at which the last scrape of each of the
// targets Prometheus scrapes succeeded (up is 1 for every one). A scrape
// that failed (one past its 1 s timeout on a loaded host) makes every
// series of its target stale: a gauge then has no value at that instant
// although it had one a scrape before, so the dashboards are judged at a
// moment whose scrapes are in, never a guessed "1.5 s ago".
func scrapedAt(ctx context.Context, t *testing.T, p prom, targets int) time.Time {
	t.Helper()
	for {
		// A moment whose scrapes have surely been written (a scrape
		// under way is not yet).
		at := time.Now().Add(-1500 * time.Millisecond)
		ups, err := p.query(ctx, "up", at)
		ok := err == nil && len(ups) == targets
		for _, u := range ups {
			ok = ok && u.Value == 1
		}
		if ok {
			return at
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no instant with every scrape in (up %v, %v): %v", ups, err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkMetricsLint runs `promtool check metrics` on a scrape of each program.
func checkMetricsLint(ctx context.Context, t *testing.T, promtool string, addrs ...string) {
	t.Helper()
	for _, addr := range addrs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("scrape %s: %v", addr, err)
			continue
		}
		var body bytes.Buffer
		_, err = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Errorf("scrape %s: %v", addr, err)
			continue
		}
		cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
		cmd.Stdin = &body
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics on %s: %v\n%s", addr, err, out)
		}
	}
}

// varJob reads the job out of a label_values(...) variable definition.
var varJob = regexp.MustCompile(`job="(\w+)"`)

// checkVariables asks Prometheus what Grafana's label_values(sel, instance)
// would list for each variable and wants the test's instance among them.
func checkVariables(ctx context.Context, t *testing.T, p prom, ds []*Dashboard, addrByJob map[string]string) {
	t.Helper()
	def := regexp.MustCompile(`^label_values\((.+),\s*instance\)$`)
	for _, d := range ds {
		for _, v := range d.Templating.List {
			m := def.FindStringSubmatch(v.Definition)
			j := varJob.FindStringSubmatch(v.Definition)
			if m == nil || j == nil {
				t.Errorf("%s variable %s: definition %q", d.UID, v.Name, v.Definition)
				continue
			}
			got, err := p.seriesInstances(ctx, m[1])
			if err != nil {
				t.Errorf("%s variable %s: %v", d.UID, v.Name, err)
				continue
			}
			if len(got) != 1 || got[0] != addrByJob[j[1]] {
				t.Errorf("%s variable %s lists %v; want [%s]", d.UID, v.Name, got, addrByJob[j[1]])
			}
		}
	}
}

// panelValues holds what each panel's queries returned, by dashboard uid
// and panel title.
type panelValues map[string]map[string][][]sample

// get returns the single value of a panel with one query and one series.
func (pv panelValues) get(t *testing.T, dash, title string) float64 {
	t.Helper()
	qs := pv[dash][title]
	if len(qs) != 1 || len(qs[0]) != 1 {
		t.Fatalf("%s panel %q: want one query with one series, got %v", dash, title, qs)
	}
	return qs[0][0].Value
}

// evalAll evaluates every query of every panel at time at, with Grafana's
// variables replaced by concrete values, and wants data from each: at least
// one series, every value finite.
func evalAll(ctx context.Context, t *testing.T, p prom, ds []*Dashboard, at time.Time, addrByJob map[string]string) panelValues {
	t.Helper()
	out := panelValues{}
	n := 0
	for _, d := range ds {
		vars := map[string]string{"__rate_interval": e2eRateInterval, "__interval": "5s", "__range": "2h"}
		for _, v := range d.Templating.List {
			if j := varJob.FindStringSubmatch(v.Definition); j != nil {
				// The literal address: its dots match themselves, and PromQL
				// strings do not accept regexp escapes like \. anyway.
				vars[v.Name] = addrByJob[j[1]]
			}
		}
		out[d.UID] = map[string][][]sample{}
		for _, q := range d.Queries() {
			expr, err := Substitute(q.Expr, vars)
			if err != nil {
				t.Errorf("%s: %v", q, err)
				continue
			}
			ss, err := p.query(ctx, expr, at)
			n++
			switch {
			case err != nil:
				t.Errorf("%s: %v", q, err)
			case len(ss) == 0:
				t.Errorf("%s: no data for %s", q, expr)
			default:
				for _, s := range ss {
					if math.IsNaN(s.Value) || math.IsInf(s.Value, 0) {
						t.Errorf("%s: %s gives %v", q, expr, s)
					}
				}
			}
			out[d.UID][q.Panel] = append(out[d.UID][q.Panel], ss)
		}
	}
	t.Logf("evaluated %d panel queries", n)
	return out
}

// checkSanity compares what the dashboards show with what the programs
// counted themselves.
func checkSanity(ctx context.Context, t *testing.T, p prom, pv panelValues, at time.Time) {
	t.Helper()
	send := pv.get(t, "reprise-relay", "Send")
	if send <= 0 {
		t.Errorf("relay send Gbps = %v, want > 0", send)
	}
	// The same window over what the fleet counted received: the relay's
	// only clients are this fleet, so the two must agree.
	fleetRecv, err := p.one(ctx, `sum(rate(replay_received_bytes_total{job="fleet"}[`+e2eRateInterval+`])) * 8 / 1e9`, at)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(send-fleetRecv) > 0.1*fleetRecv {
		t.Errorf("relay send %.6f Gbps vs fleet received %.6f Gbps: more than 10%% apart", send, fleetRecv)
	}
	window := fmt.Sprintf("[%ds]", int(e2eSteady.Seconds())-2)
	sent, err := p.one(ctx, `sum(increase(relay_sent_bytes_total{job="relay"}`+window+`))`, at)
	if err != nil {
		t.Fatal(err)
	}
	recv, err := p.one(ctx, `sum(increase(replay_received_bytes_total{job="fleet"}`+window+`))`, at)
	if err != nil {
		t.Fatal(err)
	}
	if sent <= 0 || math.Abs(sent-recv) > 0.1*recv {
		t.Errorf("over %s the relay sent %.0f bytes and the fleet received %.0f: want > 0 and within 10%%", window, sent, recv)
	}
	t.Logf("send %.6f Gbps, fleet received %.6f Gbps; over %s relay sent %.0f B, fleet received %.0f B", send, fleetRecv, window, sent, recv)

	// Every CPU idle panel, of the relay's host and the fleet's.
	for dash, panels := range pv {
		for title, qs := range panels {
			if !strings.Contains(strings.ToLower(title), "idle") {
				continue
			}
			for _, ss := range qs {
				for _, s := range ss {
					if s.Value < 0 || s.Value > 100 {
						t.Errorf("%s panel %q: %v outside 0..100 %%", dash, title, s)
					}
				}
			}
			t.Logf("%s %q: %v", dash, title, qs)
		}
	}
	conns := pv["reprise-relay"]["Connections"]
	if len(conns) != 1 || len(conns[0]) != 1 || conns[0][0].Value != e2eClients {
		t.Errorf("relay connections panel shows %v; want %d", conns, e2eClients)
	}
}
