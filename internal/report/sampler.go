package report

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Target is one /metrics endpoint to scrape, or a registry in this process
// to read (a fleet run by the same program: in-process data stays in
// process, and it can be read after the fleet's HTTP server closed).
type Target struct {
	Role     Role
	URL      string              // http://127.0.0.1:9400/metrics
	Gatherer prometheus.Gatherer // read instead of URL when set
}

// name is the target for messages.
func (t Target) name() string {
	if t.Gatherer != nil {
		return "in-process " + string(t.Role)
	}
	return t.URL
}

// SamplerConfig configures a Sampler.
type SamplerConfig struct {
	Targets  []Target
	Interval time.Duration // default 1 s
	Timeout  time.Duration // per scrape; default 2 × Interval, at least 5 s
	Client   *http.Client  // default: a client with Timeout
	// OnPoint, if set, sees each point as it is derived (a progress line).
	// It runs on the sampling goroutine and must be quick.
	OnPoint func(Point)
}

// Series is what a Sampler recorded for one run.
type Series struct {
	Points       []Point
	First, Last  Snapshot // the run's first and last complete scrapes
	ScrapeErrors int
	LastError    string
}

// Sampler scrapes every target once per interval and derives one Point per
// interval. A failed scrape is counted and skipped rather than ending the
// run: a relay that stops answering under load is a finding, not a reason
// to lose the rest of the report.
type Sampler struct {
	cfg SamplerConfig
}

// NewSampler checks cfg and fills in defaults.
func NewSampler(cfg SamplerConfig) (*Sampler, error) {
	if len(cfg.Targets) == 0 {
		return nil, errors.New("sampler: no targets")
	}
	for _, t := range cfg.Targets {
		if t.Role != RoleRelay && t.Role != RoleFleet {
			return nil, fmt.Errorf("sampler: target %s: unknown role %q", t.name(), t.Role)
		}
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 {
		// A loaded machine answers slowly; a late sample (rates use the
		// real time between scrapes) beats a missing one.
		cfg.Timeout = max(2*cfg.Interval, 5*time.Second)
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	return &Sampler{cfg: cfg}, nil
}

// Scrape reads every target once into one snapshot.
func (s *Sampler) Scrape(ctx context.Context) (Snapshot, error) {
	start := time.Now()
	var snap Snapshot
	for _, t := range s.cfg.Targets {
		if err := s.scrapeOne(ctx, t, &snap); err != nil {
			return snap, err
		}
	}
	// The counters were read somewhere between start and now; the middle
	// is the best guess when a busy target answers slowly.
	snap.At = start.Add(time.Since(start) / 2)
	return snap, nil
}

func (s *Sampler) scrapeOne(ctx context.Context, t Target, snap *Snapshot) error {
	if t.Gatherer != nil {
		fams, err := t.Gatherer.Gather()
		if err != nil {
			return fmt.Errorf("scrape %s: %w", t.name(), err)
		}
		byName := make(map[string]*dto.MetricFamily, len(fams))
		for _, f := range fams {
			byName[f.GetName()] = f
		}
		addFamilies(byName, t.Role, snap, time.Now())
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.URL, nil)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	// Ask for the text format: it is what ParseMetrics reads.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scrape %s: status %s", t.URL, resp.Status)
	}
	// promhttp gathers every metric before it writes the headers, so the
	// counters were read just before now.
	answered := time.Now()
	if err := ParseMetrics(resp.Body, t.Role, snap); err != nil {
		return fmt.Errorf("scrape %s: %w", t.URL, err)
	}
	setAnswered(t.Role, snap, answered)
	return nil
}

// Run scrapes until ctx is done, then scrapes once more (so the run's last
// seconds are in the series) and returns what it recorded. The first
// successful scrape is the baseline the run's counters are counted from.
func (s *Sampler) Run(ctx context.Context) Series {
	return s.run(ctx, nil)
}

// RunFrom is Run with a baseline taken by the caller: for a program that
// starts at zero when the sampling starts (a fresh fleet, whose /metrics
// only answers once it runs), the caller knows the baseline better than a
// first scrape that comes a moment late.
func (s *Sampler) RunFrom(ctx context.Context, base Snapshot) Series {
	return s.run(ctx, &base)
}

// finalScrapeTries bounds the attempts at the final scrape.
const finalScrapeTries = 3

func (s *Sampler) run(ctx context.Context, base *Snapshot) Series {
	var ser Series
	var prev Snapshot
	have := false
	if base != nil {
		ser.First, ser.Last, prev, have = *base, *base, *base, true
	}
	// The final scrape uses its own short deadline because ctx is already
	// cancelled then.
	take := func(c context.Context, final bool) bool {
		snap, err := s.Scrape(c)
		if err != nil && !final && c.Err() != nil {
			// The run ended during this tick's scrape: no failure of the
			// target's, and the final scrape follows.
			return false
		}
		if err != nil {
			ser.ScrapeErrors++
			ser.LastError = err.Error()
			return false
		}
		ser.Last = snap
		if !have {
			ser.First, prev, have = snap, snap, true
			return true
		}
		// A final scrape right after a tick would make a rate over a few
		// milliseconds; keep it for the run's totals only.
		if final && snap.At.Sub(prev.At) < s.cfg.Interval/2 {
			return true
		}
		p := Derive(ser.First, prev, snap)
		ser.Points = append(ser.Points, p)
		prev = snap
		if s.cfg.OnPoint != nil {
			s.cfg.OnPoint(p)
		}
		return true
	}
	if base == nil {
		take(ctx, false)
	}
	tick := time.NewTicker(s.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			// The final scrape carries the run's totals: one that timed out
			// (a host that stalled for a second or two) is tried again,
			// rather than ending the totals at the previous sample.
			for range finalScrapeTries {
				final, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
				ok := take(final, true)
				cancel()
				if ok {
					break
				}
			}
			return ser
		case <-tick.C:
			take(ctx, false)
		}
	}
}
