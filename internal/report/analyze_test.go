package report

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/reprise-harness/reprise/internal/testproc"
)

func TestFitKnownCoefficients(t *testing.T) {
	// Send Gbps of a relay whose N:N traffic is 2e-6·n² + 3e-4·n + 0.01
	// and whose 1:N traffic is 0.002·n + 0.05, sampled at n = 1..600.
	var n, quad, lin []float64
	for i := 1; i <= 600; i++ {
		x := float64(i)
		n = append(n, x)
		quad = append(quad, 2e-6*x*x+3e-4*x+0.01)
		lin = append(lin, 0.002*x+0.05)
	}
	tests := []struct {
		name string
		fit  Fit
		want []float64
	}{
		{"quadratic of quadratic", FitQuadratic(n, quad), []float64{2e-6, 3e-4, 0.01}},
		{"linear of linear", FitLinear(n, lin), []float64{0.002, 0.05}},
		{"quadratic of linear has no n²", FitQuadratic(n, lin), []float64{0, 0.002, 0.05}},
	}
	for _, tt := range tests {
		if !tt.fit.OK {
			t.Fatalf("%s: no fit: %s", tt.name, tt.fit.Reason)
		}
		for i, w := range tt.want {
			if got := float64(tt.fit.Coeffs[i]); math.Abs(got-w) > 1e-9*math.Max(1, math.Abs(w)) {
				t.Errorf("%s: coefficient %d = %g, want %g", tt.name, i, got, w)
			}
		}
		if r2 := float64(tt.fit.R2); math.Abs(r2-1) > 1e-9 {
			t.Errorf("%s: R² = %v, want 1", tt.name, r2)
		}
	}
	// A line through quadratic data fits worse, and says so in R².
	if r2 := float64(FitLinear(n, quad).R2); r2 > 0.99 || r2 < 0.8 {
		t.Errorf("linear fit of quadratic data: R² = %v, want clearly below 1", r2)
	}
}

func TestFitNeedsDistinctCounts(t *testing.T) {
	f := FitQuadratic([]float64{5, 5, 6, 6}, []float64{1, 1, 2, 2})
	if f.OK || f.Reason == "" {
		t.Fatalf("two distinct x for a quadratic: got %+v, want no fit with a reason", f)
	}
}

func TestDetectPlateau(t *testing.T) {
	ramp := func(maxIn, attempts float64, seconds int, pauseFrom, pauseTo int) []Point {
		var pts []Point
		a := 0.0
		for s := 1; s <= seconds; s++ {
			if s < pauseFrom || s >= pauseTo {
				a = math.Min(attempts, a+10)
			}
			pts = append(pts, Point{T: float64(s), LoggedIn: math.Min(a, maxIn), LoginAttempts: a})
		}
		return pts
	}
	tests := []struct {
		name     string
		pts      []Point
		detected bool
		loggedIn float64
		atS      float64
	}{
		{"plateau at 504 while attempts go to 546", ramp(504, 546, 80, 0, 0), true, 504, 50},
		{"everyone logged in, no more attempts", ramp(1000, 300, 60, 0, 0), false, 300, 30},
		{"a ramp pause is not a plateau", ramp(1000, 300, 60, 10, 30), false, 300, 50},
		{"pause then plateau", ramp(200, 400, 80, 10, 20), true, 200, 30},
	}
	for _, tt := range tests {
		pl := DetectPlateau(tt.pts)
		if pl.Detected != tt.detected || float64(pl.LoggedIn) != tt.loggedIn || float64(pl.AtS) != tt.atS {
			t.Errorf("%s: got detected=%v logged_in=%v at=%v, want %v %v %v",
				tt.name, pl.Detected, pl.LoggedIn, pl.AtS, tt.detected, tt.loggedIn, tt.atS)
		}
	}
	if pl := DetectPlateau(nil); pl.Detected || !math.IsNaN(float64(pl.LoggedIn)) {
		t.Errorf("no points: got %+v", pl)
	}
}

func TestAnalyzeSynthetic(t *testing.T) {
	sum := Analyze(synthInput())
	if len(sum.Scenarios) != 2 || sum.Scenarios[0].Scenario != "N:N" || sum.Scenarios[1].Scenario != "1:N" {
		t.Fatalf("scenarios: %+v", sum.Scenarios)
	}
	nn, on := sum.Scenarios[0], sum.Scenarios[1]
	stat := func(sc ScenarioStats, key string) Stat {
		for _, s := range sc.Stats {
			if s.Key == key {
				return s
			}
		}
		t.Fatalf("no stat %q", key)
		return Stat{}
	}
	if got := stat(nn, "max_logged_in"); got.Mean != 50 || got.SD != 0 || got.N != 2 {
		t.Errorf("N:N max logged in: %+v, want 50 ± 0 over 2", got)
	}
	if !sum.Runs[0].Plateau.Detected || sum.Runs[2].Plateau.Detected {
		t.Errorf("plateau: N:N %v (want true), 1:N %v (want false)", sum.Runs[0].Plateau.Detected, sum.Runs[2].Plateau.Detected)
	}
	// Repeat 2 sends 5% more: the sd over two runs is |a-b|/√2.
	g := stat(nn, "plateau_send_gbps")
	a, b := float64(sum.Runs[0].PlateauSendGbps), float64(sum.Runs[1].PlateauSendGbps)
	if math.Abs(float64(g.Mean)-(a+b)/2) > 1e-12 || math.Abs(float64(g.SD)-math.Abs(a-b)/math.Sqrt2) > 1e-12 {
		t.Errorf("plateau send Gbps: got %v ± %v from %v and %v", g.Mean, g.SD, a, b)
	}
	// N:N's load is quadratic in the clients, 1:N's linear; the fits must
	// see it in the data.
	if r2 := float64(nn.Quadratic.R2); r2 < 0.99 {
		t.Errorf("N:N quadratic R² = %v", r2)
	}
	if r2 := float64(on.Linear.R2); r2 < 0.99 {
		t.Errorf("1:N linear R² = %v", r2)
	}
	if nn.Quadratic.Coeffs[0] <= 0 {
		t.Errorf("N:N quadratic coefficient %v, want > 0", nn.Quadratic.Coeffs[0])
	}
	if float64(stat(on, "peak_send_gbps").Mean) >= float64(stat(nn, "peak_send_gbps").Mean) {
		t.Error("1:N peak send should be below N:N's")
	}
	// Only the run with a kernel drop warns about it.
	var kernel int
	for _, w := range sum.Warnings {
		if strings.Contains(w, "kernel drops") {
			kernel++
		}
	}
	if kernel != 1 {
		t.Errorf("kernel drop warnings: %d, want 1: %q", kernel, sum.Warnings)
	}
}

func TestSaturationWarning(t *testing.T) {
	var pts []Point
	for i := 0; i < 20; i++ {
		pts = append(pts, Point{T: float64(i), LoggedIn: 10, FleetCPUIdlePct: 5, SendGbps: 1})
	}
	rs := AnalyzeRun(Run{Scenario: "N:N", Repeat: 1, Series: Series{Points: pts}})
	if len(rs.Warnings) != 1 || !strings.Contains(rs.Warnings[0], "load generator saturated") {
		t.Fatalf("warnings: %q", rs.Warnings)
	}
}

// TestUDPDropAndLossWarnings: relay UDP receive drops and lost deliveries
// during a run are figures of the run and warnings; none, no warning.
func TestUDPDropAndLossWarnings(t *testing.T) {
	parse := func(relay, fleet string) Snapshot {
		var s Snapshot
		if err := ParseMetrics(strings.NewReader(relay), RoleRelay, &s); err != nil {
			t.Fatal(err)
		}
		if err := ParseMetrics(strings.NewReader(fleet), RoleFleet, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const counters = "# TYPE relay_udp_receive_drops_total counter\nrelay_udp_receive_drops_total %d\n"
	const fleet = "# TYPE replay_numbered_messages_received_total counter\nreplay_numbered_messages_received_total %d\n" +
		"# TYPE replay_messages_lost_total counter\nreplay_messages_lost_total %d\n"
	for _, tt := range []struct {
		name               string
		drops, recv, lost  int
		wantDrops, wantPct float64
		warnings           int
	}{
		{"clean", 0, 1000, 0, 0, 0, 0},
		{"drops and loss", 120, 990, 10, 120, 1, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			first := parse(fmt.Sprintf(counters, 5), fmt.Sprintf(fleet, 0, 0))
			last := parse(fmt.Sprintf(counters, 5+tt.drops), fmt.Sprintf(fleet, tt.recv, tt.lost))
			rs := AnalyzeRun(Run{Scenario: "N:N", Repeat: 1, Series: Series{First: first, Last: last}})
			if float64(rs.RelayUDPReceiveDrops) != tt.wantDrops || float64(rs.LossPct) != tt.wantPct {
				t.Errorf("drops %v, loss %v%%; want %v and %v%%", rs.RelayUDPReceiveDrops, rs.LossPct, tt.wantDrops, tt.wantPct)
			}
			n := 0
			for _, w := range rs.Warnings {
				if strings.Contains(w, "relay UDP receive drops") || strings.Contains(w, "deliveries lost") {
					n++
				}
			}
			if n != tt.warnings {
				t.Errorf("warnings %q: %d about drops and loss, want %d", rs.Warnings, n, tt.warnings)
			}
		})
	}
}

// TestRollingPeak: a peak is the highest PeakWindowS-second mean, each
// sample weighted by its real interval, so one short sample cannot make
// it (the report once showed 6.09 Gbps: a 0.80 s sample after a 1.15 s
// one, its neighbours 3.8).
func TestRollingPeak(t *testing.T) {
	mk := func(dts, vals []float64) []Point {
		var pts []Point
		at := 0.0
		for i := range dts {
			at += dts[i]
			pts = append(pts, Point{T: at, SendGbps: vals[i]})
		}
		return pts
	}
	send := func(p Point) float64 { return p.SendGbps }
	nan := math.NaN()
	tests := []struct {
		name string
		pts  []Point
		want float64
	}{
		{"steady", mk([]float64{1, 1, 1, 1, 1, 1, 1}, []float64{2, 2, 2, 2, 2, 2, 2}), 2},
		// Whole samples only: every window of at least 5 s holding the
		// short one spans six samples, 5.95 s; 3.90, not 6.09.
		{"one short sample", mk([]float64{1, 1, 1, 1.15, 0.8, 1, 1, 1}, []float64{3.8, 3.8, 3.8, 2.7, 6.09, 3.8, 3.8, 3.8}),
			(2.7*1.15 + 6.09*0.8 + 3.8*4) / 5.95},
		{"a real step stays", mk([]float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, []float64{1, 1, 1, 1, 1, 5, 5, 5, 5, 5}), 5},
		{"shorter than the window: the run's mean", mk([]float64{1, 2}, []float64{1, 4}), 3},
		{"unmeasured samples skipped", mk([]float64{1, 1, 1, 1, 1, 1}, []float64{1, nan, 1, 1, 1, 1}), 1},
		{"nothing measured", mk([]float64{1}, []float64{nan}), nan},
	}
	for _, tt := range tests {
		got := float64(RollingPeak(tt.pts, send))
		if math.IsNaN(got) != math.IsNaN(tt.want) || math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestRolledChartHasNoSpike: the send and receive charts draw the rolling
// means, one rule for both, so the one short sample of TestRollingPeak is
// no top point there, and each chart's highest point is the table's peak.
func TestRolledChartHasNoSpike(t *testing.T) {
	vals := []float64{3.8, 3.8, 3.8, 2.7, 6.09, 3.8, 3.8, 3.8}
	var pts []Point
	at := 0.0
	for i, dt := range []float64{1, 1, 1, 1.15, 0.8, 1, 1, 1} {
		at += dt
		pts = append(pts, Point{T: at, SendGbps: vals[i], RecvGbps: vals[i] / 100})
	}
	in := Input{Runs: []Run{{Scenario: "N:N", Series: Series{Points: pts}}}}
	for _, c := range []struct {
		name  string
		scale float64
		get   func(Point) float64
		set   func(*Point, float64)
	}{
		{"send", 1, func(p Point) float64 { return p.SendGbps }, func(p *Point, v float64) { p.SendGbps = v }},
		{"receive", 0.01, func(p Point) float64 { return p.RecvGbps }, func(p *Point, v float64) { p.RecvGbps = v }},
	} {
		out := rolled(in, c.get, c.set)
		top := math.Inf(-1)
		for _, p := range out.Runs[0].Series.Points {
			if v := c.get(p); !math.IsNaN(v) {
				top = math.Max(top, v)
			}
		}
		if top > 4.2*c.scale || math.Abs(c.get(in.Runs[0].Series.Points[4])-6.09*c.scale) > 1e-12 {
			t.Errorf("%s: chart top %v (input untouched: %v), want the short sample smoothed under %v", c.name, top, c.get(in.Runs[0].Series.Points[4]), 4.2*c.scale)
		}
		if peak := float64(RollingPeak(pts, c.get)); math.Abs(peak-top) > 1e-12 {
			t.Errorf("%s: table peak %v, chart's top %v", c.name, peak, top)
		}
	}
}

// TestRunFlows: a --flows fleet's per-flow figures reach the run's stats
// and the HTML report; a summary without flows, or one that is not JSON,
// gives none and costs no other figure.
func TestRunFlows(t *testing.T) {
	withFlows := []byte(`{"clients_requested":8,"flows":[` +
		`{"flow":0,"client":"127.0.0.1:50001","clients":6,"logins_succeeded":6,"messages_sent":180,"messages_received":0},` +
		`{"flow":3,"client":"127.0.0.1:50007","clients":2,"logins_succeeded":2,"messages_sent":0,"messages_received":1067}]}`)
	cases := []struct {
		name    string
		summary []byte
		want    []FlowFigures
	}{
		{"flows", withFlows, []FlowFigures{
			{Flow: 0, Client: "127.0.0.1:50001", Clients: 6, Logins: 6, Sent: 180},
			{Flow: 3, Client: "127.0.0.1:50007", Clients: 2, Logins: 2, Received: 1067}}},
		{"one flow", []byte(`{"clients_requested":8}`), nil},
		{"no summary", nil, nil},
		{"not json", []byte(`{"flows":[`), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := synthModel{scenario: "N:N", repeat: 1, seconds: 20, loginsPerS: 2, maxIn: 8, attempts: 8, rate: 10, size: 100}
			r := m.run()
			r.FleetSummary = tc.summary
			rs := AnalyzeRun(r)
			if !reflect.DeepEqual(rs.Flows, tc.want) {
				t.Fatalf("flows %+v, want %+v", rs.Flows, tc.want)
			}
			if rs.MaxLoggedIn != 8 {
				t.Errorf("max logged in %v, want 8 whatever the summary", rs.MaxLoggedIn)
			}
			var html strings.Builder
			if err := WriteHTML(&html, Summary{Runs: []RunStats{rs}}); err != nil {
				t.Fatal(err)
			}
			has := strings.Contains(html.String(), "recorded flows")
			if has != (len(tc.want) > 0) {
				t.Fatalf("HTML has the flows table: %v, want %v", has, len(tc.want) > 0)
			}
			for _, f := range tc.want {
				row := fmt.Sprintf("<tr><td>%d</td><td>%s</td><td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>",
					f.Flow, f.Client, f.Clients, f.Logins, f.Sent, f.Received)
				if !strings.Contains(html.String(), row) {
					t.Errorf("HTML lacks the row %s", row)
				}
			}
		})
	}
}

// TestRunHTTPStepsGolden: the HTTP steps of a fleet's summary (answers,
// times) reach the run's stats with the failed logins labelled by each
// step (auth_http_503 is auth's, me_2_http_401 me_2's and not me's,
// connect_timeout no step's), a step never answered has its row (0
// answered, no times, its failures), and the HTML report shows them as
// testdata/httpsteps.html.golden; a summary without steps shows no table.
func TestRunHTTPStepsGolden(t *testing.T) {
	summary := []byte(`{"clients_requested":200,"logins_failed":{"auth_http_503":5,"auth_timeout":2,"matchmake_missing_seat":1,"connect_timeout":3,"me_2_http_401":1,"lobby_timeout":4,"lobby_connect_refused":2},` +
		`"http_steps":[{"step":"auth","answered":198,"ms":{"p50":12.5,"p90":20.1,"p99":48.25,"max":60},"us":"HISTF..."},` +
		`{"step":"matchmake","answered":193,"ms":{"p50":3.25,"p99":9.5},"us":"HISTF..."},{"step":"me","answered":192,"ms":{"p50":1,"p99":2}},` +
		`{"step":"me_2","answered":192,"ms":{"p50":1.5,"p99":2.5}},{"step":"lobby","answered":0,"ms":null,"us":"HISTF..."}]}`)
	none := Num(math.NaN())
	want := []StepFigures{
		{Step: "auth", Answered: 198, P50MS: 12.5, P99MS: 48.25, Failed: []ReasonCount{{"http_503", 5}, {"timeout", 2}}},
		{Step: "matchmake", Answered: 193, P50MS: 3.25, P99MS: 9.5, Failed: []ReasonCount{{"missing_seat", 1}}},
		{Step: "me", Answered: 192, P50MS: 1, P99MS: 2},
		{Step: "me_2", Answered: 192, P50MS: 1.5, P99MS: 2.5, Failed: []ReasonCount{{"http_401", 1}}},                         // me_2's, not me's
		{Step: "lobby", Answered: 0, P50MS: none, P99MS: none, Failed: []ReasonCount{{"timeout", 4}, {"connect_refused", 2}}}, // never answered
	}
	m := synthModel{scenario: "N:N", repeat: 1, seconds: 20, loginsPerS: 2, maxIn: 8, attempts: 8, rate: 10, size: 100}
	for _, tc := range []struct {
		name    string
		summary []byte
		want    []StepFigures
	}{{"steps", summary, want}, {"none", []byte(`{"clients_requested":8}`), nil}, {"not json", []byte(`{"http_steps":[`), nil}} {
		t.Run(tc.name, func(t *testing.T) {
			r := m.run()
			r.FleetSummary = tc.summary
			rs := AnalyzeRun(r)
			got, _ := json.Marshal(rs.HTTPSteps) // NaN (no times) as null
			wantJSON, _ := json.Marshal(tc.want)
			if string(got) != string(wantJSON) {
				t.Fatalf("steps %+v, want %+v", rs.HTTPSteps, tc.want)
			}
			var html strings.Builder
			if err := WriteHTML(&html, Summary{Runs: []RunStats{rs}}); err != nil {
				t.Fatal(err)
			}
			start := strings.Index(html.String(), "<h3>N:N #1: HTTP steps</h3>")
			if (start >= 0) != (tc.want != nil) {
				t.Fatalf("HTML has the steps table: %v, want %v", start >= 0, tc.want != nil)
			}
			if start < 0 {
				return
			}
			frag := html.String()[start:]
			frag = frag[:strings.Index(frag, "</p>\n")+5]
			testproc.Golden(t, filepath.Join("testdata", "httpsteps.html.golden"), []byte(frag), *update, "-update")
		})
	}
}
