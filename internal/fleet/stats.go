package fleet

import (
	"fmt"
	"maps"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/reprise-harness/reprise/internal/hdrcounts"
	"github.com/reprise-harness/reprise/internal/profile"
)

// newHist is a histogram in µs, 1 µs to 5 minutes at 3 significant
// digits (about 140 KiB each): hdrcounts' layout.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(hdrcounts.Min, hdrcounts.Max, hdrcounts.Digits)
}

// counters are one scheduler's counters. Several goroutines add to them
// (the scheduler, its clients' readers: its poller), once per write or
// read batch, never per frame. The send counters (the scheduler's) and
// the receive counters (the readers') sit on cache lines of their own,
// so the scheduler's writes do not take the line its poller adds to on
// every read, and the padding at the end keeps schedulers off each
// other's lines.
type counters struct {
	sentFrames [profile.MaxKinds]atomic.Int64 // by the profile's kind
	sentBytes  atomic.Int64
	delayed    atomic.Int64 // frames that waited in a send backlog
	// castsUnknown counts counted sends whose fan-out only the server
	// knows (profile.FanoutServer): expected deliveries are then unknown.
	castsUnknown atomic.Int64
	_            [64]byte
	recvMsgs     atomic.Int64 // deliver frames
	recvFrames   atomic.Int64 // every frame
	recvBytes    atomic.Int64
	// recvNumbered counts deliveries of room-wide casts (sequence in the
	// stamp), lost the gaps in their sequences (loss.go).
	recvNumbered atomic.Int64
	lost         atomic.Int64
	_            [64]byte
}

// hists is a pair of recording counts (delivery latency and schedule
// lag, in µs, in the histograms' layout: internal/hdrcounts), each behind
// a mutex of its own. Readers record latency and schedulers lag into one
// of several of these; the stats ticker moves their contents into the
// cumulative histograms once a second, so recording never waits on a
// scrape. A reader lends latency to the profile for one read (consume),
// under latMu: the decoder counts each stamped delivery as it decodes
// it. The two locks, on cache lines of their own, keep a scheduler's lag
// records and its poller's reads from waiting on each other (one mutex
// for both had them contend on every read and every batch of sends).
type hists struct {
	latMu   sync.Mutex
	latency *hdrcounts.Counts
	_       [64]byte
	lagMu   sync.Mutex
	lag     *hdrcounts.Counts
	_       [64]byte
}

func newHists() *hists { return &hists{latency: hdrcounts.New(), lag: hdrcounts.New()} }

func (h *hists) recordLags(us []int64) {
	h.lagMu.Lock()
	h.lag.Record(us)
	h.lagMu.Unlock()
}

// clampHist keeps a value in the histogram's range: a negative latency
// (clock step) counts as 0, an overlong one as the maximum, rather than
// being dropped.
func clampHist(v int64) int64 { return hdrcounts.Clamp(v) }

// reasons counts events by a bounded reason label.
type reasons struct {
	mu sync.Mutex
	m  map[string]int64
}

func (r *reasons) add(reason string) { r.addN(reason, 1) }

func (r *reasons) addN(reason string, n int64) {
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]int64{}
	}
	r.m[reason] += n
	r.mu.Unlock()
}

func (r *reasons) snapshot() map[string]int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := maps.Clone(r.m)
	if m == nil {
		m = map[string]int64{}
	}
	return m
}

func (r *reasons) total() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, v := range r.m {
		n += v
	}
	return n
}

// stats is the fleet's bookkeeping: cheap to add to from the hot paths,
// summed when someone looks.
type stats struct {
	byScheduler []counters
	rec         []*hists // recording histograms, picked by client index
	attempts    atomic.Int64
	loggedIn    atomic.Int64
	peak        atomic.Int64
	succeed     atomic.Int64
	// joinRetries counts UDP join datagrams sent again (joinRetry).
	joinRetries atomic.Int64
	// leaveCut counts clients whose leave ran out of time before the
	// server closed; leaveUnsent the bytes they had not seen acknowledged.
	leaveCut, leaveUnsent atomic.Int64
	failed                reasons
	disconn               reasons
	// next counts the later connections of clients playing flows in
	// turn (turns.go): tried, logged in, failed by flow<N>_<reason>.
	// They are not logins: a client is one login, on its first.
	next nextStats
	// undecodable counts what was skipped as decoding to nothing.
	undecodable reasons
	// kinds name the sent kinds (the profile's); counted tells the ones
	// that are messages.
	kinds   profile.KindNames
	counted func(kind int) bool

	// cum holds everything recorded so far; win what was recorded since
	// the last progress line. Both are guarded by mu, and filled by fold.
	mu     sync.Mutex
	cumLat *hdrhistogram.Histogram
	cumLag *hdrhistogram.Histogram
	winLat *hdrhistogram.Histogram
	winLag *hdrhistogram.Histogram
}

func newStats(shards, recShards int) *stats {
	s := &stats{
		counted:     func(int) bool { return false },
		byScheduler: make([]counters, shards),
		cumLat:      newHist(), cumLag: newHist(), winLat: newHist(), winLag: newHist(),
	}
	for range recShards {
		s.rec = append(s.rec, newHists())
	}
	return s
}

// loginOK counts a client logged in on its first connection.
func (s *stats) loginOK() {
	s.succeed.Add(1)
	s.connected()
}

// nextOK counts a client logged in on its next connection (turns.go):
// logged in again, not one login more.
func (s *stats) nextOK() {
	s.next.ok.Add(1)
	s.connected()
}

// connected counts one more connection logged in now, and the peak.
func (s *stats) connected() {
	n := s.loggedIn.Add(1)
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

// fold moves the recording histograms into the cumulative and window ones.
func (s *stats) fold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.rec {
		h.latMu.Lock()
		h.latency.Fold(s.cumLat, s.winLat)
		h.latMu.Unlock()
		h.lagMu.Lock()
		h.lag.Fold(s.cumLag, s.winLag)
		h.lagMu.Unlock()
	}
}

// takeWindow returns the p99 of latency and lag since the last call, in
// µs, and their sample counts (the p99 means nothing without one), and
// starts a new window.
func (s *stats) takeWindow() (latP99, latN, lagP99, lagN int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	latP99, latN = s.winLat.ValueAtQuantile(99), s.winLat.TotalCount()
	lagP99, lagN = s.winLag.ValueAtQuantile(99), s.winLag.TotalCount()
	s.winLat.Reset()
	s.winLag.Reset()
	return
}

// Totals are the fleet's counters at one moment.
type Totals struct {
	LoginAttempts    int64
	LoginsSucceeded  int64
	LoginsFailed     int64
	LoggedIn         int64
	PeakLoggedIn     int64
	MessagesSent     int64 // send frames
	FramesSent       int64 // every frame: joins, sends, heartbeats, leaves
	BytesSent        int64
	MessagesReceived int64 // deliver frames
	FramesReceived   int64
	BytesReceived    int64
	Disconnects      int64
	SendsDelayed     int64 // frames that waited for the relay to read (backpressure)
	// NumberedReceived are deliveries of room-wide casts, whose sender
	// sequence is checked; MessagesLost the gaps in those sequences.
	NumberedReceived int64
	MessagesLost     int64
	UDPJoinRetries   int64
}

func (s *stats) totals() Totals {
	t := Totals{
		LoginAttempts:   s.attempts.Load(),
		LoginsSucceeded: s.succeed.Load(),
		LoginsFailed:    s.failed.total(),
		LoggedIn:        s.loggedIn.Load(),
		PeakLoggedIn:    s.peak.Load(),
		Disconnects:     s.disconn.total(),
		UDPJoinRetries:  s.joinRetries.Load(),
	}
	for i := range s.byScheduler {
		c := &s.byScheduler[i]
		for ty := range c.sentFrames {
			n := c.sentFrames[ty].Load()
			t.FramesSent += n
			if n > 0 && s.counted(ty) {
				t.MessagesSent += n
			}
		}
		t.BytesSent += c.sentBytes.Load()
		t.MessagesReceived += c.recvMsgs.Load()
		t.FramesReceived += c.recvFrames.Load()
		t.BytesReceived += c.recvBytes.Load()
		t.SendsDelayed += c.delayed.Load()
		t.NumberedReceived += c.recvNumbered.Load()
		t.MessagesLost += c.lost.Load()
	}
	t.MessagesLost = max(t.MessagesLost, 0) // late arrivals are counted back off
	return t
}

// setProtocol names the sent kinds after the player's.
func (s *stats) setProtocol(p profile.Player) {
	s.kinds, s.counted = p.Kinds(), p.Counted
}

func (s *stats) framesByType() map[string]int64 {
	m := map[string]int64{}
	for i := range s.byScheduler {
		for ty := range s.byScheduler[i].sentFrames {
			if n := s.byScheduler[i].sentFrames[ty].Load(); n > 0 {
				m[s.kindName(ty)] += n
			}
		}
	}
	return m
}

// latency is the run's latency figures, absent without a sample.
func (s *stats) latency() Quantiles {
	s.mu.Lock()
	defer s.mu.Unlock()
	return latencyQuantiles(s.cumLat)
}

// quantilesMS reads quantiles (in percent) of a cumulative histogram in
// milliseconds.
func (s *stats) quantilesMS(lag bool, qs ...float64) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.cumLat
	if lag {
		h = s.cumLag
	}
	return quantilesMS(h, qs...)
}

// quantilesMS reads quantiles (in percent; 100 is the maximum) of a
// histogram in µs as milliseconds, all 0 when it is empty.
func quantilesMS(h *hdrhistogram.Histogram, qs ...float64) []float64 {
	out := make([]float64, len(qs))
	if h.TotalCount() == 0 {
		return out
	}
	for i, q := range qs {
		v := h.Max()
		if q < 100 {
			v = h.ValueAtQuantile(q)
		}
		out[i] = float64(v) / 1000
	}
	return out
}

// encodeHists returns the cumulative latency and lag histograms in
// HdrHistogram's V2 compressed, base64 form: lossless, so summaries of
// several shards merge into the exact histogram of all their samples.
func (s *stats) encodeHists() (Histograms, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lat, err := s.cumLat.EncodeV2()
	if err != nil {
		return Histograms{}, fmt.Errorf("encode latency histogram: %w", err)
	}
	lag, err := s.cumLag.EncodeV2()
	if err != nil {
		return Histograms{}, fmt.Errorf("encode schedule lag histogram: %w", err)
	}
	return Histograms{LatencyUS: string(lat), ScheduleLagUS: string(lag)}, nil
}

// promBuckets turns a cumulative histogram into Prometheus buckets (upper
// bounds in seconds → cumulative counts), its count and its sum (seconds).
func (s *stats) promBuckets(lag bool, bounds []float64) (map[float64]uint64, uint64, float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.cumLat
	if lag {
		h = s.cumLag
	}
	return histBuckets(h, bounds)
}

// histBuckets turns a histogram in µs into Prometheus buckets (upper
// bounds in seconds → cumulative counts), its count and its sum (seconds).
func histBuckets(h *hdrhistogram.Histogram, bounds []float64) (map[float64]uint64, uint64, float64) {
	buckets := make(map[float64]uint64, len(bounds))
	for _, b := range bounds {
		buckets[b] = 0
	}
	n := h.TotalCount()
	if n == 0 {
		return buckets, 0, 0
	}
	sorted := append([]float64(nil), bounds...)
	sort.Float64s(sorted)
	for _, bar := range h.Distribution() {
		if bar.Count == 0 {
			continue
		}
		sec := float64(bar.To) / 1e6
		for _, b := range sorted {
			if sec <= b {
				buckets[b] += uint64(bar.Count)
			}
		}
	}
	return buckets, uint64(n), h.Mean() * float64(n) / 1e6
}

func (s *stats) kindName(k int) string {
	if k < len(s.kinds) {
		return s.kinds[k]
	}
	return "other"
}
