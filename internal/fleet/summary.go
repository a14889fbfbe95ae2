package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Summary is what a run held, as printed at its end and written with
// --summary. The JSON field names are the issue's; FramesSent, Warnings
// and Notes are extra.
type Summary struct {
	ClientsRequested int              `json:"clients_requested"`
	LoginAttempts    int64            `json:"login_attempts"`
	LoginsSucceeded  int64            `json:"logins_succeeded"`
	LoginsFailed     map[string]int64 `json:"logins_failed"`
	// NextConnections are the clients' later connections when they play
	// flows in turn (turns.go); nil otherwise. LoginsSucceeded counts
	// each such client once, on its first connection.
	NextConnections  *NextConnections `json:"next_connections,omitempty"`
	PeakLoggedIn     int64            `json:"peak_logged_in"`
	MessagesSent     int64            `json:"messages_sent"`
	MessagesReceived int64            `json:"messages_received"`
	BytesSent        int64            `json:"bytes_sent"`
	BytesReceived    int64            `json:"bytes_received"`
	LatencyMS        Quantiles        `json:"latency_ms"`
	ScheduleLagMS    Quantiles        `json:"schedule_lag_ms"`
	LoopsCompleted   int64            `json:"loops_completed"`
	DurationS        float64          `json:"duration_s"`
	Disconnects      map[string]int64 `json:"disconnects"`
	// SendsDelayed counts frames that could not be handed to the kernel
	// when due because the relay's socket was full (the relay read too
	// slowly) and waited in the client's send backlog: the server pushed
	// back.
	SendsDelayed int64 `json:"sends_delayed_by_backpressure"`
	// MessagesLost are the gaps in each sender's sequence of room-wide
	// casts as its receivers saw them; LossPercent is lost / (received +
	// lost) over those casts (loss.go). UDPJoinRetries are UDP joins sent
	// again because joined did not come in time.
	MessagesLost   int64   `json:"messages_lost"`
	LossPercent    float64 `json:"loss_percent"`
	UDPJoinRetries int64   `json:"udp_join_retries"`
	// NumberedReceived are the received casts that carried a sequence (the
	// denominator of LossPercent, so shards' losses merge exactly).
	NumberedReceived int64 `json:"numbered_received"`
	// Deliveries are the deliveries the server owed the clients against
	// those that arrived (deliveries.go), whatever the protocol numbers.
	Deliveries Deliveries `json:"deliveries"`
	// FirstProtocolError quotes the first bytes that cut a logged-in
	// client as not the protocol, and why the profile refused them.
	FirstProtocolError string `json:"first_protocol_error,omitempty"`
	// Undecodable counts what arrived and decoded as nothing and was
	// skipped (datagrams, frames), by reason.
	Undecodable map[string]int64 `json:"undecodable"`

	FramesSent map[string]int64 `json:"frames_sent"`
	Target     string           `json:"target"`
	Warnings   []string         `json:"warnings"`
	Notes      []string         `json:"notes"`
	// Flows are the flows of a --flows fleet and how many clients played
	// each; empty when the fleet played one flow.
	Flows []FlowClients `json:"flows,omitempty"`
	// Instances are the room instances the server assigned the clients
	// (profile rooms.assigned_by: server), in the order the fleet learnt
	// them; empty otherwise.
	Instances []InstanceCount `json:"room_instances,omitempty"`

	// Shard is "i/n" when the run was shard i of n (see Shard); empty for
	// a whole fleet.
	Shard string `json:"shard,omitempty"`
	// StartUnixNS is the instant the run's clock started: the common start
	// of all shards when a barrier or --start-at gave one. StartLateMS is
	// how much later this process really began (its wake-up; a shard that
	// missed the start shows it here and in Warnings).
	StartUnixNS int64   `json:"start_unix_ns"`
	StartLateMS float64 `json:"start_late_ms"`
	// StartCPUWaitMS is how long the process's threads waited for a CPU
	// (runnable, not running: the kernel's run_delay) between learning
	// the start and beginning: the host's share of a late start, which
	// the fleet cannot make up. -1 when unreadable.
	StartCPUWaitMS float64 `json:"start_cpu_wait_ms"`
	// CPUIdlePct is the host's CPU idle share over the run (-1: unknown).
	CPUIdlePct float64 `json:"cpu_idle_pct"`
	// ProcessCPUSeconds is the fleet process's own CPU (user + system)
	// from the run's start to its summary (logins, sends, receipt, drain
	// and leave); ProcessPeakRSSBytes its peak resident memory (VmHWM);
	// ProcessCPUMSPer1k its CPU in milliseconds per thousand messages it
	// handled (sent + received; the same number as seconds per million),
	// 0 when none. Read from /proc/self; -1 when unreadable. Merged: the
	// sums over the shards (the RSS one an upper bound, as the shards may
	// peak at different instants) and the per-thousand of the sums.
	ProcessCPUSeconds   float64 `json:"fleet_process_cpu_seconds"`
	ProcessPeakRSSBytes int64   `json:"fleet_process_peak_rss_bytes"`
	ProcessCPUMSPer1k   float64 `json:"fleet_process_cpu_ms_per_1k_messages"`
	// ClientsPolled counts the logged-in clients their schedulers'
	// pollers read (poll.go: plain TCP and WebSocket over it, without a
	// goroutine of their own); TLS and UDP clients are not. Merged: the
	// sum over the shards.
	ClientsPolled int64 `json:"clients_polled,omitempty"`
	// Saturation counts the progress intervals in which the fleet was
	// saturated, by kind (lag, cpu); empty when it never was.
	Saturation map[string]int `json:"saturation"`
	// TLS is how the fleet spoke TLS (nil: plaintext): version,
	// resumption, the handshakes' times and rate.
	TLS *TLSSummary `json:"tls,omitempty"`
	// HTTPSteps are the profile's HTTP steps' times, by step (each timed
	// apart from the login it precedes); empty without HTTP steps.
	HTTPSteps []HTTPStepTimes `json:"http_steps,omitempty"`
	// Histograms are the latency and lag histograms, lossless, so that
	// `replay merge` computes exact percentiles over shards.
	Histograms Histograms `json:"histograms"`

	// Shards and StartSkewMS are set by Merge only: each shard's own
	// figures, and the spread of the shards' actual start instants.
	Shards      []ShardResult `json:"shards,omitempty"`
	StartSkewMS *float64      `json:"start_skew_ms,omitempty"`
}

// Histograms are HdrHistogram V2 compressed, base64 encodings (the format
// every HdrHistogram implementation reads) of the delivery latency and the
// schedule lag, in microseconds.
type Histograms struct {
	LatencyUS     string `json:"latency_us"`
	ScheduleLagUS string `json:"schedule_lag_us"`
}

// Quantiles are latency figures in milliseconds. Schedule lag has no p90
// or max in the summary (omitted when zero there).
type Quantiles struct {
	P50 float64  `json:"p50"`
	P90 *float64 `json:"p90,omitempty"`
	P99 float64  `json:"p99"`
	Max *float64 `json:"max,omitempty"`
	// none says no sample was taken (no stamped delivery came back): the
	// figures are absent, not zero; JSON null, "none" in the table.
	none bool
}

// None reports whether the figures are absent (no sample).
func (q Quantiles) None() bool { return q.none }

// MarshalJSON writes null for absent figures.
func (q Quantiles) MarshalJSON() ([]byte, error) {
	if q.none {
		return []byte("null"), nil
	}
	type plain Quantiles
	return json.Marshal(plain(q))
}

// UnmarshalJSON reads null as absent figures.
func (q *Quantiles) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*q = Quantiles{none: true}
		return nil
	}
	*q = Quantiles{}
	type plain Quantiles
	return json.Unmarshal(b, (*plain)(q))
}

// latencyQuantiles are the latency figures of h (µs), absent when it
// holds no sample.
func latencyQuantiles(h *hdrhistogram.Histogram) Quantiles {
	q := quantilesMS(h, 50, 90, 99, 100)
	return Quantiles{P50: q[0], P90: &q[1], P99: q[2], Max: &q[3], none: h.TotalCount() == 0}
}

func (f *Fleet) summary() (Summary, error) {
	t := f.stats.totals()
	hists, err := f.stats.encodeHists()
	if err != nil {
		return Summary{}, err
	}
	lag := f.stats.quantilesMS(true, 50, 99)
	f.warnMu.Lock()
	warnings := append(slices.Clone(f.warnings), f.saturationWarnings()...)
	saturation := maps.Clone(f.satCount)
	f.warnMu.Unlock()
	if saturation == nil {
		saturation = map[string]int{}
	}
	cpuS, rss := f.processCost()
	tlsSum, err := f.hs.summary(&f.cfg.TLS)
	if err != nil {
		return Summary{}, err
	}
	httpSteps, err := f.httpTimes.summary()
	if err != nil {
		return Summary{}, err
	}
	return Summary{
		TLS:                 tlsSum,
		HTTPSteps:           httpSteps,
		ClientsRequested:    f.cfg.Shard.Clients(f.cfg.Clients),
		LoginAttempts:       t.LoginAttempts,
		LoginsSucceeded:     t.LoginsSucceeded,
		LoginsFailed:        f.stats.failed.snapshot(),
		NextConnections:     f.nextConnections(),
		PeakLoggedIn:        t.PeakLoggedIn,
		MessagesSent:        t.MessagesSent,
		MessagesReceived:    t.MessagesReceived,
		BytesSent:           t.BytesSent,
		BytesReceived:       t.BytesReceived,
		LatencyMS:           f.stats.latency(),
		ScheduleLagMS:       Quantiles{P50: lag[0], P99: lag[1]},
		LoopsCompleted:      f.loops(),
		DurationS:           f.ended.Sub(f.started).Seconds(),
		Disconnects:         f.stats.disconn.snapshot(),
		SendsDelayed:        t.SendsDelayed,
		MessagesLost:        t.MessagesLost,
		LossPercent:         lossPercent(t.NumberedReceived, t.MessagesLost),
		UDPJoinRetries:      t.UDPJoinRetries,
		NumberedReceived:    t.NumberedReceived,
		Deliveries:          f.deliveries(),
		FirstProtocolError:  f.firstProtocolError(),
		Undecodable:         f.stats.undecodable.snapshot(),
		FramesSent:          f.stats.framesByType(),
		Target:              f.target,
		Warnings:            nonNil(warnings),
		Notes:               nonNil(f.notes),
		Flows:               f.flowClients(),
		Instances:           f.instanceCounts(),
		Shard:               f.cfg.Shard.label(),
		StartUnixNS:         f.epochUnix,
		StartLateMS:         millis(f.startLate),
		StartCPUWaitMS:      knownMillis(f.startCPUWait),
		CPUIdlePct:          f.cpuIdle(),
		ProcessCPUSeconds:   cpuS,
		ProcessPeakRSSBytes: rss,
		ProcessCPUMSPer1k:   perThousand(cpuS, t.MessagesSent+t.MessagesReceived),
		ClientsPolled:       f.clientsPolled(),
		Saturation:          saturation,
		Histograms:          hists,
	}, nil
}

// gapsLine is the loss seen as gaps in numbered casts, printed only where
// numbered casts arrived.
func (s Summary) gapsLine() string {
	if s.NumberedReceived == 0 && s.MessagesLost == 0 {
		return "not measured: no numbered delivery arrived (the reprise profile numbers its stamped broadcasts and othercasts; other profiles number nothing)"
	}
	return fmt.Sprintf("%d (%.3f%% of %d numbered)", s.MessagesLost, s.LossPercent, s.NumberedReceived+s.MessagesLost)
}

// perThousand is CPU seconds per million messages, which is milliseconds
// per thousand: 0 without messages, -1 when the CPU is unknown.
func perThousand(cpuS float64, msgs int64) float64 {
	switch {
	case cpuS < 0:
		return -1
	case msgs <= 0:
		return 0
	}
	return cpuS * 1e6 / float64(msgs)
}

// processLine prints the fleet process's cost for the text summary.
func processLine(cpuS float64, rss int64, per1k float64) string {
	if cpuS < 0 {
		return "unknown (/proc unreadable)"
	}
	return fmt.Sprintf("CPU %.2f s (%.3f ms per 1k messages sent+received), peak RSS %.1f MiB", cpuS, per1k, float64(rss)/(1<<20))
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// knownMillis is millis of a reading whose negative means unknown (-1).
func knownMillis(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return millis(d)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// WriteJSON writes the summary as indented JSON.
func (s Summary) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// WriteJSONLine writes the summary as one line of JSON.
func (s Summary) WriteJSONLine(w io.Writer) error {
	if err := json.NewEncoder(w).Encode(s); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// WriteText writes the summary as an aligned table.
func (s Summary) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("target", s.Target)
	row("duration", time.Duration(s.DurationS*float64(time.Second)).Round(time.Millisecond))
	row("clients requested", s.ClientsRequested)
	row("login attempts", s.LoginAttempts)
	row("logins succeeded", s.LoginsSucceeded)
	row("logins failed", byReason(s.LoginsFailed))
	if s.NextConnections != nil {
		row("next connections", s.NextConnections.line())
	}
	for _, st := range s.HTTPSteps {
		row("http step "+st.Step, st.line())
	}
	row("peak logged in", s.PeakLoggedIn)
	row("messages sent", s.MessagesSent)
	row("messages received", s.MessagesReceived)
	row("bytes sent", s.BytesSent)
	row("bytes received", s.BytesReceived)
	// Whose side: the clients'. Their send is what the server receives,
	// and the report's relay send Gbps is what these clients receive.
	row("clients send Gbps (clients -> server)", gbps(s.BytesSent, s.DurationS))
	row("clients receive Gbps (server -> clients)", gbps(s.BytesReceived, s.DurationS))
	row("fleet host CPU idle %", pctOrUnknown(s.CPUIdlePct))
	if s.LatencyMS.None() {
		row("latency ms p50/p90/p99/max", "none (no stamped delivery came back: the profile has no stamp, or its sends carry none)")
	} else {
		row("latency ms p50/p90/p99/max", fmt.Sprintf("%.3f / %.3f / %.3f / %.3f", s.LatencyMS.P50, deref(s.LatencyMS.P90), s.LatencyMS.P99, deref(s.LatencyMS.Max)))
	}
	row("deliveries expected / received", s.Deliveries.line())
	row("deliveries per receiver", s.Deliveries.receiversLine())
	row("sequence gaps (lost)", s.gapsLine())
	if s.FirstProtocolError != "" {
		row("first protocol error", s.FirstProtocolError)
	}
	if len(s.Undecodable) > 0 {
		row("undecodable (skipped)", byReason(s.Undecodable))
	}
	row("udp join retries", s.UDPJoinRetries)
	row("schedule lag ms p50/p99", fmt.Sprintf("%.3f / %.3f", s.ScheduleLagMS.P50, s.ScheduleLagMS.P99))
	row("loops completed", s.LoopsCompleted)
	row("disconnects", byReason(s.Disconnects))
	row("sends delayed by backpressure", s.SendsDelayed)
	row("frames sent", byReason(s.FramesSent))
	if s.TLS != nil {
		row("tls", s.TLS.line())
	}
	row("fleet process", processLine(s.ProcessCPUSeconds, s.ProcessPeakRSSBytes, s.ProcessCPUMSPer1k))
	for _, fc := range s.Flows {
		who := fmt.Sprintf("%d clients", fc.Clients)
		if fc.Then {
			who = fmt.Sprintf("next connection of %d clients", fc.Clients)
		}
		row(fmt.Sprintf("flow %d (client %s)", fc.Flow, fc.Client),
			fmt.Sprintf("%s, %d logins, %d messages sent, %d received", who, fc.Logins, fc.Sent, fc.Received))
	}
	for _, in := range s.Instances {
		row(fmt.Sprintf("room instance %q", in.Name), in.line())
	}
	if s.Shard != "" {
		row("shard", s.Shard)
	}
	if s.StartSkewMS != nil {
		row("start skew ms", fmt.Sprintf("%.1f (shards' start instants, max - min)", *s.StartSkewMS))
	}
	for _, sh := range s.Shards {
		row("shard "+sh.Shard, sh.line())
	}
	for _, w := range s.Warnings {
		row("warning", w)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}

// gbps is bytes over seconds in Gbit/s, "-" with no duration.
func gbps(bytes int64, seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.4f", float64(bytes)*8/1e9/seconds)
}

// pctOrUnknown prints a percentage measured as -1 when unknown.
func pctOrUnknown(v float64) string {
	if v < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f", v)
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

// byReason prints a reason map as "0" or "a=1 b=2" in key order.
func byReason(m map[string]int64) string {
	if len(m) == 0 {
		return "0"
	}
	out := ""
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if out != "" {
			out += " "
		}
		out += fmt.Sprintf("%s=%d", k, m[k])
	}
	return out
}
