package report

import (
	"context"
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/reprise-harness/reprise/internal/metrics"
)

// stallCollector holds a gather for stall once, after the other
// collectors read: an in-process fleet's gather that waited on a starved
// collector after its host collector read /proc/stat.
type stallCollector struct{ stall atomic.Int64 }

func (c *stallCollector) Describe(chan<- *prometheus.Desc) {}

func (c *stallCollector) Collect(chan<- prometheus.Metric) {
	time.Sleep(time.Duration(c.stall.Swap(0)))
}

// TestHostOtherCoresRealReadings: two scrapes as the sampler makes them,
// of real /proc readings, the first answered 1.5 s after its gather read
// the host (the second at once), beside a busy process that stands for
// the relay: the host's other work is at most its CPUs, and the fleet's
// CPU at most the host's, whatever the host's load.
func TestHostOtherCoresRealReadings(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	busy := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = busy.Wait() }()

	fleetReg, relayReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	stall := &stallCollector{}
	fleetHost, err := metrics.NewHostCollector("replay")
	if err != nil {
		t.Fatal(err)
	}
	relayHost, err := metrics.NewHostCollector("relay")
	if err != nil {
		t.Fatal(err)
	}
	fleetReg.MustRegister(fleetHost, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), stall)
	relayReg.MustRegister(relayHost, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{
		PidFn: func() (int, error) { return busy.Process.Pid, nil }}))
	s, err := NewSampler(SamplerConfig{Targets: []Target{{Role: RoleRelay, Gatherer: relayReg}, {Role: RoleFleet, Gatherer: fleetReg}}})
	if err != nil {
		t.Fatal(err)
	}
	// A fleet has used some CPU (the process collector counts whole
	// ticks): spin until this process has, so its CPU is a reading.
	for u, err := metrics.ReadProcessUsage(); err != nil || u.CPUSeconds < 0.05; u, err = metrics.ReadProcessUsage() {
		if err != nil || ctx.Err() != nil {
			t.Fatalf("this process's CPU: %v, %v", err, ctx.Err())
		}
	}
	stall.stall.Store(int64(1500 * time.Millisecond))
	prev, err := s.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := s.Scrape(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h0, h1 := prev.Fleet.Hosts[0], cur.Fleet.Hosts[0]
	cpus := h1.CPUs
	if !(cpus > 0) {
		t.Fatalf("replay_host_cpus not read: %+v", h1)
	}
	p := Derive(prev, prev, cur)
	t.Logf("host %v CPUs; readings %.3f s apart, answers %.3f s; other work %.2f cores, fleet %.1f %%, relay %.1f %%",
		cpus, (h1.Total-h0.Total)/cpus, cur.Fleet.At.Sub(prev.Fleet.At).Seconds(), p.HostOtherCores, p.FleetProcessCPUPct, p.RelayProcessCPUPct)
	if !(p.HostOtherCores >= 0 && p.HostOtherCores <= cpus) {
		t.Errorf("other work %v cores on a %v-CPU host", p.HostOtherCores, cpus)
	}
	if !(p.FleetProcessCPUPct >= 0 && p.FleetProcessCPUPct <= 100*cpus) {
		t.Errorf("fleet process CPU %v %% on a %v-CPU host", p.FleetProcessCPUPct, cpus)
	}
	if !(p.RelayProcessCPUPct >= 0 && p.RelayProcessCPUPct <= 100*cpus) {
		t.Errorf("relay process CPU %v %% on a %v-CPU host", p.RelayProcessCPUPct, cpus)
	}
}
