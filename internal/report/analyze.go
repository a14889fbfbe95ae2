package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/reprise-harness/reprise/internal/metrics"
)

// Thresholds past which the load generator is said to be saturated (its
// numbers then understate the server): the fleet's own rule, from one
// source (internal/metrics load.go).
const (
	saturatedCPUIdlePct  = metrics.SaturatedIdlePct
	saturatedLagP99      = metrics.SaturatedLagP99
	saturatedLagP99Ms    = float64(saturatedLagP99) / float64(time.Millisecond)
	saturatedMinFraction = 0.1 // of a run's samples under the idle threshold
	// hostBusyMinCores is how much other work makes a host busy.
	hostBusyMinCores = metrics.HostBusyCores
)

// Param is one run parameter, shown as given.
type Param struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Run is everything recorded for one scenario repeat.
type Run struct {
	Scenario     string          // "N:N", "1:N"
	Repeat       int             // 1-based
	Requested    int             // clients the run asked for
	Started      time.Time       //
	Series       Series          //
	KernelDrops  *KernelDrops    // nil when not measured (remote relay)
	FleetSummary json.RawMessage // the fleet's own summary, kept verbatim
	Warnings     []string        // from the orchestration: relay not drained, interrupted
}

// Input is what Analyze and Write need: the runs and how they were made.
type Input struct {
	Title     string
	Generated time.Time
	Params    []Param
	Runs      []Run
	Warnings  []string
	// SLO decides the headline's breaches; nil means DefaultSLO.
	SLO *SLO
	// Capacity is a capacity search's answer and levels, when the runs
	// are one.
	Capacity *Capacity
}

// Plateau is where logged-in clients stopped rising. Window is the
// stretch where logged-in stayed within tolerance of its maximum: the
// steady state at the most load the run reached.
type Plateau struct {
	// Detected: logins kept being attempted after logged-in reached its
	// maximum, without raising it (the relay refused more users).
	Detected      bool `json:"detected"`
	LoggedIn      Num  `json:"logged_in"`
	AtS           Num  `json:"at_s"`
	AttemptsAt    Num  `json:"attempts_at"`
	AttemptsAfter Num  `json:"attempts_after"`
	WindowFromS   Num  `json:"window_from_s"`
	WindowToS     Num  `json:"window_to_s"`
}

// RunStats are one run's figures.
type RunStats struct {
	Scenario                  string    `json:"scenario"`
	Repeat                    int       `json:"repeat"`
	Started                   time.Time `json:"started"`
	DurationS                 Num       `json:"duration_s"`
	Samples                   int       `json:"samples"`
	ScrapeErrors              int       `json:"scrape_errors"`
	MaxLoggedIn               Num       `json:"max_logged_in"`
	EndLoggedIn               Num       `json:"end_logged_in"`
	Plateau                   Plateau   `json:"plateau"`
	LoginAttempts             Num       `json:"login_attempts"`
	LoginsSucceeded           Num       `json:"logins_succeeded"`
	LoginsFailed              Num       `json:"logins_failed"`
	PeakSendGbps              Num       `json:"peak_send_gbps"`
	PlateauSendGbps           Num       `json:"plateau_send_gbps"`
	PeakRecvGbps              Num       `json:"peak_recv_gbps"`
	PlateauRecvGbps           Num       `json:"plateau_recv_gbps"`
	PlateauCPUIdlePct         Num       `json:"plateau_cpu_idle_pct"`
	MinCPUIdlePct             Num       `json:"min_cpu_idle_pct"`
	PlateauRelayProcessCPUPct Num       `json:"plateau_relay_process_cpu_pct"`
	PlateauFleetProcessCPUPct Num       `json:"plateau_fleet_process_cpu_pct"`
	MinFleetCPUIdlePct        Num       `json:"min_fleet_cpu_idle_pct"`
	PlateauMsgsInPerS         Num       `json:"plateau_msgs_in_per_s"`
	PlateauMsgsDeliveredPerS  Num       `json:"plateau_msgs_delivered_per_s"`
	LatencyP50Ms              Num       `json:"latency_p50_ms"`
	LatencyP99Ms              Num       `json:"latency_p99_ms"`
	ScheduleLagP99Ms          Num       `json:"schedule_lag_p99_ms"`
	// PastRange names the latency and lag fields past the histograms'
	// range ("> 60 s"): null in JSON, as no number is known.
	PastRange               []string `json:"past_range,omitempty"`
	SlowConsumerDisconnects Num      `json:"slow_consumer_disconnects"`
	RejectedFrames          Num      `json:"rejected_frames"`
	RelayUDPReceiveDrops    Num      `json:"relay_udp_receive_drops"`
	LossPct                 Num      `json:"loss_pct"` // deliveries lost: gaps in senders' sequences
	// DeliveriesExpected and DeliveriesReceived: what the server owed the
	// clients by the profile's fan-out and what of it arrived (NaN when
	// the fleet could not know).
	DeliveriesExpected Num `json:"deliveries_expected"`
	DeliveriesReceived Num `json:"deliveries_received"`
	// RateLimitedFrames and RoomRateLimitedFrames: frames the relay's
	// rate limits dropped, a sender's own and its room's.
	RateLimitedFrames      Num `json:"rate_limited_frames"`
	RoomRateLimitedFrames  Num `json:"room_rate_limited_frames"`
	MessagesSent           Num `json:"messages_sent"`
	MessagesReceived       Num `json:"messages_received"`
	BytesSent              Num `json:"bytes_sent"`
	BytesReceived          Num `json:"bytes_received"`
	RelaySentBytes         Num `json:"relay_sent_bytes"`
	RelayReceivedBytes     Num `json:"relay_received_bytes"`
	RelayProcessCPUSeconds Num `json:"relay_process_cpu_seconds"` // the relay process's own, over the run
	FleetProcessCPUSeconds Num `json:"fleet_process_cpu_seconds"`
	// The processes' CPU per thousand messages (ms; the same number as s
	// per million): the relay's per delivery, the fleet's per message sent
	// or received; and their peak resident memory: the relay's the most
	// any scrape saw, the fleet's its own VmHWM from its summary (sampled
	// like the relay's when the summary lacks it).
	RelayCPUMSPer1kDelivered Num          `json:"relay_process_cpu_ms_per_1k_delivered"`
	FleetCPUMSPer1kMessages  Num          `json:"fleet_process_cpu_ms_per_1k_messages"`
	RelayPeakRSSBytes        Num          `json:"relay_process_peak_rss_bytes"`
	FleetPeakRSSBytes        Num          `json:"fleet_process_peak_rss_bytes"`
	KernelDrops              *KernelDrops `json:"kernel_drops,omitempty"`
	// The run's health over its samples (SampledS seconds): the seconds
	// the fleet was saturated by its own work and those its host was busy
	// with other work (at least hostBusyMinCores of it; HostOtherCoresMax
	// the most seen), each from the first second it was seen.
	SampledS            Num             `json:"sampled_s"`
	FleetSaturatedS     Num             `json:"fleet_saturated_s"`
	FleetSaturatedFromS Num             `json:"fleet_saturated_from_s"`
	HostBusyS           Num             `json:"host_busy_s"`
	HostBusyFromS       Num             `json:"host_busy_from_s"`
	HostOtherCoresMax   Num             `json:"host_other_cores_max"`
	Linear              Fit             `json:"fit_linear"`
	Quadratic           Fit             `json:"fit_quadratic"`
	Headline            Headline        `json:"headline"`
	Warnings            []string        `json:"warnings"`
	FleetSummary        json.RawMessage `json:"fleet_summary,omitempty"`
	// Flows are a --flows fleet's recorded flows with what their clients
	// did, read from FleetSummary; empty when the fleet played one flow.
	Flows []FlowFigures `json:"flows,omitempty"`
	// HTTPSteps are the profile's HTTP steps' figures, read from
	// FleetSummary; empty when its clients made none.
	HTTPSteps []StepFigures `json:"http_steps,omitempty"`
}

// FlowFigures are one recorded flow's figures in a --flows fleet: the
// clients that played it, their logins and the messages they sent and
// received. They are read from the fleet's summary (the report reads
// summaries, not the fleet), so the fields follow its JSON names.
type FlowFigures struct {
	Flow     int    `json:"flow"`
	Client   string `json:"client"`
	Clients  int    `json:"clients"`
	Logins   int64  `json:"logins_succeeded"`
	Sent     int64  `json:"messages_sent"`
	Received int64  `json:"messages_received"`
}

// fleetFlows reads the flows of a fleet's summary; nil when it has none
// or the summary is not readable (the other figures do not depend on it).
func fleetFlows(summary json.RawMessage) []FlowFigures {
	var s struct {
		Flows []FlowFigures `json:"flows"`
	}
	if len(summary) == 0 || json.Unmarshal(summary, &s) != nil {
		return nil
	}
	return s.Flows
}

// StepFigures are one HTTP step's figures (a token, a seat before the
// socket): the answers it got and their times, from the request to the
// answer's last byte whatever its status, and the logins that failed at
// it, by reason (the fleet labels them <step>_<reason>: auth_http_503).
// A step no answer ever came to (every request timed out) has its row:
// 0 answered, no times (NaN), its failures.
type StepFigures struct {
	Step     string        `json:"step"`
	Answered int64         `json:"answered"`
	P50MS    Num           `json:"p50_ms"`
	P99MS    Num           `json:"p99_ms"`
	Failed   []ReasonCount `json:"failed,omitempty"`
}

// ReasonCount is how many logins failed for one reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
}

// fleetHTTPSteps reads the HTTP steps of a fleet's summary with the
// failed logins labelled by each; nil when it has none or the summary is
// not readable.
func fleetHTTPSteps(summary json.RawMessage) []StepFigures {
	var s struct {
		Steps []struct {
			Step     string `json:"step"`
			Answered int64  `json:"answered"`
			MS       *struct {
				P50 float64 `json:"p50"`
				P99 float64 `json:"p99"`
			} `json:"ms"` // null: never answered
		} `json:"http_steps"`
		Failed map[string]int64 `json:"logins_failed"`
	}
	if len(summary) == 0 || json.Unmarshal(summary, &s) != nil {
		return nil
	}
	var out []StepFigures
	for _, st := range s.Steps {
		f := StepFigures{Step: st.Step, Answered: st.Answered, P50MS: Num(math.NaN()), P99MS: Num(math.NaN())}
		if st.MS != nil {
			f.P50MS, f.P99MS = Num(st.MS.P50), Num(st.MS.P99)
		}
		out = append(out, f)
	}
	// Each failure at the step whose name is the longest prefix of its
	// label: v2_2_http_503 is step v2_2's, not v2's.
	for label, n := range s.Failed {
		at := -1
		for i, st := range out {
			if strings.HasPrefix(label, st.Step+"_") && (at < 0 || len(st.Step) > len(out[at].Step)) {
				at = i
			}
		}
		if at >= 0 && n > 0 {
			out[at].Failed = append(out[at].Failed, ReasonCount{label[len(out[at].Step)+1:], n})
		}
	}
	for i := range out {
		slices.SortFunc(out[i].Failed, func(a, b ReasonCount) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Reason, b.Reason))
		})
	}
	return out
}

// Stat is one figure aggregated over a scenario's repeats.
type Stat struct {
	Key  string `json:"key"`
	Mean Num    `json:"mean"`
	SD   Num    `json:"sd"` // sample standard deviation; NaN with one run
	N    int    `json:"n"`  // runs that measured it
}

// ScenarioStats aggregates a scenario's repeats; the fits pool every
// repeat's samples.
type ScenarioStats struct {
	Scenario string `json:"scenario"`
	Runs     int    `json:"runs"`
	// Headline is the median run's (by held users).
	Headline  Headline `json:"headline"`
	Stats     []Stat   `json:"stats"`
	Linear    Fit      `json:"fit_linear"`
	Quadratic Fit      `json:"fit_quadratic"`
}

// Summary is summary.json.
type Summary struct {
	Title     string    `json:"title"`
	Generated time.Time `json:"generated"`
	// Headline is the answer in one line: how many users each scenario
	// held and why it stopped there (or the capacity search's answer).
	Headline string `json:"headline"`
	// SLO is the objectives the headline judged (--slo's syntax).
	SLO string `json:"slo"`
	// Cards are the answer at a glance (Cards), one per scenario.
	Cards    []Card    `json:"answer"`
	Capacity *Capacity `json:"capacity,omitempty"`
	Params   []Param   `json:"params"`
	Warnings []string  `json:"warnings"`
	// WarningGroups are the warnings by cause, each cause once.
	WarningGroups []WarningGroup  `json:"warning_groups"`
	Scenarios     []ScenarioStats `json:"scenarios"`
	Runs          []RunStats      `json:"runs"`
}

// Analyze reduces every run to its figures and aggregates each scenario's
// repeats. Scenarios keep the order in which they first ran.
func Analyze(in Input) Summary {
	s := Summary{Title: in.Title, Generated: in.Generated, Params: in.Params,
		Warnings: append([]string{}, in.Warnings...), Capacity: in.Capacity}
	slo := DefaultSLO()
	if in.SLO != nil {
		slo = *in.SLO
	}
	s.SLO = slo.String()
	var order []string
	byScenario := map[string][]int{}
	windows := make([][]Point, len(in.Runs))
	for i, r := range in.Runs {
		rs := AnalyzeRun(r)
		rs.Headline = RunHeadline(r, rs, slo)
		var over string
		windows[i], over = fitWindow(r.Series.Points, rs.Headline)
		rs.Linear, rs.Quadratic = fitsOver(windows[i], over)
		s.Runs = append(s.Runs, rs)
		for _, w := range rs.Warnings {
			s.Warnings = append(s.Warnings, fmt.Sprintf("%s #%d: %s", r.Scenario, r.Repeat, w))
		}
		if _, ok := byScenario[r.Scenario]; !ok {
			order = append(order, r.Scenario)
		}
		byScenario[r.Scenario] = append(byScenario[r.Scenario], i)
	}
	for _, name := range order {
		var runs []RunStats
		var pts []Point
		var heads []Headline
		var overs []string
		for _, i := range byScenario[name] {
			runs = append(runs, s.Runs[i])
			pts = append(pts, windows[i]...)
			heads = append(heads, s.Runs[i].Headline)
			overs = append(overs, fmt.Sprintf("#%d %s", s.Runs[i].Repeat, s.Runs[i].Linear.Over))
		}
		sc := ScenarioStats{Scenario: name, Runs: len(runs), Headline: scenarioHeadline(heads)}
		for _, m := range tableMetrics {
			sc.Stats = append(sc.Stats, aggregate(m, runs))
		}
		over := runs[0].Linear.Over
		if len(runs) > 1 {
			over = strings.Join(overs, "; ")
		}
		sc.Linear, sc.Quadratic = fitsOver(pts, over)
		s.Scenarios = append(s.Scenarios, sc)
	}
	if in.Capacity != nil {
		s.Headline = in.Capacity.Answer
	} else {
		var hs []Headline
		for _, sc := range s.Scenarios {
			hs = append(hs, sc.Headline)
		}
		s.Headline = HeadlineText(hs)
	}
	s.WarningGroups = groupWarnings(in.Warnings, s.Runs)
	s.Cards = Cards(s)
	return s
}

func aggregate(m metric, runs []RunStats) Stat {
	var v []float64
	for _, r := range runs {
		if x := m.get(r); !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	st := Stat{Key: m.key, Mean: Num(math.NaN()), SD: Num(math.NaN()), N: len(v)}
	switch len(v) {
	case 0:
	case 1:
		st.Mean = Num(v[0])
	default:
		mean, sd := stat.MeanStdDev(v, nil)
		st.Mean, st.SD = Num(mean), Num(sd)
	}
	return st
}

// fitData is send Gbps against logged-in clients, for every sample where
// both were measured and someone was logged in.
func fitData(pts []Point) (x, y []float64) {
	for _, p := range pts {
		if math.IsNaN(p.LoggedIn) || math.IsNaN(p.SendGbps) || p.LoggedIn <= 0 {
			continue
		}
		x = append(x, p.LoggedIn)
		y = append(y, p.SendGbps)
	}
	return x, y
}

// fitsOver fits send Gbps against logged-in clients over pts, both fits
// labelled with what they cover.
func fitsOver(pts []Point, over string) (linear, quadratic Fit) {
	x, y := fitData(pts)
	linear, quadratic = FitLinear(x, y), FitQuadratic(x, y)
	linear.Over, quadratic.Over = over, over
	return linear, quadratic
}

// fitWindow is the samples a run's fits cover, and their label: the
// seconds before its breaking point, which is the objective that decided
// its headline or the first logged-in client lost, whichever came first.
// After it the server no longer carries its users (a collapse fitted in
// turns a quadratic's n² term negative).
func fitWindow(pts []Point, h Headline) ([]Point, string) {
	cut, why := math.Inf(1), ""
	switch h.Reason {
	case ReasonDisconnects, ReasonLoginFailures, ReasonLatency, ReasonCPUIdle:
		cut, why = float64(h.AtS), objectiveName(h.Reason)+" broke"
	}
	for _, p := range pts {
		if p.T >= cut {
			break
		}
		if math.Max(nz(p.SlowConsumerDiscards), nz(p.FleetDisconnects)) > 0 {
			cut, why = p.T, "the first client was lost"
			break
		}
	}
	n := 0
	for n < len(pts) && pts[n].T < cut {
		n++
	}
	win := pts[:n]
	if len(win) == 0 {
		return win, fmt.Sprintf("no seconds before %s at %.0f s", why, cut)
	}
	span := fmt.Sprintf("%.0f–%.0f s", win[0].T, win[len(win)-1].T)
	if n == len(pts) {
		return win, span + ", the whole run"
	}
	return win, fmt.Sprintf("%s, before %s at %.0f s", span, why, cut)
}

// AnalyzeRun computes one run's figures from its samples; the fits, which
// stop at the run's breaking point, are Analyze's, once it has the
// headline.
func AnalyzeRun(r Run) RunStats {
	pts := r.Series.Points
	first, last := r.Series.First, r.Series.Last
	nan := Num(math.NaN())
	rs := RunStats{Scenario: r.Scenario, Repeat: r.Repeat, Started: r.Started,
		Samples: len(pts), ScrapeErrors: r.Series.ScrapeErrors, DurationS: nan,
		KernelDrops: r.KernelDrops, FleetSummary: r.FleetSummary,
		Flows: fleetFlows(r.FleetSummary), HTTPSteps: fleetHTTPSteps(r.FleetSummary),
		Warnings: append([]string{}, r.Warnings...)}
	rs.EndLoggedIn = nan
	if n := len(pts); n > 0 {
		rs.DurationS = Num(pts[n-1].T)
		rs.EndLoggedIn = Num(pts[n-1].LoggedIn)
	}
	pl := DetectPlateau(pts)
	rs.Plateau = pl
	rs.MaxLoggedIn = pl.LoggedIn
	in := func(p Point) bool {
		return !math.IsNaN(float64(pl.WindowFromS)) && p.T >= float64(pl.WindowFromS) && p.T <= float64(pl.WindowToS)
	}
	col := func(get func(Point) float64, keep func(Point) bool) []float64 {
		var v []float64
		for _, p := range pts {
			if x := get(p); !math.IsNaN(x) && (keep == nil || keep(p)) {
				v = append(v, x)
			}
		}
		return v
	}
	send := func(p Point) float64 { return p.SendGbps }
	recv := func(p Point) float64 { return p.RecvGbps }
	idle := func(p Point) float64 { return p.RelayCPUIdlePct }
	rs.PeakSendGbps, rs.PlateauSendGbps = RollingPeak(pts, send), meanOf(col(send, in))
	rs.PeakRecvGbps, rs.PlateauRecvGbps = RollingPeak(pts, recv), meanOf(col(recv, in))
	rs.PlateauCPUIdlePct, rs.MinCPUIdlePct = meanOf(col(idle, in)), minOf(col(idle, nil))
	rs.PlateauRelayProcessCPUPct = meanOf(col(func(p Point) float64 { return p.RelayProcessCPUPct }, in))
	rs.PlateauFleetProcessCPUPct = meanOf(col(func(p Point) float64 { return p.FleetProcessCPUPct }, in))
	fleetIdle := col(func(p Point) float64 { return p.FleetCPUIdlePct }, nil)
	rs.MinFleetCPUIdlePct = minOf(fleetIdle)
	rs.PlateauMsgsInPerS = meanOf(col(func(p Point) float64 { return p.MsgsInPerS }, in))
	rs.PlateauMsgsDeliveredPerS = meanOf(col(func(p Point) float64 { return p.MsgsDeliveredPerS }, in))

	for _, p := range []*Num{&rs.LoginAttempts, &rs.LoginsSucceeded, &rs.LoginsFailed, &rs.MessagesSent,
		&rs.MessagesReceived, &rs.BytesSent, &rs.BytesReceived, &rs.LatencyP50Ms, &rs.LatencyP99Ms,
		&rs.ScheduleLagP99Ms, &rs.SlowConsumerDisconnects, &rs.RejectedFrames, &rs.RelaySentBytes,
		&rs.RelayReceivedBytes, &rs.RelayUDPReceiveDrops, &rs.LossPct, &rs.RelayProcessCPUSeconds,
		&rs.FleetProcessCPUSeconds, &rs.RelayCPUMSPer1kDelivered, &rs.FleetCPUMSPer1kMessages,
		&rs.RelayPeakRSSBytes, &rs.FleetPeakRSSBytes, &rs.DeliveriesExpected, &rs.DeliveriesReceived,
		&rs.RateLimitedFrames, &rs.RoomRateLimitedFrames} {
		*p = nan
	}
	if f, l := first.Fleet, last.Fleet; f.Present && l.Present {
		rs.LoginAttempts = Num(delta(f.LoginAttempts, l.LoginAttempts))
		rs.LoginsSucceeded = Num(delta(f.LoginsSucceeded, l.LoginsSucceeded))
		rs.LoginsFailed = Num(delta(f.LoginsFailed, l.LoginsFailed))
		rs.MessagesSent = Num(delta(f.SentMessages, l.SentMessages))
		rs.MessagesReceived = Num(delta(f.ReceivedMessages, l.ReceivedMessages))
		rs.BytesSent = Num(delta(f.SentBytes, l.SentBytes))
		rs.BytesReceived = Num(delta(f.ReceivedBytes, l.ReceivedBytes))
		lat := HistogramDelta(f.Latency, l.Latency)
		rs.LatencyP50Ms = Num(1000 * Quantile(0.5, lat))
		rs.LatencyP99Ms = Num(1000 * Quantile(0.99, lat))
		rs.ScheduleLagP99Ms = Num(1000 * Quantile(0.99, HistogramDelta(f.ScheduleLag, l.ScheduleLag)))
		rs.PastRange = pastRange(namedNum{"latency_p50_ms", rs.LatencyP50Ms}, namedNum{"latency_p99_ms", rs.LatencyP99Ms},
			namedNum{"schedule_lag_p99_ms", rs.ScheduleLagP99Ms})
		numbered, lost := delta(f.NumberedReceived, l.NumberedReceived), max(delta(f.MessagesLost, l.MessagesLost), 0)
		if numbered+lost > 0 {
			rs.LossPct = Num(100 * lost / (numbered + lost))
		}
		if l.DeliveriesExpected > 0 {
			rs.DeliveriesExpected = Num(delta(f.DeliveriesExpected, l.DeliveriesExpected))
			rs.DeliveriesReceived = Num(delta(f.DeliveriesReceived, l.DeliveriesReceived))
		}
		if l.ProcessCPUSeconds > 0 {
			rs.FleetProcessCPUSeconds = Num(delta(f.ProcessCPUSeconds, l.ProcessCPUSeconds))
			rs.FleetCPUMSPer1kMessages = perThousand(rs.FleetProcessCPUSeconds, rs.MessagesSent+rs.MessagesReceived)
		}
		rs.FleetPeakRSSBytes = fleetPeakRSS(r.FleetSummary, last.Fleet)
	}
	if f, l := first.Relay, last.Relay; f.Present && l.Present {
		rs.SlowConsumerDisconnects = Num(delta(f.SlowConsumerDisconnects, l.SlowConsumerDisconnects))
		rs.RejectedFrames = Num(delta(f.RejectedFrames, l.RejectedFrames))
		rs.RelaySentBytes = Num(delta(f.SentBytes, l.SentBytes))
		rs.RelayReceivedBytes = Num(delta(f.ReceivedBytes, l.ReceivedBytes))
		rs.RelayUDPReceiveDrops = Num(delta(f.UDPReceiveDrops, l.UDPReceiveDrops))
		rs.RateLimitedFrames = Num(delta(f.RateLimited, l.RateLimited))
		rs.RoomRateLimitedFrames = Num(delta(f.RoomRateLimited, l.RoomRateLimited))
		if l.ProcessCPUSeconds > 0 {
			rs.RelayProcessCPUSeconds = Num(delta(f.ProcessCPUSeconds, l.ProcessCPUSeconds))
			rs.RelayCPUMSPer1kDelivered = perThousand(rs.RelayProcessCPUSeconds, Num(delta(f.DeliveredMessages, l.DeliveredMessages)))
		}
		if rss := maxOf(col(func(p Point) float64 { return p.RelayRSSBytes }, nil)); !math.IsNaN(float64(rss)) {
			rs.RelayPeakRSSBytes = rss
		}
	}
	rs.SampledS = nan
	if n := len(pts); n > 0 {
		rs.SampledS = Num(pts[n-1].T)
	}
	rs.FleetSaturatedS, rs.FleetSaturatedFromS, rs.HostBusyS, rs.HostBusyFromS, rs.HostOtherCoresMax = healthSeconds(pts)
	rs.Warnings = append(rs.Warnings, runWarnings(rs, fleetIdle, r.Series.LastError)...)
	return rs
}

// perThousand is CPU seconds per million messages, which is milliseconds
// per thousand; NaN without messages.
func perThousand(cpuS, msgs Num) Num {
	if !(msgs > 0) {
		return Num(math.NaN())
	}
	return cpuS * 1e6 / msgs
}

// fleetPeakRSS is the fleet process's own peak RSS from its summary
// (fleet_process_peak_rss_bytes, the sum over shards), else its resident
// memory at the last scrape; NaN when neither says.
func fleetPeakRSS(summary json.RawMessage, last FleetValues) Num {
	var s struct {
		PeakRSS *float64 `json:"fleet_process_peak_rss_bytes"`
	}
	if len(summary) > 0 && json.Unmarshal(summary, &s) == nil && s.PeakRSS != nil && *s.PeakRSS > 0 {
		return Num(*s.PeakRSS)
	}
	if last.ProcessRSSBytes > 0 {
		return Num(last.ProcessRSSBytes)
	}
	return Num(math.NaN())
}

// runWarnings are the findings that make a run's numbers suspect.
func runWarnings(rs RunStats, fleetIdle []float64, lastErr string) []string {
	var w []string
	busy := 0
	for _, v := range fleetIdle {
		if v < saturatedCPUIdlePct {
			busy++
		}
	}
	// A host busy with other work starves the fleet too, but adding fleet
	// machines is not the cure: say which it was.
	if s := float64(rs.HostBusyS); s > 0 {
		w = append(w, fmt.Sprintf("this host is busy with other work: at least %s cores beside the fleet and the relay for %.0f of %s s; the figures are unreliable",
			fmtNum(rs.HostOtherCoresMax, 1), s, fmtNum(rs.SampledS, 0)))
	}
	if len(fleetIdle) > 0 && float64(busy) >= math.Max(2, saturatedMinFraction*float64(len(fleetIdle))) && rs.FleetSaturatedS > 0 {
		w = append(w, fmt.Sprintf("load generator saturated: fleet host CPU idle under %.0f%% for %d of %d seconds; the relay's numbers are understated",
			saturatedCPUIdlePct, busy, len(fleetIdle)))
	}
	if lag := float64(rs.ScheduleLagP99Ms); lag > saturatedLagP99Ms {
		w = append(w, fmt.Sprintf("load generator saturated: schedule lag p99 %.1f ms (over %.0f ms); sends went out late",
			lag, saturatedLagP99Ms))
	}
	if k := rs.KernelDrops; k != nil && k.Total() > 0 {
		// Host-wide counters (every process's sockets): the run's share
		// is not known, so say so.
		w = append(w, fmt.Sprintf("kernel drops on this host during the run (all processes, not only this run's sockets): %.0f (UDP rcvbuf %.0f, UDP sndbuf %.0f, TCP listen %.0f, TCP backlog %.0f, softnet %.0f)",
			k.Total(), k.UDPRcvbufErrors, k.UDPSndbufErrors, k.TCPListenDrops, k.TCPBacklogDrops, k.SoftnetDropped))
	}
	if d := float64(rs.RelayUDPReceiveDrops); d > 0 {
		w = append(w, fmt.Sprintf("relay UDP receive drops: %.0f datagrams found the relay's socket buffers full (it read too slowly): those sends never reached their rooms", d))
	}
	if n, room := nz(float64(rs.RateLimitedFrames)), nz(float64(rs.RoomRateLimitedFrames)); n+room > 0 {
		w = append(w, fmt.Sprintf("the server dropped traffic: the relay's rate limits dropped %.0f frames (%.0f by the room's limit, --room-rate-messages/--room-rate-bytes; %.0f by a sender's own, --rate-messages/--rate-bytes): the deliveries they owed never happened", n+room, room, n))
	}
	if e, r := float64(rs.DeliveriesExpected), float64(rs.DeliveriesReceived); e > 0 && r < e {
		w = append(w, fmt.Sprintf("deliveries lost: %.0f of the %.0f the server owed the clients never arrived (%.3f%%)", e-r, e, 100*(e-r)/e))
	}
	if l := float64(rs.LossPct); l > 0 {
		w = append(w, fmt.Sprintf("deliveries lost: %.3f%% of the numbered room-wide casts never arrived (gaps in their senders' sequences; see loss_pct)", l))
	}
	if rs.ScrapeErrors > 0 {
		w = append(w, fmt.Sprintf("%d scrapes failed; those seconds are missing from the series (last: %s)", rs.ScrapeErrors, lastErr))
	}
	return w
}

// DetectPlateau finds the maximum of logged-in clients, the first stretch
// where it stayed within 1% (at least one client) of it, and whether login
// attempts went on there without raising it: attempts beyond the clients
// that were still gained count, and at least 3 (or 2% of the maximum) of
// them over at least PlateauMinS seconds make a plateau, as in "logins
// plateaued at 504 while attempts went on to 546".
func DetectPlateau(pts []Point) Plateau {
	nan := Num(math.NaN())
	pl := Plateau{LoggedIn: nan, AtS: nan, AttemptsAt: nan, AttemptsAfter: nan, WindowFromS: nan, WindowToS: nan}
	maxIn := math.Inf(-1)
	for _, p := range pts {
		if !math.IsNaN(p.LoggedIn) && p.LoggedIn > maxIn {
			maxIn = p.LoggedIn
		}
	}
	if math.IsInf(maxIn, -1) {
		return pl
	}
	tol := math.Max(1, 0.01*maxIn)
	// The window is the first unbroken stretch near the maximum: clients
	// lost inside it (logged-in falling out of tolerance) end it, so a
	// drop is never read as a flat line.
	i0, i1 := -1, -1
	for i, p := range pts {
		if math.IsNaN(p.LoggedIn) {
			continue
		}
		near := p.LoggedIn >= maxIn-tol
		if near && i0 < 0 {
			i0 = i
		}
		if i0 >= 0 {
			if !near {
				break
			}
			i1 = i
		}
	}
	pl.LoggedIn, pl.AtS = Num(maxIn), Num(pts[i0].T)
	pl.WindowFromS, pl.WindowToS = Num(pts[i0].T), Num(pts[i1].T)
	if maxIn <= 0 {
		return pl
	}
	a0 := pts[i0].LoginAttempts
	aEnd := math.NaN()
	for _, p := range pts[i0:] {
		if !math.IsNaN(p.LoginAttempts) {
			aEnd = p.LoginAttempts
		}
	}
	if math.IsNaN(a0) || math.IsNaN(aEnd) {
		return pl
	}
	pl.AttemptsAt, pl.AttemptsAfter = Num(a0), Num(aEnd-a0)
	extra := (aEnd - a0) - (maxIn - pts[i0].LoggedIn)
	pl.Detected = extra >= math.Max(3, 0.02*maxIn) && pts[i1].T-pts[i0].T >= PlateauMinS
	return pl
}

// PeakWindowS is the window of a peak rate: a rate is over each sample's
// real interval, and a sample cut short (a scrape answered late, then
// one early) can show a rate its neighbours never saw; over a few
// seconds that artifact averages out and a real peak stays.
const PeakWindowS = 5

// RollingMeans is get's rolling mean at each sample: the mean over the
// shortest stretch of samples ending there that spans PeakWindowS
// seconds, each sample weighted by its own interval (the time since the
// sample before; the first one's since the run's start). It is NaN where
// get is not measured or the samples so far span less than the window; a
// run that never spans it has one value, at its last measured sample: the
// mean of the whole run. The table's peaks and the charts' lines are both
// drawn from it, so a chart's top point is the table's peak.
func RollingMeans(pts []Point, get func(Point) float64) []float64 {
	out := make([]float64, len(pts))
	type sample struct {
		i     int // index in pts
		v, dt float64
	}
	var ss []sample
	prevT := 0.0
	for i, p := range pts {
		out[i] = math.NaN()
		dt := p.T - prevT
		prevT = p.T
		if v := get(p); !math.IsNaN(v) && dt > 0 {
			ss = append(ss, sample{i, v, dt})
		}
	}
	lo, sum, span, covered := 0, 0.0, 0.0, false
	for _, s := range ss {
		sum, span = sum+s.v*s.dt, span+s.dt
		// Drop the oldest samples while the rest still cover the window.
		for lo < len(ss) && span-ss[lo].dt >= PeakWindowS {
			sum, span = sum-ss[lo].v*ss[lo].dt, span-ss[lo].dt
			lo++
		}
		if span >= PeakWindowS {
			out[s.i], covered = sum/span, true
		}
	}
	if !covered && len(ss) > 0 {
		out[ss[len(ss)-1].i] = sum / span
	}
	return out
}

// RollingPeak is the highest of get's RollingMeans: the highest mean over
// PeakWindowS seconds, so one short sample cannot make a peak (a rate
// over a 0.8 s interval after a 1.15 s one). A run shorter than the
// window gives its mean over the whole run; NaN when nothing was measured.
func RollingPeak(pts []Point, get func(Point) float64) Num {
	peak := math.NaN()
	for _, v := range RollingMeans(pts, get) {
		if !math.IsNaN(v) && (math.IsNaN(peak) || v > peak) {
			peak = v
		}
	}
	return Num(peak)
}

func meanOf(v []float64) Num {
	if len(v) == 0 {
		return Num(math.NaN())
	}
	return Num(stat.Mean(v, nil))
}

func maxOf(v []float64) Num {
	if len(v) == 0 {
		return Num(math.NaN())
	}
	m := v[0]
	for _, x := range v[1:] {
		m = math.Max(m, x)
	}
	return Num(m)
}

func minOf(v []float64) Num {
	if len(v) == 0 {
		return Num(math.NaN())
	}
	m := v[0]
	for _, x := range v[1:] {
		m = math.Min(m, x)
	}
	return Num(m)
}
