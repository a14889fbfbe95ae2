package fleet

import (
	"fmt"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// The HTTP steps' own times: each step a client made (a seat, a token)
// timed from its request to its answer's last byte, in a histogram per
// step name, beside the login rather than inside it, so that a slow
// matchmaker shows as itself. Steps are few (a profile's, at most 8
// each), and the names beyond maxHTTPStepNames share one.

// maxHTTPStepNames bounds the step names timed apart (the summary's rows
// and the metric's label values).
const maxHTTPStepNames = 32

// otherSteps names the steps beyond maxHTTPStepNames.
const otherSteps = "other"

// httpTimes are the HTTP steps' durations by step name, in the order the
// names were first seen.
type httpTimes struct {
	mu    sync.Mutex
	steps []*stepTimes
}

type stepTimes struct {
	name string
	h    *hdrhistogram.Histogram
	io   SocketIO
}

// SocketIO is what a socket step's connections carried (the lobby's
// socket, closed before the realtime connection), counted apart from
// the realtime connection's messages and bytes so that these stay the
// game server's own: messages are WebSocket text and binary messages,
// bytes what the socket wrote and read after its upgrade (frames,
// headers and control frames included).
type SocketIO struct {
	Sent          int64 `json:"messages_sent"`
	Received      int64 `json:"messages_received"`
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
}

func (a *SocketIO) add(b SocketIO) {
	a.Sent += b.Sent
	a.Received += b.Received
	a.BytesSent += b.BytesSent
	a.BytesReceived += b.BytesReceived
}

// any says the socket carried something.
func (a SocketIO) any() bool { return a != SocketIO{} }

// record adds one answered step's duration.
func (t *httpTimes) record(step string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.of(step).h.RecordValue(clampHist(d.Microseconds()))
}

// count adds what one socket step's connection carried, answered or
// not.
func (t *httpTimes) count(step string, io SocketIO) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.of(step).io.add(io)
}

// failedAt gives a step that failed a login its row, answered or not:
// a step no request of which was ever answered (each timed out, or its
// server refused the connection) still shows in the summary, with 0
// answered beside its failures.
func (t *httpTimes) failedAt(step string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.of(step)
}

// of is the step's times, made when first seen (t.mu held).
func (t *httpTimes) of(step string) *stepTimes {
	for _, s := range t.steps {
		if s.name == step {
			return s
		}
	}
	if len(t.steps) >= maxHTTPStepNames-1 && step != otherSteps {
		return t.of(otherSteps)
	}
	s := &stepTimes{name: step, h: newHist()}
	t.steps = append(t.steps, s)
	return s
}

// HTTPStepTimes is one HTTP step's times in a summary: the requests that
// got an answer (whatever its status; the failures are counted in
// logins_failed as <step>_http_503 and so on) and their durations; a
// step that failed logins and was never answered has its row with 0
// answered and no times (ms null).
type HTTPStepTimes struct {
	Step     string    `json:"step"`
	Answered int64     `json:"answered"`
	MS       Quantiles `json:"ms"`
	// US is the histogram, lossless (HdrHistogram V2, base64), for
	// merging shards.
	US string `json:"us"`
	// Socket is what a socket step's connections carried (nil for a
	// request): not in the summary's messages and bytes, which are the
	// realtime connections'.
	Socket *SocketIO `json:"socket,omitempty"`
}

// summary is the steps' times, nil when no step was made.
func (t *httpTimes) summary() ([]HTTPStepTimes, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []HTTPStepTimes
	for _, s := range t.steps {
		st, err := stepSummary(s.name, s.h)
		if err != nil {
			return nil, err
		}
		if s.io.any() {
			st.Socket = &SocketIO{}
			*st.Socket = s.io
		}
		out = append(out, st)
	}
	return out, nil
}

func stepSummary(name string, h *hdrhistogram.Histogram) (HTTPStepTimes, error) {
	enc, err := h.EncodeV2()
	if err != nil {
		return HTTPStepTimes{}, fmt.Errorf("encode http step %s histogram: %w", name, err)
	}
	q := quantilesMS(h, 50, 90, 99, 100)
	return HTTPStepTimes{Step: name, Answered: h.TotalCount(), MS: Quantiles{P50: q[0], P90: &q[1], P99: q[2], Max: &q[3], none: h.TotalCount() == 0}, US: string(enc)}, nil
}

// line is the summary's row: "answered 200, ms p50/p90/p99/max 1.2 / ...".
func (s HTTPStepTimes) line() string {
	l := fmt.Sprintf("%d answered", s.Answered)
	if !s.MS.None() {
		l += fmt.Sprintf(", ms p50/p90/p99/max %.3f / %.3f / %.3f / %.3f", s.MS.P50, deref(s.MS.P90), s.MS.P99, deref(s.MS.Max))
	}
	if io := s.Socket; io != nil {
		l += fmt.Sprintf("; its socket sent %d / received %d messages, %d / %d bytes", io.Sent, io.Received, io.BytesSent, io.BytesReceived)
	}
	return l
}

// prom is each step's histogram in Prometheus buckets (seconds).
func (t *httpTimes) prom(bounds []float64, each func(step string, b map[float64]uint64, n uint64, sum float64)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, s := range t.steps {
		b, n, sum := histBuckets(s.h, bounds)
		each(s.name, b, n, sum)
	}
}

// mergeHTTPSteps adds a shard's step times to the merged ones, by step
// name.
func mergeHTTPSteps(into map[string]*hdrhistogram.Histogram, ios map[string]*SocketIO, order *[]string, steps []HTTPStepTimes, sh Shard) error {
	for _, s := range steps {
		if s.Socket != nil {
			if ios[s.Step] == nil {
				ios[s.Step] = &SocketIO{}
			}
			ios[s.Step].add(*s.Socket)
		}
		h, ok := into[s.Step]
		if !ok {
			h = newHist()
			into[s.Step] = h
			*order = append(*order, s.Step)
		}
		if err := mergeHist(h, s.US, sh, "http step "+s.Step); err != nil {
			return err
		}
	}
	return nil
}

// mergedHTTPSteps are the merged step times, in the order first seen.
func mergedHTTPSteps(from map[string]*hdrhistogram.Histogram, ios map[string]*SocketIO, order []string) ([]HTTPStepTimes, error) {
	var out []HTTPStepTimes
	for _, name := range order {
		st, err := stepSummary(name, from[name])
		if err != nil {
			return nil, err
		}
		st.Socket = ios[name]
		out = append(out, st)
	}
	return out, nil
}
