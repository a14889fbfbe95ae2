package report

import (
	"math"
	"time"
)

// synthBase is the fixed start of every synthetic run, so golden files
// don't change with the clock.
var synthBase = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

var synthBounds = []float64{0.001, 0.002, 0.005, 0.01, 0.02, 0.05, math.Inf(1)}

// synthModel describes a run whose every counter follows from a simple
// model of a room relay: senders × rate messages in, each delivered to
// the other logged-in clients of one room.
type synthModel struct {
	scenario   string
	repeat     int
	seconds    int
	loginsPerS float64 // ramp
	maxIn      float64 // relay refuses more (plateau)
	attempts   float64 // fleet stops attempting here
	senders    float64 // 0: everyone sends (N:N)
	rate       float64 // messages/s per sender
	size       float64 // bytes per message
	jitter     float64 // relative, deterministic per repeat
}

// snapshots integrates the model second by second.
func (m synthModel) snapshots() []Snapshot {
	var out []Snapshot
	var s Snapshot
	s.Relay.Present, s.Fleet.Present = true, true
	s.Fleet.Latency = Histogram{Bounds: synthBounds, Counts: make([]float64, len(synthBounds))}
	s.Fleet.ScheduleLag = Histogram{Bounds: synthBounds, Counts: make([]float64, len(synthBounds))}
	// Counters don't start at zero: the relay ran before this run.
	s.Relay.SentBytes, s.Relay.ReceivedBytes = 1e9, 1e8
	for t := 0; t <= m.seconds; t++ {
		s.At = synthBase.Add(time.Duration(m.repeat*1000+t) * time.Second)
		if t > 0 {
			att := math.Min(m.attempts, m.loginsPerS*float64(t))
			s.Fleet.LoginAttempts = att
			in := math.Min(att, m.maxIn)
			s.Fleet.LoginsSucceeded = in
			s.Fleet.LoginsFailed = att - in
			s.Fleet.LoggedIn = in
			s.Relay.Connections = in
			senders := in
			if m.senders > 0 {
				senders = math.Min(in, m.senders)
			}
			j := 1 + m.jitter*float64(m.repeat-1)
			msgs := senders * m.rate * j
			deliv := msgs * math.Max(0, in-1)
			s.Relay.ReceivedMessages += msgs
			s.Relay.DeliveredMessages += deliv
			s.Relay.ReceivedBytes += msgs * m.size
			s.Relay.SentBytes += deliv * m.size
			s.Fleet.SentMessages += msgs
			s.Fleet.SentBytes += msgs * m.size
			s.Fleet.ReceivedMessages += deliv
			s.Fleet.ReceivedBytes += deliv * m.size
			busy := math.Min(1.9, deliv/20000)
			s.Relay.HostCPU.Idle += 2 - busy
			s.Relay.HostCPU.Total += 2
			s.Relay.ProcessCPUSeconds += busy * 0.8
			s.Fleet.HostCPU = s.Relay.HostCPU
			// Latency grows with load: most deliveries in a bucket that
			// moves up as the relay gets busier.
			b := int(math.Min(4, busy*3))
			addHist(&s.Fleet.Latency, b, deliv)
			addHist(&s.Fleet.ScheduleLag, 0, msgs)
			if in >= m.maxIn && m.attempts > m.maxIn && t%7 == 0 {
				s.Relay.SlowConsumerDisconnects++
			}
		}
		out = append(out, cloneSnapshot(s))
	}
	return out
}

func addHist(h *Histogram, bucket int, n float64) {
	for i := bucket; i < len(h.Counts); i++ {
		h.Counts[i] += n
	}
	h.Count += n
	h.Sum += n * h.Bounds[bucket] / 2
}

func cloneSnapshot(s Snapshot) Snapshot {
	s.Fleet.Latency.Counts = append([]float64(nil), s.Fleet.Latency.Counts...)
	s.Fleet.ScheduleLag.Counts = append([]float64(nil), s.Fleet.ScheduleLag.Counts...)
	return s
}

// run derives the points as the Sampler would.
func (m synthModel) run() Run {
	snaps := m.snapshots()
	ser := Series{First: snaps[0], Last: snaps[len(snaps)-1]}
	for i := 1; i < len(snaps); i++ {
		ser.Points = append(ser.Points, Derive(snaps[0], snaps[i-1], snaps[i]))
	}
	return Run{Scenario: m.scenario, Repeat: m.repeat, Started: snaps[0].At, Series: ser,
		Requested: 60, FleetSummary: []byte(`{"clients_requested":60}`)}
}

// synthInput is the fixed input of the golden tests: N:N plateauing at 50
// clients while attempts go on to 60, and 1:N with 5 senders logging in
// all 60, two repeats each.
func synthInput() Input {
	in := Input{
		Title:     "reprise compare: synthetic",
		Generated: synthBase,
		Params: []Param{
			{"capture", "testdata/synthetic.pcap"}, {"clients", "60"}, {"senders", "5"},
			{"loop", "12s,48s"}, {"repeat", "2"},
		},
		Warnings: []string{"N:N #2: relay still had 3 connections 10s after the run"},
	}
	for rep := 1; rep <= 2; rep++ {
		in.Runs = append(in.Runs, synthModel{scenario: "N:N", repeat: rep, seconds: 40, loginsPerS: 2,
			maxIn: 50, attempts: 60, rate: 72, size: 120, jitter: 0.05}.run())
	}
	for rep := 1; rep <= 2; rep++ {
		r := synthModel{scenario: "1:N", repeat: rep, seconds: 40, loginsPerS: 2,
			maxIn: 1000, attempts: 60, senders: 5, rate: 72, size: 120, jitter: 0.05}.run()
		kd := KernelDrops{UDPRcvbufErrors: float64(rep - 1)}
		r.KernelDrops = &kd
		in.Runs = append(in.Runs, r)
	}
	return in
}
