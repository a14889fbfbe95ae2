package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// shardSummary is a shard's summary carrying histograms of the given
// latency and lag samples (µs), as Fleet.summary encodes them.
func shardSummary(t *testing.T, sh string, lat, lag []int64) Summary {
	t.Helper()
	s := newStats(1, 1)
	s.rec[0].latency.Record(lat)
	s.rec[0].recordLags(lag)
	s.fold()
	h, err := s.encodeHists()
	if err != nil {
		t.Fatal(err)
	}
	return Summary{Shard: sh, ClientsRequested: 10, MessagesSent: int64(len(lag)), MessagesReceived: int64(len(lat)),
		LoginsFailed: map[string]int64{"timeout": 1}, Histograms: h, Saturation: map[string]int{}}
}

// rawQuantile is the exact q-th percentile of samples: the value of rank
// ceil(q/100 * n), as HdrHistogram defines it.
func rawQuantile(sorted []int64, q float64) int64 {
	rank := int(math.Ceil(q / 100 * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// TestMergeExact: the merged summary's percentiles are those of one
// histogram of the union of all shards' raw samples, for shards of very
// different distributions (where averaging percentiles is far off), and
// within the histogram's resolution (3 significant digits) of the exact
// percentiles of the raw samples.
func TestMergeExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const shards = 4
	var all []int64
	lat := make([][]int64, shards)
	lag := make([][]int64, shards)
	for i := range shards {
		// Shard i's latencies center on 200µs·4^i, with a long tail.
		n := 5000 + 3000*i
		for range n {
			v := int64(200 * math.Pow(4, float64(i)) * math.Exp(rng.NormFloat64()*0.6))
			lat[i] = append(lat[i], v)
			lag[i] = append(lag[i], int64(rng.ExpFloat64()*50))
		}
		all = append(all, lat[i]...)
	}
	var sums []Summary
	for _, i := range []int{2, 0, 3, 1} { // any order
		sums = append(sums, shardSummary(t, []string{"0/4", "1/4", "2/4", "3/4"}[i], lat[i], lag[i]))
	}
	m, err := Merge(sums)
	if err != nil {
		t.Fatal(err)
	}

	ref := newHist()
	for _, v := range all {
		ref.RecordValue(v)
	}
	got, err := hdrhistogram.Decode([]byte(m.Histograms.LatencyUS))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equals(ref) {
		t.Fatalf("merged histogram differs from the histogram of all samples: %d vs %d values", got.TotalCount(), ref.TotalCount())
	}
	want := quantilesMS(ref, 50, 90, 99, 100)
	if m.LatencyMS.P50 != want[0] || *m.LatencyMS.P90 != want[1] || m.LatencyMS.P99 != want[2] || *m.LatencyMS.Max != want[3] {
		t.Errorf("merged latency %+v, want p50/p90/p99/max %v", m.LatencyMS, want)
	}
	sorted := slices.Sorted(slices.Values(all))
	for _, tc := range []struct {
		q   float64
		got float64
	}{{50, m.LatencyMS.P50}, {90, *m.LatencyMS.P90}, {99, m.LatencyMS.P99}} {
		exact := float64(rawQuantile(sorted, tc.q)) / 1000
		if math.Abs(tc.got-exact) > exact*1e-3+1e-3 {
			t.Errorf("p%v: merged %.4f ms, exact over raw samples %.4f ms (beyond 3 significant digits)", tc.q, tc.got, exact)
		}
	}
	// What averaging the shards' p99 would have said, to show why merging
	// histograms matters here.
	var avg float64
	for _, s := range sums {
		avg += s.histP99(t) / shards
	}
	if math.Abs(avg-m.LatencyMS.P99) < m.LatencyMS.P99*0.05 {
		t.Errorf("test data too uniform: averaged p99 %.3f ≈ merged %.3f", avg, m.LatencyMS.P99)
	}
	if m.MessagesReceived != int64(len(all)) || m.ClientsRequested != 40 || m.LoginsFailed["timeout"] != 4 {
		t.Errorf("counts not summed: received %d (want %d), clients %d, failed %v", m.MessagesReceived, len(all), m.ClientsRequested, m.LoginsFailed)
	}
	if len(m.Shards) != shards || m.Shards[0].Shard != "0/4" || m.Shards[3].Shard != "3/4" {
		t.Errorf("shards %+v, want 0/4..3/4 in order", m.Shards)
	}
}

// TestMergeProcessCost: the shards' own CPU and peak RSS add up, the CPU
// per thousand messages is the sums', each shard keeps its own, and one
// unknown shard makes the fleet's unknown rather than understated.
func TestMergeProcessCost(t *testing.T) {
	var sums []Summary
	for i, sh := range []string{"0/3", "1/3", "2/3"} {
		s := shardSummary(t, sh, []int64{100, 200, 300}, []int64{10})
		s.ProcessCPUSeconds = float64(i + 1)
		s.ProcessPeakRSSBytes = int64(i+1) << 20
		sums = append(sums, s)
	}
	m, err := Merge(sums)
	if err != nil {
		t.Fatal(err)
	}
	msgs := m.MessagesSent + m.MessagesReceived
	if m.ProcessCPUSeconds != 6 || m.ProcessPeakRSSBytes != 6<<20 || m.ProcessCPUMSPer1k != 6*1e6/float64(msgs) {
		t.Errorf("merged cost: cpu %v s, rss %d, %v ms per 1k of %d messages; want 6 s, 6 MiB, %v",
			m.ProcessCPUSeconds, m.ProcessPeakRSSBytes, m.ProcessCPUMSPer1k, msgs, 6*1e6/float64(msgs))
	}
	if m.Shards[2].ProcessCPUSeconds != 3 || m.Shards[2].ProcessPeakRSSBytes != 3<<20 || !strings.Contains(m.Shards[2].line(), "process CPU 3.00 s, peak RSS 3.0 MiB") {
		t.Errorf("shard 2/3 lost its own cost: %+v: %s", m.Shards[2], m.Shards[2].line())
	}
	sums[1].ProcessCPUSeconds, sums[1].ProcessPeakRSSBytes = -1, -1
	if m, err = Merge(sums); err != nil {
		t.Fatal(err)
	}
	if m.ProcessCPUSeconds != -1 || m.ProcessPeakRSSBytes != -1 || m.ProcessCPUMSPer1k != -1 {
		t.Errorf("one unknown shard: merged cost %v s, %d B, %v; want all -1", m.ProcessCPUSeconds, m.ProcessPeakRSSBytes, m.ProcessCPUMSPer1k)
	}
}

func (s Summary) histP99(t *testing.T) float64 {
	h, err := hdrhistogram.Decode([]byte(s.Histograms.LatencyUS))
	if err != nil {
		t.Fatal(err)
	}
	return quantilesMS(h, 99)[0]
}

// TestMergeSaturatedAndMissing: losses merge over the numbered casts; a
// saturated shard is named and keeps its saturation in Shards; a missing
// shard is warned about.
func TestMergeSaturatedAndMissing(t *testing.T) {
	a := shardSummary(t, "0/3", []int64{100}, []int64{10})
	b := shardSummary(t, "2/3", []int64{300}, []int64{20})
	b.Saturation = map[string]int{"cpu": 4}
	b.Warnings = []string{"WARNING: cpu"}
	a.MessagesLost, a.NumberedReceived = 1, 99
	b.MessagesLost, b.NumberedReceived = 3, 97
	m, err := Merge([]Summary{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if m.MessagesLost != 4 || m.LossPercent != 2 {
		t.Errorf("lost %d (%.2f%%), want 4 (2%% of 200 numbered casts)", m.MessagesLost, m.LossPercent)
	}
	joined := strings.Join(m.Warnings, "\n")
	for _, want := range []string{"shard 2/3 was saturated (cpu in 4 intervals)", "missing 1/3", "shard 2/3: WARNING: cpu"} {
		if !strings.Contains(joined, want) {
			t.Errorf("warnings lack %q:\n%s", want, joined)
		}
	}
	if m.Shards[0].Saturated || !m.Shards[1].Saturated || m.Saturation["cpu"] != 4 {
		t.Errorf("saturation not kept per shard: %+v, total %v", m.Shards, m.Saturation)
	}
}

func TestMergeRefuses(t *testing.T) {
	a := shardSummary(t, "0/2", []int64{100}, []int64{10})
	noHist := a
	noHist.Histograms = Histograms{}
	bad := a
	bad.Histograms.LatencyUS = "not base64!"
	for _, tc := range []struct {
		name string
		sums []Summary
		want string
	}{
		{"none", nil, "no summaries"},
		{"twice", []Summary{a, a}, "appears twice"},
		{"counts differ", []Summary{a, shardSummary(t, "1/3", nil, nil)}, "fleet of 3 shards"},
		{"no histograms", []Summary{noHist}, "no latency histogram"},
		{"bad histogram", []Summary{bad}, "latency histogram"},
		{"unsharded among others", []Summary{a, shardSummary(t, "", nil, nil)}, "no shard's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Merge(tc.sums)
			if !errors.Is(err, ErrMerge) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want ErrMerge with %q", err, tc.want)
			}
		})
	}
}

// TestMergeTLS: the shards' handshakes add up, and the merged quantiles
// are read from the sum of their histograms.
func TestMergeTLS(t *testing.T) {
	var sums []Summary
	for i, ms := range [][]int64{{1, 2, 3}, {10, 20, 30, 40}} {
		hs := newHandshakes()
		for _, v := range ms {
			hs.h.RecordValue(v * 1000)
			hs.full++
		}
		ts, err := hs.summary(&TLS{Resume: true})
		if err != nil {
			t.Fatal(err)
		}
		ts.RatePerS = 100
		s := shardSummary(t, fmt.Sprintf("%d/2", i), []int64{1000}, []int64{10})
		s.TLS = ts
		sums = append(sums, s)
	}
	m, err := Merge(sums)
	if err != nil {
		t.Fatal(err)
	}
	tl := m.TLS
	if tl == nil || tl.Handshakes != 7 || tl.RatePerS != 200 || tl.Resumption != "tickets" || tl.HandshakeMS.P50 < 9.9 || tl.HandshakeMS.P50 > 10.1 || deref(tl.HandshakeMS.Max) < 39.9 {
		t.Fatalf("merged tls %+v (p50 %v max %v)", tl, tl.HandshakeMS.P50, deref(tl.HandshakeMS.Max))
	}
}

// TestMergeHTTPSteps: each step's times add up over the shards by step
// name, the merged quantiles read from the sum of their histograms; a
// step only one shard made is kept.
func TestMergeHTTPSteps(t *testing.T) {
	var sums []Summary
	for i, steps := range []map[string][]time.Duration{
		{"auth": {time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond}},
		{"auth": {10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond}, "lobby": {5 * time.Millisecond}},
	} {
		var ht httpTimes
		for _, name := range []string{"auth", "lobby"} {
			for _, d := range steps[name] {
				ht.record(name, d)
			}
		}
		// The lobby socket's messages: shard 0 made no lobby step but
		// counted one that failed before its answer.
		ht.count("lobby", SocketIO{Sent: 1 + int64(i), Received: 2 * int64(i), BytesSent: 10, BytesReceived: 20 * int64(i)})
		st, err := ht.summary()
		if err != nil {
			t.Fatal(err)
		}
		s := shardSummary(t, fmt.Sprintf("%d/2", i), []int64{1000}, []int64{10})
		s.HTTPSteps = st
		sums = append(sums, s)
	}
	m, err := Merge(sums)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.HTTPSteps) != 2 {
		t.Fatalf("merged steps %+v", m.HTTPSteps)
	}
	auth, lobby := m.HTTPSteps[0], m.HTTPSteps[1]
	if auth.Step != "auth" || auth.Answered != 7 || auth.MS.P50 < 9.9 || auth.MS.P50 > 10.1 || deref(auth.MS.Max) < 39.9 {
		t.Errorf("merged auth %+v (p50 %v max %v)", auth, auth.MS.P50, deref(auth.MS.Max))
	}
	if lobby.Step != "lobby" || lobby.Answered != 1 || lobby.Socket == nil || *lobby.Socket != (SocketIO{Sent: 3, Received: 2, BytesSent: 20, BytesReceived: 20}) {
		t.Errorf("merged lobby %+v (socket %+v)", lobby, lobby.Socket)
	}
	if auth.Socket != nil || !strings.Contains(lobby.line(), "its socket sent 3 / received 2 messages, 20 / 20 bytes") || strings.Contains(auth.line(), "socket") {
		t.Errorf("auth's socket %+v; lines %q, %q", auth.Socket, auth.line(), lobby.line())
	}
}

// TestHTTPTimesBounded: step names beyond maxHTTPStepNames share one.
func TestHTTPTimesBounded(t *testing.T) {
	var ht httpTimes
	for i := range 3 * maxHTTPStepNames {
		ht.record(fmt.Sprintf("step%d", i), time.Millisecond)
	}
	st, err := ht.summary()
	if err != nil {
		t.Fatal(err)
	}
	if len(st) != maxHTTPStepNames || st[len(st)-1].Step != otherSteps || st[len(st)-1].Answered != 2*maxHTTPStepNames+1 {
		t.Errorf("%d steps, last %+v", len(st), st[len(st)-1])
	}
}

// TestHTTPStepNeverAnswered: a step that failed its logins and was never
// answered (each request timed out) has its row, 0 answered and no
// times, in the shard's summary, its JSON, its text and the merged one.
func TestHTTPStepNeverAnswered(t *testing.T) {
	var sums []Summary
	for i, answered := range [][]time.Duration{nil, {3 * time.Millisecond}} {
		var ht httpTimes
		ht.record("auth", time.Millisecond)
		ht.failedAt("lobby")
		ht.failedAt("lobby")
		for _, d := range answered {
			ht.record("lobby", d)
		}
		st, err := ht.summary()
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if len(st) != 2 || st[1].Step != "lobby" || st[1].Answered != 0 || !st[1].MS.None() || st[1].line() != "0 answered" {
				t.Fatalf("steps %+v; want lobby with 0 answered and no times", st)
			}
			b, err := json.Marshal(st[1])
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), `"step":"lobby","answered":0,"ms":null`) {
				t.Errorf("JSON %s", b)
			}
		}
		s := shardSummary(t, fmt.Sprintf("%d/2", i), []int64{1000}, []int64{10})
		s.HTTPSteps = st
		sums = append(sums, s)
	}
	m, err := Merge(sums[:1])
	if err != nil {
		t.Fatal(err)
	}
	if len(m.HTTPSteps) != 2 || m.HTTPSteps[1].Answered != 0 || !m.HTTPSteps[1].MS.None() {
		t.Errorf("merged one shard: %+v", m.HTTPSteps)
	}
	if m, err = Merge(sums); err != nil {
		t.Fatal(err)
	}
	if len(m.HTTPSteps) != 2 || m.HTTPSteps[1].Answered != 1 || m.HTTPSteps[1].MS.None() {
		t.Errorf("merged both shards: %+v", m.HTTPSteps)
	}
}
