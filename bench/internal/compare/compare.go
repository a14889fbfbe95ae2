// Package compare runs the same room workloads against reprise's relay and
// nats-server, each in its own process, alternating A B A B, and reports
// medians side by side as a table and as JSON. It owns the benchmark's
// sequencing and arithmetic; the load itself is internal/load and the
// process handling internal/proc.
package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/bench/internal/load"
	"github.com/reprise-harness/reprise/bench/internal/proc"
)

// Workload is rooms × members where the first Senders members of each room
// send othercasts and every member receives.
type Workload struct {
	Name    string
	Rooms   int
	Members int
	Senders int
}

// ParseWorkload reads "RxM" (R rooms of M members, all sending) or "1:N"
// (one sender to N receivers in one room).
func ParseWorkload(s string) (Workload, error) {
	if a, b, ok := strings.Cut(s, "x"); ok {
		r, err1 := strconv.Atoi(a)
		m, err2 := strconv.Atoi(b)
		if err := errors.Join(err1, err2); err != nil || r < 1 || m < 2 {
			return Workload{}, fmt.Errorf("workload %q: want RxM with R ≥ 1, M ≥ 2", s)
		}
		return Workload{Name: s, Rooms: r, Members: m, Senders: m}, nil
	}
	if a, b, ok := strings.Cut(s, ":"); ok && a == "1" {
		n, err := strconv.Atoi(b)
		if err != nil || n < 1 {
			return Workload{}, fmt.Errorf("workload %q: want 1:N with N ≥ 1", s)
		}
		return Workload{Name: s, Rooms: 1, Members: n + 1, Senders: 1}, nil
	}
	return Workload{}, fmt.Errorf("workload %q: want RxM (e.g. 8x32) or 1:N (e.g. 1:1000)", s)
}

// Deliveries is the nominal deliveries per second at rate sends/s per sender.
func (w Workload) Deliveries(rate float64) float64 {
	return float64(w.Rooms*w.Senders*(w.Members-1)) * rate
}

// Target is one server under test.
type Target struct {
	Name  string
	Bin   string
	Args  func(addr string) ([]string, error) // command line for a server listening on addr
	Proto load.Protocol
}

// Options is the whole comparison.
type Options struct {
	Workloads []Workload
	Targets   []Target
	Reps      int
	Rate      float64
	Payload   int
	Warmup    time.Duration
	Duration  time.Duration
	Drain     time.Duration
	Cooldown  time.Duration
	Spread    bool // each sender its own phase instead of a burst per room
	IdleConns int  // connections for the idle RSS test; 0 skips it
	IdleRoom  int
	// ReplayBin, if set, is cmd/replay: FleetClients receive-only clients
	// of it are held against the relay to measure the fleet's memory.
	ReplayBin    string
	FleetClients int
	// FleetLoads are N:N workloads replayed by cmd/replay itself, Reps
	// times each, to measure the fleet's CPU per message.
	FleetLoads []Workload
	TempDir    string
	Log        io.Writer // progress lines
	// OnRun, if set, is called while the window is open for each run, with
	// the server and the workload; the relay's profiler hooks in here.
	OnRun func(ctx context.Context, srv *proc.Server, w Workload, window time.Duration)
}

// Run is one measured run, as written to JSON.
type Run struct {
	Server        string  `json:"server"`
	Workload      string  `json:"workload"`
	Rep           int     `json:"rep"`
	Connections   int     `json:"connections"`
	WindowS       float64 `json:"window_s"`
	NominalPerS   float64 `json:"nominal_deliveries_per_s"`
	OfferedPerS   float64 `json:"offered_deliveries_per_s"` // from sends actually made in the window
	DeliveredPerS float64 `json:"delivered_per_s"`
	ServerCPUS    float64 `json:"server_cpu_s"`
	ServerCPUPerM float64 `json:"server_cpu_s_per_million"`
	ServerRSSMiB  float64 `json:"server_rss_mib"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	P999Ms        float64 `json:"p999_ms"`
	MaxMs         float64 `json:"max_ms"`
	ClientCPUS    float64 `json:"client_cpu_s"`
	ClientCPUPerM float64 `json:"client_cpu_s_per_million_msgs"` // per million sent+received
	Sent          uint64  `json:"sent"`
	Expected      uint64  `json:"expected"`
	Missing       uint64  `json:"missing"`
	Dups          uint64  `json:"dups"`
	Gaps          uint64  `json:"gaps"`
	Misrouted     uint64  `json:"misrouted"`
	Late          uint64  `json:"late_sends"`
	Skipped       uint64  `json:"skipped_sends"`
	Errors        uint64  `json:"errors"`
	FirstError    string  `json:"first_error,omitempty"`
	LoadAvg       string  `json:"loadavg_before"`
}

// Idle is the idle-connection memory of one server.
type Idle struct {
	Server      string  `json:"server"`
	Connections int     `json:"connections"`
	BaseRSSMiB  float64 `json:"base_rss_mib"`
	RSSMiB      float64 `json:"rss_mib"`
	PerConnKiB  float64 `json:"rss_per_conn_kib"`
}

// Report is everything one comparison measured.
type Report struct {
	Started  time.Time   `json:"started"`
	Machine  string      `json:"machine"`
	Rate     float64     `json:"rate_hz"`
	Payload  int         `json:"payload_bytes"`
	WindowS  float64     `json:"window_s"`
	Reps     int         `json:"reps"`
	Spread   bool        `json:"spread"` // senders spread over the period, not a burst per room
	Runs     []Run       `json:"runs"`
	Medians  []Run       `json:"medians"`
	Idle     []Idle      `json:"idle,omitempty"`
	Fleet    *FleetIdle  `json:"fleet_idle,omitempty"`
	FleetRun []FleetLoad `json:"fleet_load,omitempty"`
	Failures []string    `json:"failures,omitempty"`
}

// Compare runs every workload Reps times against each target in turn
// (A B A B …), then the idle test, and returns the report. A run that fails
// is recorded in Failures and the comparison goes on.
func Compare(ctx context.Context, o Options) (*Report, error) {
	rep := &Report{Started: time.Now(), Machine: machine(), Rate: o.Rate, Payload: o.Payload, WindowS: o.Duration.Seconds(), Reps: o.Reps, Spread: o.Spread}
	for _, w := range o.Workloads {
		for i := 0; i < o.Reps; i++ {
			for _, t := range o.Targets {
				if err := ctx.Err(); err != nil {
					return rep, err
				}
				r, err := runOne(ctx, o, t, w, i)
				if err != nil {
					rep.Failures = append(rep.Failures, err.Error())
					logf(o.Log, "FAIL %s %s rep %d: %v", t.Name, w.Name, i, err)
				} else {
					rep.Runs = append(rep.Runs, *r)
					logf(o.Log, "%-8s %-7s rep %d: delivered %.0f/s of %.0f, cpu %.2f s/M, p50 %.2f p99 %.2f p999 %.2f ms, rss %.1f MiB, missing %d, late %d, skipped %d",
						r.Server, r.Workload, i, r.DeliveredPerS, r.NominalPerS, r.ServerCPUPerM, r.P50Ms, r.P99Ms, r.P999Ms, r.ServerRSSMiB, r.Missing, r.Late, r.Skipped)
				}
				if err := sleep(ctx, o.Cooldown); err != nil {
					return rep, err
				}
			}
		}
	}
	rep.Medians = Medians(rep.Runs)
	if o.IdleConns > 0 {
		for _, t := range o.Targets {
			if _, udp := t.Proto.(load.Datagrams); udp {
				continue // the idle test holds TCP connections
			}
			id, err := idleOne(ctx, o, t)
			if err != nil {
				rep.Failures = append(rep.Failures, err.Error())
				logf(o.Log, "FAIL idle %s: %v", t.Name, err)
				continue
			}
			rep.Idle = append(rep.Idle, *id)
			logf(o.Log, "idle %-8s %d conns: rss %.1f → %.1f MiB, %.2f KiB per connection", id.Server, id.Connections, id.BaseRSSMiB, id.RSSMiB, id.PerConnKiB)
		}
	}
	for _, w := range o.FleetLoads {
		if o.ReplayBin == "" {
			break
		}
		for i := 0; i < o.Reps; i++ {
			for _, t := range o.Targets {
				if t.Name != "reprise" {
					continue
				}
				fr, err := fleetLoad(ctx, t, o.ReplayBin, o.TempDir, w, o.Rate, o.Payload, o.Warmup, o.Duration)
				if err != nil {
					rep.Failures = append(rep.Failures, "fleet load: "+err.Error())
					logf(o.Log, "FAIL fleet load %s: %v", w.Name, err)
					continue
				}
				rep.FleetRun = append(rep.FleetRun, *fr)
				logf(o.Log, "fleet load %-6s rep %d: replay %.3f CPU s per million msgs (%.2f cores, %.0f sent/s, %.0f delivered/s of %.0f), rss %.1f MiB; relay %.3f s/M",
					w.Name, i, fr.ReplayCPUPerM, fr.ReplayCPUCores, fr.SentPerS, fr.DeliveredPerS, fr.NominalPerS, fr.ReplayRSSMiB, fr.RelayCPUPerM)
			}
		}
	}
	if o.ReplayBin != "" && o.FleetClients > 1 {
		for _, t := range o.Targets {
			if t.Name != "reprise" {
				continue
			}
			fi, err := fleetIdle(ctx, t, o.ReplayBin, o.TempDir, o.FleetClients, o.IdleRoom)
			if err != nil {
				rep.Failures = append(rep.Failures, "fleet idle: "+err.Error())
				logf(o.Log, "FAIL fleet idle: %v", err)
				continue
			}
			rep.Fleet = fi
			logf(o.Log, "fleet idle: %d receive-only replay clients in %.1f s: replay rss %.1f → %.1f MiB, %.2f KiB per client; relay %.2f KiB per connection",
				fi.Clients, fi.LoginS, fi.BaseRSSMiB, fi.RSSMiB, fi.PerClientKiB, fi.RelayPerConnKiB)
		}
	}
	return rep, nil
}

func start(ctx context.Context, t Target) (*proc.Server, error) {
	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	args, err := t.Args(addr)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", t.Name, err)
	}
	return proc.Start(ctx, t.Name, t.Bin, args, addr)
}

func runOne(ctx context.Context, o Options, t Target, w Workload, i int) (_ *Run, err error) {
	loadavg := loadAvg()
	srv, err := start(ctx, t)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := srv.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	var cpu0, cpu1 time.Duration
	var rss uint64
	var probeErr error
	profDone := make(chan struct{})
	close(profDone)
	cfg := load.Config{
		Proto: t.Proto, Addr: srv.Addr, Rooms: w.Rooms, Members: w.Members, Senders: w.Senders,
		Rate: o.Rate, PayloadSize: o.Payload, Warmup: o.Warmup, Duration: o.Duration, Drain: o.Drain, Spread: o.Spread,
		OnWindow: func(open bool) {
			var e1, e2 error
			if open {
				cpu0, e1 = srv.CPU()
				if o.OnRun != nil {
					profDone = make(chan struct{})
					go func() {
						defer close(profDone)
						o.OnRun(ctx, srv, w, o.Duration)
					}()
				}
			} else {
				cpu1, e1 = srv.CPU()
				rss, e2 = srv.RSS()
			}
			probeErr = errors.Join(probeErr, e1, e2)
		},
	}
	res, err := load.Run(ctx, cfg)
	<-profDone
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", t.Name, w.Name, err)
	}
	if probeErr != nil {
		return nil, fmt.Errorf("%s %s: %w", t.Name, w.Name, probeErr)
	}
	return summarize(t.Name, w, i, o.Rate, res, cpu1-cpu0, rss, loadavg), nil
}

func summarize(server string, w Workload, i int, rate float64, res *load.Result, cpu time.Duration, rss uint64, loadavg string) *Run {
	win := res.Window.Seconds()
	delivered := float64(res.Counts.InWindow)
	msgs := delivered + float64(res.SentInWindow)
	ms := func(q float64) float64 { return float64(res.Latency.ValueAtQuantile(q)) / 1000 }
	r := &Run{
		Server: server, Workload: w.Name, Rep: i, Connections: res.Connections, WindowS: win,
		NominalPerS:   w.Deliveries(rate),
		OfferedPerS:   float64(res.SentInWindow) * float64(w.Members-1) / win,
		DeliveredPerS: delivered / win,
		ServerCPUS:    cpu.Seconds(),
		ServerRSSMiB:  float64(rss) / (1 << 20),
		P50Ms:         ms(50), P99Ms: ms(99), P999Ms: ms(99.9),
		MaxMs:      float64(res.Latency.Max()) / 1000,
		ClientCPUS: res.ClientCPU.Seconds(),
		Sent:       res.Sent, Expected: res.Expected, Missing: res.Missing,
		Dups: res.Counts.Dups, Gaps: res.Counts.Gaps, Misrouted: res.Counts.Misrouted + res.Counts.Malformed,
		Late: res.Late, Skipped: res.Skipped, Errors: res.Errors, FirstError: res.FirstError,
		LoadAvg: loadavg,
	}
	if delivered > 0 {
		r.ServerCPUPerM = cpu.Seconds() / delivered * 1e6
	}
	if msgs > 0 {
		r.ClientCPUPerM = res.ClientCPU.Seconds() / msgs * 1e6
	}
	return r
}

func idleOne(ctx context.Context, o Options, t Target) (_ *Idle, err error) {
	srv, err := start(ctx, t)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := srv.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	if err := sleep(ctx, time.Second); err != nil {
		return nil, err
	}
	base, err := srv.RSS()
	if err != nil {
		return nil, err
	}
	h, err := load.Hold(ctx, t.Proto, srv.Addr, o.IdleConns, o.IdleRoom, 32)
	if err != nil {
		return nil, fmt.Errorf("idle %s: %w", t.Name, err)
	}
	defer func() { err = errors.Join(err, h.Close()) }()
	// Let the joins' notices flush and the runtime settle before sampling.
	if err := sleep(ctx, 3*time.Second); err != nil {
		return nil, err
	}
	rss, err := srv.RSS()
	if err != nil {
		return nil, err
	}
	return &Idle{
		Server: t.Name, Connections: h.Len(),
		BaseRSSMiB: float64(base) / (1 << 20), RSSMiB: float64(rss) / (1 << 20),
		PerConnKiB: (float64(rss) - float64(base)) / 1024 / float64(h.Len()),
	}, nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, time.Now().Format("15:04:05 ")+format+"\n", args...)
	}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown: " + err.Error()
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return strings.TrimSpace(string(b))
	}
	return strings.Join(f[:3], " ")
}

func machine() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	model := "unknown cpu"
	if err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d CPUs online", model, cpus())
}
