package report

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Role says which program a /metrics endpoint belongs to. Counters of
// several endpoints with the same role (several fleet machines) are summed.
type Role string

// The roles a Sampler knows.
const (
	RoleRelay Role = "relay"
	RoleFleet Role = "fleet"
)

// Metric names read from the relay and the fleet (docs/metrics.md).
const (
	mRelayConnections   = "relay_connections"
	mRelayRooms         = "relay_rooms"
	mRelayRecvMsgs      = "relay_received_messages_total"
	mRelayDelivMsgs     = "relay_delivered_messages_total"
	mRelayRecvBytes     = "relay_received_bytes_total"
	mRelaySentBytes     = "relay_sent_bytes_total"
	mRelaySlowConsumer  = "relay_slow_consumer_disconnects_total"
	mRelayRejected      = "relay_rejected_frames_total"
	mRelayUDPDrops      = "relay_udp_receive_drops_total"
	mRelayRateLimited   = "relay_rate_limited_frames_total"
	mFleetExpected      = "replay_deliveries_expected_total"
	mFleetCasts         = "replay_deliveries_received_total"
	mRelayHostCPU       = "relay_host_cpu_seconds_total"
	mRelayHostCPUs      = "relay_host_cpus"
	mProcessCPU         = "process_cpu_seconds_total"
	mProcessRSS         = "process_resident_memory_bytes"
	mFleetLoggedIn      = "replay_clients_logged_in"
	mFleetAttempts      = "replay_login_attempts_total"
	mFleetLogins        = "replay_logins_total"
	mFleetSentMsgs      = "replay_sent_messages_total"
	mFleetSentBytes     = "replay_sent_bytes_total"
	mFleetRecvMsgs      = "replay_received_messages_total"
	mFleetRecvBytes     = "replay_received_bytes_total"
	mFleetNumbered      = "replay_numbered_messages_received_total"
	mFleetLost          = "replay_messages_lost_total"
	mFleetLatency       = "replay_delivery_latency_seconds"
	mFleetScheduleLag   = "replay_schedule_lag_seconds"
	mFleetHostCPU       = "replay_host_cpu_seconds_total"
	mFleetHostCPUs      = "replay_host_cpus"
	mFleetDisconnects   = "replay_disconnects_total"
	loginSuccessLabel   = "result"
	cpuModeLabel        = "mode"
	idleMode, iowait    = "idle", "iowait"
	defaultMaxScrapeLen = 16 << 20
)

// CPUTimes is a host's CPU seconds summed over all CPUs: idle (idle and
// iowait) and total (every mode).
type CPUTimes struct {
	Idle, Total float64
}

// Histogram is a cumulative Prometheus histogram: bucket upper bounds in
// increasing order (the last is +Inf) with cumulative counts.
type Histogram struct {
	Bounds []float64
	Counts []float64
	Count  float64
	Sum    float64
}

// RelayValues are the raw counters and gauges of one relay scrape.
type RelayValues struct {
	Present bool
	// At is when the relay answered (zero: use the snapshot's time); a
	// busy target answers late, and its rates must use its own clock.
	At                      time.Time
	Connections, Rooms      float64
	ReceivedMessages        float64
	DeliveredMessages       float64
	ReceivedBytes           float64
	SentBytes               float64
	SlowConsumerDisconnects float64
	RejectedFrames          float64
	UDPReceiveDrops         float64 // datagrams the kernel dropped at the relay's UDP sockets
	// RateLimited are frames the relay's rate limits dropped: a sender's
	// own (messages, bytes) and its room's (room_messages, room_bytes).
	RateLimited, RoomRateLimited float64
	HostCPU                      CPUTimes
	// HostCPUs is how many CPUs HostCPU sums (0: not exported): its
	// Total's increase over HostCPUs is the seconds between the relay's
	// own readings, which a late answer does not stretch.
	HostCPUs          float64
	ProcessCPUSeconds float64
	ProcessRSSBytes   float64 // resident memory at the scrape
}

// FleetValues are the raw counters and gauges of one fleet scrape (summed
// over fleet endpoints).
type FleetValues struct {
	Present          bool
	At               time.Time // when the fleet answered; see RelayValues.At
	LoggedIn         float64
	LoginAttempts    float64
	LoginsSucceeded  float64
	LoginsFailed     float64
	SentMessages     float64
	SentBytes        float64
	ReceivedMessages float64
	ReceivedBytes    float64
	NumberedReceived float64 // deliveries whose sender sequence is checked
	MessagesLost     float64 // gaps in those sequences
	// DeliveriesExpected are the deliveries the server owed the clients
	// by the profile's fan-out, DeliveriesReceived those of them that
	// arrived (0 both when the fleet could not know).
	DeliveriesExpected, DeliveriesReceived float64
	Latency                                Histogram
	ScheduleLag                            Histogram
	HostCPU                                CPUTimes
	// Hosts are each fleet endpoint's own host reading, in the order
	// scraped: shards on one host read the same /proc/stat, and HostCPU
	// (their sum) would count that host once per shard.
	Hosts []HostReading
	// Disconnects are logged-in clients that lost their connection (any
	// reason).
	Disconnects float64
	// ProcessCPUSeconds is the fleet processes' own CPU (summed);
	// ProcessRSSBytes their resident memory at the scrape (summed).
	ProcessCPUSeconds float64
	ProcessRSSBytes   float64
}

// Snapshot is one scrape of every endpoint at one instant.
type Snapshot struct {
	At    time.Time
	Relay RelayValues
	Fleet FleetValues
}

// ParseMetrics reads the Prometheus text exposition format and adds what
// it finds for role into snap. Counters of the same role are added, so
// several endpoints of one role can be parsed into one snapshot.
func ParseMetrics(r io.Reader, role Role, snap *Snapshot) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(r, defaultMaxScrapeLen))
	if err != nil {
		return fmt.Errorf("parse %s metrics: %w", role, err)
	}
	switch role {
	case RoleRelay, RoleFleet:
		addFamilies(fams, role, snap, time.Time{})
	default:
		return fmt.Errorf("parse metrics: unknown role %q", role)
	}
	return nil
}

// addFamilies adds role's values from fams into snap; a non-zero at is
// when they were read.
func addFamilies(fams map[string]*dto.MetricFamily, role Role, snap *Snapshot, at time.Time) {
	switch role {
	case RoleRelay:
		addRelay(fams, &snap.Relay)
	case RoleFleet:
		addFleet(fams, &snap.Fleet)
	}
	setAnswered(role, snap, at)
}

// setAnswered records when role's values were read (zero: unknown).
func setAnswered(role Role, snap *Snapshot, at time.Time) {
	if at.IsZero() {
		return
	}
	switch role {
	case RoleRelay:
		snap.Relay.At = at
	case RoleFleet:
		snap.Fleet.At = at
		if n := len(snap.Fleet.Hosts); n > 0 && snap.Fleet.Hosts[n-1].At.IsZero() {
			snap.Fleet.Hosts[n-1].At = at
		}
	}
}

// HostReading is one endpoint's reading of its host's CPU seconds and
// when it answered (zero: unknown), with the CPUs they are summed over (0:
// not exported) and the endpoint's own process CPU, read in the same
// gather: rates over the span the readings cover (the total's increase
// over CPUs), not over the time between answers, which a gather that
// waited after reading /proc/stat shortens or stretches.
type HostReading struct {
	CPUTimes
	At                time.Time
	CPUs              float64
	ProcessCPUSeconds float64
}

func addRelay(fams map[string]*dto.MetricFamily, v *RelayValues) {
	v.Present = true
	v.Connections += sum(fams[mRelayConnections], nil)
	v.Rooms += sum(fams[mRelayRooms], nil)
	v.ReceivedMessages += sum(fams[mRelayRecvMsgs], nil)
	v.DeliveredMessages += sum(fams[mRelayDelivMsgs], nil)
	v.ReceivedBytes += sum(fams[mRelayRecvBytes], nil)
	v.SentBytes += sum(fams[mRelaySentBytes], nil)
	v.SlowConsumerDisconnects += sum(fams[mRelaySlowConsumer], nil)
	v.RejectedFrames += sum(fams[mRelayRejected], nil)
	v.UDPReceiveDrops += sum(fams[mRelayUDPDrops], nil)
	room := func(m *dto.Metric) bool { return strings.HasPrefix(label(m, "limit"), "room_") }
	v.RateLimited += sum(fams[mRelayRateLimited], func(m *dto.Metric) bool { return !room(m) })
	v.RoomRateLimited += sum(fams[mRelayRateLimited], room)
	v.HostCPU = addCPU(v.HostCPU, fams[mRelayHostCPU])
	v.HostCPUs += sum(fams[mRelayHostCPUs], nil)
	v.ProcessCPUSeconds += sum(fams[mProcessCPU], nil)
	v.ProcessRSSBytes += sum(fams[mProcessRSS], nil)
}

func addFleet(fams map[string]*dto.MetricFamily, v *FleetValues) {
	v.Present = true
	v.LoggedIn += sum(fams[mFleetLoggedIn], nil)
	v.LoginAttempts += sum(fams[mFleetAttempts], nil)
	ok := func(m *dto.Metric) bool { return isSuccess(label(m, loginSuccessLabel)) }
	failed := func(m *dto.Metric) bool { return !isSuccess(label(m, loginSuccessLabel)) }
	v.LoginsSucceeded += sum(fams[mFleetLogins], ok)
	v.LoginsFailed += sum(fams[mFleetLogins], failed)
	v.SentMessages += sum(fams[mFleetSentMsgs], nil)
	v.SentBytes += sum(fams[mFleetSentBytes], nil)
	v.ReceivedMessages += sum(fams[mFleetRecvMsgs], nil)
	v.ReceivedBytes += sum(fams[mFleetRecvBytes], nil)
	v.NumberedReceived += sum(fams[mFleetNumbered], nil)
	v.MessagesLost += sum(fams[mFleetLost], nil)
	v.DeliveriesExpected += sum(fams[mFleetExpected], nil)
	v.DeliveriesReceived += sum(fams[mFleetCasts], nil)
	v.Latency = mergeHistogram(v.Latency, fams[mFleetLatency])
	v.ScheduleLag = mergeHistogram(v.ScheduleLag, fams[mFleetScheduleLag])
	v.HostCPU = addCPU(v.HostCPU, fams[mFleetHostCPU])
	if f := fams[mFleetHostCPU]; f != nil {
		v.Hosts = append(v.Hosts, HostReading{CPUTimes: addCPU(CPUTimes{}, f),
			CPUs: sum(fams[mFleetHostCPUs], nil), ProcessCPUSeconds: sum(fams[mProcessCPU], nil)})
	}
	v.Disconnects += sum(fams[mFleetDisconnects], nil)
	v.ProcessCPUSeconds += sum(fams[mProcessCPU], nil)
	v.ProcessRSSBytes += sum(fams[mProcessRSS], nil)
}

// isSuccess names the result label values that count as a login that
// succeeded; every other value is a failure reason.
func isSuccess(result string) bool {
	switch result {
	case "ok", "success", "succeeded", "joined":
		return true
	}
	return false
}

func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// sum adds the values of every series of a counter, gauge or untyped
// family that keep says to keep (all when keep is nil).
func sum(f *dto.MetricFamily, keep func(*dto.Metric) bool) float64 {
	if f == nil {
		return 0
	}
	var s float64
	for _, m := range f.GetMetric() {
		if keep != nil && !keep(m) {
			continue
		}
		switch {
		case m.Counter != nil:
			s += m.GetCounter().GetValue()
		case m.Gauge != nil:
			s += m.GetGauge().GetValue()
		case m.Untyped != nil:
			s += m.GetUntyped().GetValue()
		}
	}
	return s
}

func addCPU(c CPUTimes, f *dto.MetricFamily) CPUTimes {
	if f == nil {
		return c
	}
	for _, m := range f.GetMetric() {
		v := m.GetCounter().GetValue()
		if m.Counter == nil {
			v = m.GetUntyped().GetValue()
		}
		c.Total += v
		if mode := label(m, cpuModeLabel); mode == idleMode || mode == iowait {
			c.Idle += v
		}
	}
	return c
}

// mergeHistogram adds every histogram series of f into h, bucket by bucket
// (series with different labels but the same bounds are summed, as
// sum by (le) does in PromQL).
func mergeHistogram(h Histogram, f *dto.MetricFamily) Histogram {
	if f == nil {
		return h
	}
	byBound := map[float64]float64{}
	for i, b := range h.Bounds {
		byBound[b] = h.Counts[i]
	}
	for _, m := range f.GetMetric() {
		hist := m.GetHistogram()
		if hist == nil {
			continue
		}
		h.Count += float64(hist.GetSampleCount())
		h.Sum += hist.GetSampleSum()
		for _, b := range hist.GetBucket() {
			byBound[b.GetUpperBound()] += float64(b.GetCumulativeCount())
		}
	}
	// The +Inf bucket is the sample count; make sure it is there even if a
	// writer left it out, so quantiles above the last bound stay bounded.
	byBound[math.Inf(1)] = h.Count
	bounds := make([]float64, 0, len(byBound))
	for b := range byBound {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	h.Bounds = bounds
	h.Counts = make([]float64, len(bounds))
	for i, b := range bounds {
		h.Counts[i] = byBound[b]
	}
	return h
}
