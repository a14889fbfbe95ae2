package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// ShardResult is one shard's own figures in a merged summary.
type ShardResult struct {
	Shard            string         `json:"shard"`
	ClientsRequested int            `json:"clients_requested"`
	LoginsSucceeded  int64          `json:"logins_succeeded"`
	MessagesSent     int64          `json:"messages_sent"`
	MessagesReceived int64          `json:"messages_received"`
	LatencyMS        Quantiles      `json:"latency_ms"`
	StartUnixNS      int64          `json:"start_unix_ns"`
	StartLateMS      float64        `json:"start_late_ms"`
	StartCPUWaitMS   float64        `json:"start_cpu_wait_ms"`
	CPUIdlePct       float64        `json:"cpu_idle_pct"`
	Saturated        bool           `json:"saturated"`
	Saturation       map[string]int `json:"saturation"`
	// The shard process's own cost (Summary.ProcessCPUSeconds...).
	ProcessCPUSeconds   float64 `json:"fleet_process_cpu_seconds"`
	ProcessPeakRSSBytes int64   `json:"fleet_process_peak_rss_bytes"`
}

func (r ShardResult) line() string {
	s := fmt.Sprintf("clients %d, logged in %d, sent %d, received %d, latency p99 %.3f ms, cpu idle %.0f%%, start late %.1f ms",
		r.ClientsRequested, r.LoginsSucceeded, r.MessagesSent, r.MessagesReceived, r.LatencyMS.P99, r.CPUIdlePct, r.StartLateMS)
	if r.StartLateMS > 0 && r.StartCPUWaitMS > 0 {
		s += fmt.Sprintf(" (%.1f ms of it waiting for a CPU)", min(r.StartCPUWaitMS, r.StartLateMS))
	}
	if r.ProcessCPUSeconds >= 0 {
		s += fmt.Sprintf(", process CPU %.2f s, peak RSS %.1f MiB", r.ProcessCPUSeconds, float64(r.ProcessPeakRSSBytes)/(1<<20))
	}
	if r.Saturated {
		s += ", SATURATED (" + byKind(r.Saturation) + ")"
	}
	return s
}

func byKind(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s in %d intervals", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// ReadSummary decodes a summary written by WriteJSON or WriteJSONLine.
func ReadSummary(r io.Reader) (Summary, error) {
	var s Summary
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return s, fmt.Errorf("read summary: %w", err)
	}
	return s, nil
}

// ErrMerge marks summaries that cannot be merged.
var ErrMerge = errors.New("cannot merge summaries")

// Merge combines the summaries of the shards of one fleet run into one:
// counts summed, latency and lag percentiles read from the sum of the
// shards' lossless histograms (never averaged percentiles), each shard's
// own figures and saturation kept in Shards, and a saturated shard named in
// Warnings. PeakLoggedIn is the sum of the shards' peaks, an upper bound
// (the shards may have peaked at different instants). The summaries must
// be distinct shards of the same count; missing shards are warned about.
func Merge(sums []Summary) (Summary, error) {
	if len(sums) == 0 {
		return Summary{}, fmt.Errorf("%w: no summaries", ErrMerge)
	}
	lat, lag, hs := newHist(), newHist(), newHist()
	steps, stepIO, stepOrder := map[string]*hdrhistogram.Histogram{}, map[string]*SocketIO{}, []string(nil)
	out := Summary{
		LoginsFailed: map[string]int64{}, Disconnects: map[string]int64{}, FramesSent: map[string]int64{}, Undecodable: map[string]int64{},
		Saturation: map[string]int{}, Warnings: []string{}, Notes: []string{}, Target: sums[0].Target, Flows: flowsZeroed(sums[0].Flows),
		CPUIdlePct: -1,
	}
	seen := map[Shard]bool{}
	count := 0
	var first, last int64
	for k, s := range sums {
		sh, err := shardOf(s, len(sums))
		if err != nil {
			return Summary{}, fmt.Errorf("%w: summary %d: %v", ErrMerge, k+1, err)
		}
		if count != 0 && sh.count() != count {
			return Summary{}, fmt.Errorf("%w: shard %s is of a fleet of %d shards, the first summary's of %d", ErrMerge, sh, sh.count(), count)
		}
		count = sh.count()
		if seen[sh] {
			return Summary{}, fmt.Errorf("%w: shard %s appears twice", ErrMerge, sh)
		}
		seen[sh] = true
		if err := mergeFlows(out.Flows, s.Flows, sh); err != nil {
			return Summary{}, err
		}
		out.Instances = mergeInstances(out.Instances, s.Instances)
		if err := mergeHist(lat, s.Histograms.LatencyUS, sh, "latency"); err != nil {
			return Summary{}, err
		}
		if err := mergeHist(lag, s.Histograms.ScheduleLagUS, sh, "schedule lag"); err != nil {
			return Summary{}, err
		}
		addCounts(&out, s)
		if err := mergeTLS(&out, s.TLS, hs, sh); err != nil {
			return Summary{}, err
		}
		if err := mergeHTTPSteps(steps, stepIO, &stepOrder, s.HTTPSteps, sh); err != nil {
			return Summary{}, err
		}
		mergeDeliveries(&out.Deliveries, s.Deliveries, k == 0)
		// The skew is between the instants the shards really began.
		actual := s.StartUnixNS + int64(s.StartLateMS*1e6)
		if k == 0 {
			first, last = actual, actual
		}
		first, last = min(first, actual), max(last, actual)
		out.Shards = append(out.Shards, shardResult(sh, s))
		for _, w := range s.Warnings {
			out.Warnings = append(out.Warnings, "shard "+sh.String()+": "+w)
		}
		for _, n := range s.Notes {
			if !slices.Contains(out.Notes, n) {
				out.Notes = append(out.Notes, n)
			}
		}
		if s.Target != out.Target {
			out.Warnings = append(out.Warnings, fmt.Sprintf("shard %s ran against %s, shard %s against %s", sh, s.Target, out.Shards[0].Shard, out.Target))
		}
	}
	slices.SortFunc(out.Shards, func(a, b ShardResult) int { return shardIndex(a.Shard) - shardIndex(b.Shard) })
	for _, r := range out.Shards {
		switch {
		case r.Saturated:
			out.Warnings = append(out.Warnings, fmt.Sprintf("WARNING: shard %s was saturated (%s): the merged figures understate the server", r.Shard, byKind(r.Saturation)))
		case r.Saturation[loadHostBusy] > 0:
			out.Warnings = append(out.Warnings, fmt.Sprintf("WARNING: shard %s's host was busy with other work (%s): the merged figures are unreliable", r.Shard, byKind(r.Saturation)))
		}
	}
	if len(seen) < count {
		out.Warnings = append(out.Warnings, fmt.Sprintf("WARNING: merged %d of %d shards; missing %s", len(seen), count, missing(seen, count)))
	}
	out.LatencyMS = latencyQuantiles(lat)
	q := quantilesMS(lag, 50, 99)
	out.ScheduleLagMS = Quantiles{P50: q[0], P99: q[1]}
	skew := float64(last-first) / 1e6
	out.StartSkewMS = &skew
	out.StartUnixNS = first
	lb, err := lat.EncodeV2()
	if err != nil {
		return Summary{}, fmt.Errorf("encode merged latency histogram: %w", err)
	}
	gb, err := lag.EncodeV2()
	if err != nil {
		return Summary{}, fmt.Errorf("encode merged lag histogram: %w", err)
	}
	out.Histograms = Histograms{LatencyUS: string(lb), ScheduleLagUS: string(gb)}
	if out.TLS != nil {
		q := quantilesMS(hs, 50, 90, 99, 100)
		out.TLS.HandshakeMS = Quantiles{P50: q[0], P90: &q[1], P99: q[2], Max: &q[3], none: hs.TotalCount() == 0}
		enc, err := hs.EncodeV2()
		if err != nil {
			return Summary{}, fmt.Errorf("encode merged handshake histogram: %w", err)
		}
		out.TLS.HandshakeUS = string(enc)
	}
	if out.HTTPSteps, err = mergedHTTPSteps(steps, stepIO, stepOrder); err != nil {
		return Summary{}, err
	}
	out.ProcessCPUMSPer1k = perThousand(out.ProcessCPUSeconds, out.MessagesSent+out.MessagesReceived)
	return out, nil
}

// mergeTLS adds a shard's TLS figures: counts summed, the handshake
// histogram merged (its quantiles read at the end), and the rates summed,
// as the shards opened their handshakes at once (the peak an upper bound:
// the shards' busiest seconds may differ).
func mergeTLS(out *Summary, t *TLSSummary, hs *hdrhistogram.Histogram, sh Shard) error {
	if t == nil {
		return nil
	}
	if out.TLS == nil {
		out.TLS = &TLSSummary{Version: t.Version, ALPN: t.ALPN, Resumption: t.Resumption}
	}
	out.TLS.Handshakes += t.Handshakes
	out.TLS.Resumed += t.Resumed
	out.TLS.Detached += t.Detached
	out.TLS.RatePerS += t.RatePerS
	out.TLS.PeakPerS += t.PeakPerS
	return mergeHist(hs, t.HandshakeUS, sh, "tls handshake")
}

// shardOf reads a summary's shard; a summary without one counts as the
// only shard of a whole fleet.
func shardOf(s Summary, n int) (Shard, error) {
	if s.Shard == "" {
		if n > 1 {
			return Shard{}, errors.New("it is no shard's (no \"shard\" field) and there are other summaries")
		}
		return Shard{Count: 1}, nil
	}
	var sh Shard
	if err := sh.Set(s.Shard); err != nil {
		return Shard{}, err
	}
	return sh, nil
}

func mergeHist(dst *hdrhistogram.Histogram, enc string, sh Shard, what string) error {
	if enc == "" {
		return fmt.Errorf("%w: shard %s has no %s histogram (a summary written before histograms were kept)", ErrMerge, sh, what)
	}
	h, err := hdrhistogram.Decode([]byte(enc))
	if err != nil {
		return fmt.Errorf("%w: shard %s: %s histogram: %v", ErrMerge, sh, what, err)
	}
	if dropped := dst.Merge(h); dropped > 0 {
		return fmt.Errorf("%w: shard %s: %d %s values out of range", ErrMerge, sh, dropped, what)
	}
	return nil
}

// addCounts adds a shard's counters to the merged summary.
func addCounts(out *Summary, s Summary) {
	out.ClientsRequested += s.ClientsRequested
	out.LoginAttempts += s.LoginAttempts
	out.LoginsSucceeded += s.LoginsSucceeded
	out.PeakLoggedIn += s.PeakLoggedIn
	out.MessagesSent += s.MessagesSent
	out.MessagesReceived += s.MessagesReceived
	out.BytesSent += s.BytesSent
	out.BytesReceived += s.BytesReceived
	out.LoopsCompleted += s.LoopsCompleted
	out.SendsDelayed += s.SendsDelayed
	out.ClientsPolled += s.ClientsPolled
	out.MessagesLost += s.MessagesLost
	out.NumberedReceived += s.NumberedReceived
	out.UDPJoinRetries += s.UDPJoinRetries
	out.LossPercent = lossPercent(out.NumberedReceived, out.MessagesLost)
	out.DurationS = max(out.DurationS, s.DurationS)
	addAll(out.LoginsFailed, s.LoginsFailed)
	mergeNext(out, s)
	addAll(out.Disconnects, s.Disconnects)
	addAll(out.FramesSent, s.FramesSent)
	addAll(out.Undecodable, s.Undecodable)
	if out.FirstProtocolError == "" {
		out.FirstProtocolError = s.FirstProtocolError
	}
	for k, v := range s.Saturation {
		out.Saturation[k] += v
	}
	// A shard whose own cost is unknown makes the fleet's unknown: a sum
	// of the others would understate it.
	if s.ProcessCPUSeconds < 0 || out.ProcessCPUSeconds < 0 {
		out.ProcessCPUSeconds, out.ProcessPeakRSSBytes = -1, -1
	} else {
		out.ProcessCPUSeconds += s.ProcessCPUSeconds
		out.ProcessPeakRSSBytes += s.ProcessPeakRSSBytes
	}
	if s.CPUIdlePct >= 0 && (out.CPUIdlePct < 0 || s.CPUIdlePct < out.CPUIdlePct) {
		out.CPUIdlePct = s.CPUIdlePct // the busiest shard's host
	}
}

func addAll(dst, src map[string]int64) {
	for k, v := range src {
		dst[k] += v
	}
}

func shardResult(sh Shard, s Summary) ShardResult {
	sat := maps.Clone(s.Saturation)
	if sat == nil {
		sat = map[string]int{}
	}
	return ShardResult{
		Shard: sh.String(), ClientsRequested: s.ClientsRequested, LoginsSucceeded: s.LoginsSucceeded,
		MessagesSent: s.MessagesSent, MessagesReceived: s.MessagesReceived, LatencyMS: s.LatencyMS,
		StartUnixNS: s.StartUnixNS, StartLateMS: s.StartLateMS, StartCPUWaitMS: s.StartCPUWaitMS, CPUIdlePct: s.CPUIdlePct,
		Saturated: fleetSaturated(sat), Saturation: sat,
		ProcessCPUSeconds: s.ProcessCPUSeconds, ProcessPeakRSSBytes: s.ProcessPeakRSSBytes,
	}
}

// fleetSaturated reports whether a summary's saturation counts show the
// fleet itself saturated ("cpu" in summaries written before the causes
// were told apart).
func fleetSaturated(sat map[string]int) bool {
	return sat[loadFleet] > 0 || sat["cpu"] > 0
}

func shardIndex(label string) int {
	var sh Shard
	if sh.Set(label) != nil {
		return 0
	}
	return sh.Index
}

func missing(seen map[Shard]bool, n int) string {
	var out []string
	for i := range n {
		if !seen[Shard{Index: i, Count: n}] {
			out = append(out, fmt.Sprintf("%d/%d", i, n))
		}
	}
	return strings.Join(out, ", ")
}

// flowsZeroed is a --flows fleet's flows with no figures yet, for
// mergeFlows to add the shards' to (nil stays nil).
func flowsZeroed(fl []FlowClients) []FlowClients {
	if fl == nil {
		return nil
	}
	out := make([]FlowClients, len(fl))
	for k, f := range fl {
		out[k] = FlowClients{Flow: f.Flow, Client: f.Client, Clients: f.Clients, Then: f.Then}
	}
	return out
}

// mergeFlows adds a shard's per-flow figures to out's: every shard of a
// --flows fleet lists the same flows, with the whole fleet's clients each.
func mergeFlows(out, fl []FlowClients, sh Shard) error {
	if len(fl) != len(out) {
		return fmt.Errorf("%w: shard %s lists %d flows, the first summary %d", ErrMerge, sh, len(fl), len(out))
	}
	for k, f := range fl {
		o := &out[k]
		if f.Flow != o.Flow || f.Client != o.Client || f.Clients != o.Clients {
			return fmt.Errorf("%w: shard %s: flow %d (%s, %d clients) where the first summary has flow %d (%s, %d clients)",
				ErrMerge, sh, f.Flow, f.Client, f.Clients, o.Flow, o.Client, o.Clients)
		}
		o.Logins += f.Logins
		o.Sent += f.Sent
		o.Received += f.Received
	}
	return nil
}
