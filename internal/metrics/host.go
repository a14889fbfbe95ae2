// Package metrics holds reprise's Prometheus collectors, one per file: the
// host's CPU time by mode and network bytes by device (host.go, read from
// /proc with prometheus/procfs at scrape time, shared by relay and fleet) and
// the relay's counters (relay.go). Every label value is bounded (CPU modes,
// devices, error-code names); never user ids or error strings.
package metrics

import (
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/procfs"
)

// HostCollector reports the machine's CPU seconds by mode (summed over all
// CPUs, as in /proc/stat) and network bytes by device (/proc/net/dev), so a
// dashboard can show CPU idle % of the relay's host and of the fleet's host
// side by side.
type HostCollector struct {
	fs      procfs.FS
	cpu     *prometheus.Desc
	netRx   *prometheus.Desc
	netTx   *prometheus.Desc
	cpus    *prometheus.Desc
	scrapes *prometheus.Desc
}

// NewHostCollector returns a collector whose metrics are named
// <prefix>_host_cpu_seconds_total{mode}, <prefix>_host_cpus,
// <prefix>_host_network_receive_bytes_total{device} and
// <prefix>_host_network_transmit_bytes_total{device}.
func NewHostCollector(prefix string) (*HostCollector, error) {
	fs, err := procfs.NewFS(procfs.DefaultMountPoint)
	if err != nil {
		return nil, fmt.Errorf("open /proc: %w", err)
	}
	return &HostCollector{
		fs: fs,
		cpu: prometheus.NewDesc(prefix+"_host_cpu_seconds_total",
			"Seconds all CPUs of the host spent in each mode (from /proc/stat).", []string{"mode"}, nil),
		cpus: prometheus.NewDesc(prefix+"_host_cpus",
			"CPUs the host's CPU seconds are summed over (the cpuN lines of /proc/stat, read with them): the seconds between two readings are their total's increase over this, whenever the endpoint answered.", nil, nil),
		netRx: prometheus.NewDesc(prefix+"_host_network_receive_bytes_total",
			"Bytes the host received on each network device (from /proc/net/dev).", []string{"device"}, nil),
		netTx: prometheus.NewDesc(prefix+"_host_network_transmit_bytes_total",
			"Bytes the host transmitted on each network device (from /proc/net/dev).", []string{"device"}, nil),
		scrapes: prometheus.NewDesc(prefix+"_host_scrape_errors",
			"1 if the last read of /proc for host metrics failed.", []string{"source"}, nil),
	}, nil
}

// Describe implements prometheus.Collector.
func (c *HostCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.cpu
	ch <- c.cpus
	ch <- c.netRx
	ch <- c.netTx
	ch <- c.scrapes
}

// Collect implements prometheus.Collector. A failed read of one source is
// reported as a scrape error for it; the other source is still collected.
func (c *HostCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.scrapes, prometheus.GaugeValue, boolGauge(c.collectCPU(ch) != nil), "stat")
	ch <- prometheus.MustNewConstMetric(c.scrapes, prometheus.GaugeValue, boolGauge(c.collectNet(ch) != nil), "net_dev")
}

func (c *HostCollector) collectCPU(ch chan<- prometheus.Metric) error {
	stat, err := c.fs.Stat()
	if err != nil {
		return err
	}
	t := stat.CPUTotal
	for _, m := range []struct {
		mode string
		v    float64
	}{
		{"user", t.User}, {"nice", t.Nice}, {"system", t.System}, {"idle", t.Idle},
		{"iowait", t.Iowait}, {"irq", t.IRQ}, {"softirq", t.SoftIRQ}, {"steal", t.Steal},
	} {
		ch <- prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, m.v, m.mode)
	}
	if n := len(stat.CPU); n > 0 {
		ch <- prometheus.MustNewConstMetric(c.cpus, prometheus.GaugeValue, float64(n))
	}
	return nil
}

func (c *HostCollector) collectNet(ch chan<- prometheus.Metric) error {
	dev, err := c.fs.NetDev()
	if err != nil {
		return err
	}
	for name, line := range dev {
		ch <- prometheus.MustNewConstMetric(c.netRx, prometheus.CounterValue, float64(line.RxBytes), name)
		ch <- prometheus.MustNewConstMetric(c.netTx, prometheus.CounterValue, float64(line.TxBytes), name)
	}
	return nil
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// CPUTimes is one reading of the host's CPU seconds, for a program that
// wants its own view of how busy the machine is (the fleet warns when its
// host saturates).
type CPUTimes struct {
	Idle, Total float64
	// Steal is the time a hypervisor gave the host's CPUs to others.
	Steal float64
	// CPUs is how many CPUs the seconds are summed over (0: unknown), so
	// the wall time between two readings is their Total's increase over
	// CPUs: the readings' own span, whenever the reader ran.
	CPUs int
}

// ReadCPUTimes reads the host's summed CPU seconds from /proc/stat.
func ReadCPUTimes() (CPUTimes, error) {
	fs, err := procfs.NewFS(procfs.DefaultMountPoint)
	if err != nil {
		return CPUTimes{}, fmt.Errorf("open /proc: %w", err)
	}
	stat, err := fs.Stat()
	if err != nil {
		return CPUTimes{}, fmt.Errorf("read /proc/stat: %w", err)
	}
	t := stat.CPUTotal
	total := t.User + t.Nice + t.System + t.Idle + t.Iowait + t.IRQ + t.SoftIRQ + t.Steal
	return CPUTimes{Idle: t.Idle + t.Iowait, Total: total, Steal: t.Steal, CPUs: len(stat.CPU)}, nil
}

// IdlePercent is the share of CPU time that was idle between two readings,
// in percent; 100 when no time passed.
func IdlePercent(before, after CPUTimes) float64 {
	dt := after.Total - before.Total
	if dt <= 0 {
		return 100
	}
	return 100 * (after.Idle - before.Idle) / dt
}

// ProcessUsage is one reading of this process's own cost: CPU seconds
// (user and system, as in /proc/self/stat) and its peak resident set
// (VmHWM in /proc/self/status: the high-water mark since it started).
type ProcessUsage struct {
	CPUSeconds   float64
	PeakRSSBytes int64
}

// ReadProcessUsage reads this process's CPU seconds and peak RSS from
// /proc/self, so a load generator can report what it cost itself.
func ReadProcessUsage() (ProcessUsage, error) {
	p, err := procfs.Self()
	if err != nil {
		return ProcessUsage{}, fmt.Errorf("open /proc/self: %w", err)
	}
	stat, err := p.Stat()
	if err != nil {
		return ProcessUsage{}, fmt.Errorf("read /proc/self/stat: %w", err)
	}
	status, err := p.NewStatus()
	if err != nil {
		return ProcessUsage{}, fmt.Errorf("read /proc/self/status: %w", err)
	}
	return ProcessUsage{CPUSeconds: stat.CPUTime(), PeakRSSBytes: int64(status.VmHWM)}, nil
}

// ReadProcessCPU reads the CPU seconds (user and system) of process pid
// so far, from /proc/<pid>/stat: the same counter a Go server exports as
// process_cpu_seconds_total, read here for a server child whose CPU must
// not pass for the host's other work.
func ReadProcessCPU(pid int) (float64, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return 0, fmt.Errorf("open /proc/%d: %w", pid, err)
	}
	stat, err := p.Stat()
	if err != nil {
		return 0, fmt.Errorf("read /proc/%d/stat: %w", pid, err)
	}
	return stat.CPUTime(), nil
}

// ReadCPUWait reads how long this process's threads have been runnable
// but waiting for a CPU, summed over its threads (the kernel's run_delay,
// /proc/self/task/*/schedstat; threads that exited are not counted).
// It separates the host's share of a late wake-up from the process's
// own: a timer that fired on time finds its thread on a run queue when
// other work holds every CPU, and that wait is counted here, while time
// spent running or sleeping is not.
func ReadCPUWait() (time.Duration, error) {
	threads, err := procfs.AllThreads(os.Getpid())
	if err != nil {
		return 0, fmt.Errorf("list /proc/self/task: %w", err)
	}
	var wait uint64
	read := 0
	for _, t := range threads {
		s, err := t.Schedstat()
		if err != nil {
			continue // the thread exited since the listing
		}
		wait += s.WaitingNanoseconds
		read++
	}
	if read == 0 {
		return 0, fmt.Errorf("read /proc/self/task/*/schedstat: no thread's could be read")
	}
	return time.Duration(wait), nil
}
