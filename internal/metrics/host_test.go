package metrics

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHostCollector(t *testing.T) {
	c, err := NewHostCollector("test")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	n, err := testutil.GatherAndCount(reg, "test_host_cpu_seconds_total")
	if err != nil {
		t.Fatal(err)
	}
	if n != 8 {
		t.Fatalf("%d cpu series, want 8 modes", n)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP test_host_scrape_errors 1 if the last read of /proc for host metrics failed.
# TYPE test_host_scrape_errors gauge
test_host_scrape_errors{source="net_dev"} 0
test_host_scrape_errors{source="stat"} 0
`), "test_host_scrape_errors"); err != nil {
		t.Fatal(err)
	}
	// The CPU count the seconds are summed over, as ReadCPUTimes reads it.
	cpu, err := ReadCPUTimes()
	if err != nil || cpu.CPUs < 1 {
		t.Fatalf("ReadCPUTimes: %+v, %v", cpu, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(fmt.Sprintf(`
# HELP test_host_cpus CPUs the host's CPU seconds are summed over (the cpuN lines of /proc/stat, read with them): the seconds between two readings are their total's increase over this, whenever the endpoint answered.
# TYPE test_host_cpus gauge
test_host_cpus %d
`, cpu.CPUs)), "test_host_cpus"); err != nil {
		t.Fatal(err)
	}
	if n, _ := testutil.GatherAndCount(reg, "test_host_network_receive_bytes_total"); n == 0 {
		t.Fatal("no network devices reported (lo should always be there)")
	}
}

func TestIdlePercent(t *testing.T) {
	tests := []struct {
		before, after CPUTimes
		want          float64
	}{
		{CPUTimes{Idle: 0, Total: 0}, CPUTimes{Idle: 50, Total: 100}, 50},
		{CPUTimes{Idle: 10, Total: 100}, CPUTimes{Idle: 10, Total: 200}, 0},
		{CPUTimes{Idle: 10, Total: 100}, CPUTimes{Idle: 10, Total: 100}, 100},
	}
	for _, tt := range tests {
		if got := IdlePercent(tt.before, tt.after); got != tt.want {
			t.Errorf("IdlePercent(%v,%v) = %v, want %v", tt.before, tt.after, got, tt.want)
		}
	}
	if _, err := ReadCPUTimes(); err != nil {
		t.Fatal(err)
	}
}

// TestReadCPUWait: more spinning threads than the host has CPUs wait on
// its run queues, and ReadCPUWait counts that wait: at least a third of
// what the spinners beyond the CPUs could not run for.
func TestReadCPUWait(t *testing.T) {
	cpus := runtime.NumCPU()
	spinners := 3 * cpus
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(spinners + 1))
	before, err := ReadCPUWait()
	if err != nil {
		t.Fatal(err)
	}
	const spin = 300 * time.Millisecond
	var wg sync.WaitGroup
	for range spinners {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for end := time.Now().Add(spin); time.Now().Before(end); {
			}
		})
	}
	wg.Wait()
	after, err := ReadCPUWait()
	if err != nil {
		t.Fatal(err)
	}
	// Each spinner is runnable for spin of wall time and at most cpus of
	// them run at once, so together they wait about (spinners-cpus)*spin
	// (more when other work holds CPUs too); a third of it allows for
	// the spinners' staggered starts.
	want := time.Duration(spinners-cpus) * spin / 3
	if got := after - before; got < want {
		t.Errorf("the spinners waited %v for a CPU, want at least %v (%d spinners, %d CPUs)", got, want, spinners, cpus)
	}
}
