package report

import (
	"math"
	"slices"
	"time"
)

// Point is what one sampling interval of a run looked like: rates over the
// interval, gauges at its end. Values that could not be measured (an
// endpoint that did not answer, no latency samples in the interval) are
// NaN, so charts and means skip them instead of showing a false zero.
type Point struct {
	T                    float64 // seconds since the run's first scrape
	SendGbps             float64 // relay → clients
	RecvGbps             float64 // clients → relay
	RelayCPUIdlePct      float64 // relay host, all CPUs
	RelayProcessCPUPct   float64 // relay process; 100 = one core busy
	LoggedIn             float64 // fleet clients logged in
	LoginAttempts        float64 // cumulative since the run started
	LoginFailures        float64 // cumulative since the run started
	MsgsInPerS           float64 // messages the relay received
	MsgsDeliveredPerS    float64 // messages the relay delivered
	LatencyP50Ms         float64 // send → deliver, this interval
	LatencyP99Ms         float64
	ScheduleLagP99Ms     float64
	FleetCPUIdlePct      float64 // fleet host, all CPUs
	FleetProcessCPUPct   float64 // fleet processes; 100 = one core busy
	RelayConnections     float64
	SlowConsumerDiscards float64 // cumulative since the run started
	FleetDisconnects     float64 // logged-in clients lost, cumulative since the run started
	RelayRSSBytes        float64 // relay process resident memory at the interval's end
	// HostOtherCores is the fleet host's CPU spent on work other than the
	// fleet and the server, in cores, when the fleet measured it; NaN
	// otherwise (hostBusyCores then bounds it from the columns above).
	HostOtherCores float64
}

// Derive computes the point for the interval from prev to cur; base is the
// run's first snapshot, against which cumulative columns are counted.
func Derive(base, prev, cur Snapshot) Point {
	nan := math.NaN()
	p := Point{
		T:        cur.At.Sub(base.At).Seconds(),
		SendGbps: nan, RecvGbps: nan, RelayCPUIdlePct: nan, RelayProcessCPUPct: nan,
		LoggedIn: nan, LoginAttempts: nan, LoginFailures: nan, MsgsInPerS: nan,
		MsgsDeliveredPerS: nan, LatencyP50Ms: nan, LatencyP99Ms: nan, ScheduleLagP99Ms: nan,
		FleetCPUIdlePct: nan, FleetProcessCPUPct: nan, RelayConnections: nan, SlowConsumerDiscards: nan,
		FleetDisconnects: nan, RelayRSSBytes: nan, HostOtherCores: nan,
	}
	if dt := relaySpan(prev, cur); dt > 0 {
		deriveRelay(&p, base, prev, cur, dt)
	}
	if dt := roleDT(prev.At, cur.At, prev.Fleet.At, cur.Fleet.At); dt > 0 {
		deriveFleet(&p, base, prev, cur, dt)
	}
	return p
}

// roleDT is the seconds between two answers of one role: their own times
// when both are known, the snapshots' otherwise.
func roleDT(prev, cur, rolePrev, roleCur time.Time) float64 {
	if !rolePrev.IsZero() && !roleCur.IsZero() {
		return roleCur.Sub(rolePrev).Seconds()
	}
	return cur.Sub(prev).Seconds()
}

// deriveRelay computes the relay's rates over dt, the span its readings
// cover (relaySpan: its counters, process CPU and host CPU are read in one
// gather), so a relay that answered late makes no burst of Gbps, messages
// or cores.
func deriveRelay(p *Point, base, prev, cur Snapshot, dt float64) {
	if r, q := prev.Relay, cur.Relay; r.Present && q.Present {
		p.SendGbps = delta(r.SentBytes, q.SentBytes) * 8 / 1e9 / dt
		p.RecvGbps = delta(r.ReceivedBytes, q.ReceivedBytes) * 8 / 1e9 / dt
		p.RelayCPUIdlePct = idlePct(r.HostCPU, q.HostCPU)
		p.RelayProcessCPUPct = 100 * delta(r.ProcessCPUSeconds, q.ProcessCPUSeconds) / dt
		p.MsgsInPerS = delta(r.ReceivedMessages, q.ReceivedMessages) / dt
		p.MsgsDeliveredPerS = delta(r.DeliveredMessages, q.DeliveredMessages) / dt
		p.RelayConnections = q.Connections
		if q.ProcessRSSBytes > 0 {
			p.RelayRSSBytes = q.ProcessRSSBytes
		}
		if base.Relay.Present {
			p.SlowConsumerDiscards = delta(base.Relay.SlowConsumerDisconnects, q.SlowConsumerDisconnects)
		}
	}
}

// deriveFleet computes the fleet's own CPU rate; its traffic rates are
// the relay's view.
func deriveFleet(p *Point, base, prev, cur Snapshot, dt float64) {
	if f, g := prev.Fleet, cur.Fleet; f.Present && g.Present {
		p.LoggedIn = g.LoggedIn
		if base.Fleet.Present {
			p.LoginAttempts = delta(base.Fleet.LoginAttempts, g.LoginAttempts)
			p.LoginFailures = delta(base.Fleet.LoginsFailed, g.LoginsFailed)
			p.FleetDisconnects = delta(base.Fleet.Disconnects, g.Disconnects)
		}
		if f.ProcessCPUSeconds > 0 || g.ProcessCPUSeconds > 0 {
			p.FleetProcessCPUPct = fleetProcessCPUPct(f, g, dt)
		}
		lat := HistogramDelta(f.Latency, g.Latency)
		p.LatencyP50Ms = 1000 * Quantile(0.50, lat)
		p.LatencyP99Ms = 1000 * Quantile(0.99, lat)
		p.ScheduleLagP99Ms = 1000 * Quantile(0.99, HistogramDelta(f.ScheduleLag, g.ScheduleLag))
		p.FleetCPUIdlePct = idlePct(f.HostCPU, g.HostCPU)
		p.HostOtherCores = otherCores(prev, cur)
	}
}

// otherCores is the CPU the fleet's hosts spent on work other than the
// fleet and the server over the interval, in cores, from what /metrics
// exported: each host's busy share of its CPU seconds (/proc/stat, once
// per host however many shards read it) times its CPUs, less each fleet
// endpoint's process CPU and, when the server runs on one of those hosts,
// its process's CPU, each over the span its own readings cover (the host
// total's increase over its CPUs, read in the same gather). Not over the
// time between answers: an endpoint that read its counters and answered a
// second later (a gather waiting on a starved collector) made a 0.08 s
// interval of a 1 s reading, and 25 cores of other work on a 2-CPU host.
// So the figure is at most the hosts' CPUs. NaN when a reading is
// missing (the fleet's process CPU, a host that answered in one scrape
// only, the server's CPU: it may run on the host), when an endpoint does
// not export its host's CPU count (an older fleet: its span is unknown),
// or when a host's idle went back (a busy share over 1).
func otherCores(prev, cur Snapshot) float64 {
	f, g := prev.Fleet, cur.Fleet
	if len(f.Hosts) == 0 || len(f.Hosts) != len(g.Hosts) || !(g.ProcessCPUSeconds > 0) {
		return math.NaN()
	}
	var busy, own float64
	var hosts []HostReading // one reading per distinct host
	for i, h := range g.Hosts {
		b := f.Hosts[i]
		s := hostSpan(b, h)
		share := ((h.Total - h.Idle) - (b.Total - b.Idle)) / (h.Total - b.Total)
		if math.IsNaN(s) || share < 0 || share > 1 {
			return math.NaN()
		}
		own += delta(b.ProcessCPUSeconds, h.ProcessCPUSeconds) / s
		if !slices.ContainsFunc(hosts, func(o HostReading) bool { return sameHost(o, h, h.CPUs) }) {
			hosts = append(hosts, h)
			busy += share * h.CPUs
		}
	}
	r, q := prev.Relay, cur.Relay
	if !r.Present || !q.Present || !(q.HostCPU.Total > 0) {
		return math.NaN()
	}
	server := HostReading{CPUTimes: q.HostCPU, At: q.At, CPUs: q.HostCPUs}
	if slices.ContainsFunc(hosts, func(o HostReading) bool { return sameHost(o, server, o.CPUs) }) {
		rdt := relaySpan(prev, cur)
		if !(rdt > 0) {
			return math.NaN()
		}
		own += delta(r.ProcessCPUSeconds, q.ProcessCPUSeconds) / rdt
	}
	return math.Max(0, busy-own)
}

// hostSpan is the seconds between two readings of one endpoint's host:
// its CPU seconds' increase over its CPUs. NaN when the count is not
// exported or changed, or no time passed.
func hostSpan(before, after HostReading) float64 {
	d := after.Total - before.Total
	if !(after.CPUs > 0) || after.CPUs != before.CPUs || !(d > 0) {
		return math.NaN()
	}
	return d / after.CPUs
}

// relaySpan is the seconds the relay's two readings cover: its host's
// CPU seconds' increase over its CPUs, read in the same gather as its
// counters; the time between its answers when it exports no CPU count.
func relaySpan(prev, cur Snapshot) float64 {
	r, q := prev.Relay, cur.Relay
	s := hostSpan(HostReading{CPUTimes: r.HostCPU, CPUs: r.HostCPUs}, HostReading{CPUTimes: q.HostCPU, CPUs: q.HostCPUs})
	if math.IsNaN(s) {
		return roleDT(prev.At, cur.At, r.At, q.At)
	}
	return s
}

// fleetProcessCPUPct is the fleet processes' CPU in percent of one core,
// each endpoint's over its own readings' span (hostSpan); over dt, the
// time between the fleet's answers, when an endpoint exports no host CPU
// count. NaN when an endpoint's figure would pass its host's CPUs.
func fleetProcessCPUPct(f, g FleetValues, dt float64) float64 {
	if len(f.Hosts) == 0 || len(f.Hosts) != len(g.Hosts) {
		return 100 * delta(f.ProcessCPUSeconds, g.ProcessCPUSeconds) / dt
	}
	var pct float64
	for i, h := range g.Hosts {
		b := f.Hosts[i]
		s := hostSpan(b, h)
		if math.IsNaN(s) {
			return 100 * delta(f.ProcessCPUSeconds, g.ProcessCPUSeconds) / dt
		}
		cores := delta(b.ProcessCPUSeconds, h.ProcessCPUSeconds) / s
		if cores > h.CPUs {
			return math.NaN()
		}
		pct += 100 * cores
	}
	return pct
}

// sameHost: two readings of the CPU seconds since boot are one host's,
// on a host of about cores CPUs: equal totals and idles to within what
// the CPUs spend between the two answers (sequential scrapes of a loaded
// host answer seconds apart) and a scrape's spread. Two machines agree to
// seconds since boot only if they booted within seconds of each other and
// idled alike since.
func sameHost(a, b HostReading, cores float64) bool {
	gap := 0.0
	if !a.At.IsZero() && !b.At.IsZero() {
		gap = math.Abs(a.At.Sub(b.At).Seconds())
	}
	tol := cores * (gap + sameHostSlackS)
	return math.Abs(a.Total-b.Total) <= tol && math.Abs(a.Idle-b.Idle) <= tol
}

// sameHostSlackS is how far apart in time, beyond their answers, two
// endpoints may read /proc/stat: a gather reads it before the answer.
const sameHostSlackS = 2

// delta is a counter's increase; a counter that went down was reset (the
// program restarted), so its new value is all of the increase, as in
// PromQL's rate().
func delta(before, after float64) float64 {
	if after < before {
		return after
	}
	return after - before
}

func idlePct(before, after CPUTimes) float64 {
	dt := after.Total - before.Total
	if dt <= 0 {
		return math.NaN()
	}
	return 100 * (after.Idle - before.Idle) / dt
}

// HistogramDelta is the histogram of the observations made between two
// scrapes. Buckets are matched by bound; a reset yields the later one.
func HistogramDelta(before, after Histogram) Histogram {
	if after.Count < before.Count {
		return after
	}
	prev := make(map[float64]float64, len(before.Bounds))
	for i, b := range before.Bounds {
		prev[b] = before.Counts[i]
	}
	d := Histogram{
		Bounds: append([]float64(nil), after.Bounds...),
		Counts: make([]float64, len(after.Counts)),
		Count:  after.Count - before.Count,
		Sum:    after.Sum - before.Sum,
	}
	for i, b := range after.Bounds {
		d.Counts[i] = math.Max(0, after.Counts[i]-prev[b])
	}
	return d
}

// Quantile estimates the q-quantile of a cumulative histogram the way
// PromQL's histogram_quantile does: find the bucket holding the rank and
// interpolate linearly inside it. A rank in the +Inf bucket gives +Inf
// (PromQL gives the highest finite bound, a number the value is not: it
// is past the range, see PastRangeText). NaN when the histogram is empty.
func Quantile(q float64, h Histogram) float64 {
	n := len(h.Bounds)
	if n == 0 || h.Counts[n-1] <= 0 {
		return math.NaN()
	}
	rank := q * h.Counts[n-1]
	i := 0
	for i < n && h.Counts[i] < rank {
		i++
	}
	if i == n {
		i = n - 1
	}
	if math.IsInf(h.Bounds[i], 1) {
		return math.Inf(1)
	}
	lower, below := 0.0, 0.0
	if i > 0 {
		lower, below = h.Bounds[i-1], h.Counts[i-1]
	}
	inBucket := h.Counts[i] - below
	if inBucket <= 0 {
		return h.Bounds[i]
	}
	return lower + (h.Bounds[i]-lower)*(rank-below)/inBucket
}
