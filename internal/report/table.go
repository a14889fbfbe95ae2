package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// metric is one row of the side-by-side table: how to read it from a run
// and how to print it.
type metric struct {
	key    string
	label  string
	digits int
	get    func(RunStats) float64
}

// tableMetrics are the rows of the comparison, in the order a reader asks
// the questions: how many got in, what it cost, how it felt.
var tableMetrics = []metric{
	{"max_logged_in", "max logins reached", 0, func(r RunStats) float64 { return float64(r.MaxLoggedIn) }},
	{"plateau_at_s", "logins plateaued at (s; - no plateau)", 0, func(r RunStats) float64 {
		if !r.Plateau.Detected {
			return math.NaN()
		}
		return float64(r.Plateau.AtS)
	}},
	{"end_logged_in", "logged in at the end", 0, func(r RunStats) float64 { return float64(r.EndLoggedIn) }},
	{"login_attempts", "login attempts", 0, func(r RunStats) float64 { return float64(r.LoginAttempts) }},
	{"logins_succeeded", "logins succeeded", 0, func(r RunStats) float64 { return float64(r.LoginsSucceeded) }},
	{"logins_failed", "logins failed", 0, func(r RunStats) float64 { return float64(r.LoginsFailed) }},
	{"peak_send_gbps", fmt.Sprintf("peak relay send Gbps, relay → clients (%d s rolling mean)", PeakWindowS), 4, func(r RunStats) float64 { return float64(r.PeakSendGbps) }},
	{"plateau_send_gbps", "relay send Gbps (relay → clients) at peak logins", 4, func(r RunStats) float64 { return float64(r.PlateauSendGbps) }},
	{"peak_recv_gbps", fmt.Sprintf("peak relay receive Gbps, clients → relay (%d s rolling mean)", PeakWindowS), 4, func(r RunStats) float64 { return float64(r.PeakRecvGbps) }},
	{"plateau_recv_gbps", "relay receive Gbps (clients → relay) at peak logins", 4, func(r RunStats) float64 { return float64(r.PlateauRecvGbps) }},
	{"plateau_cpu_idle_pct", "relay host CPU idle at peak logins %", 1, func(r RunStats) float64 { return float64(r.PlateauCPUIdlePct) }},
	{"plateau_relay_process_cpu_pct", "relay process CPU at peak logins % (100 = 1 core)", 1, func(r RunStats) float64 { return float64(r.PlateauRelayProcessCPUPct) }},
	{"plateau_fleet_process_cpu_pct", "fleet process CPU at peak logins % (100 = 1 core)", 1, func(r RunStats) float64 { return float64(r.PlateauFleetProcessCPUPct) }},
	{"relay_process_cpu_seconds", "relay process CPU s (the run)", 2, func(r RunStats) float64 { return float64(r.RelayProcessCPUSeconds) }},
	{"fleet_process_cpu_seconds", "fleet process CPU s (the run)", 2, func(r RunStats) float64 { return float64(r.FleetProcessCPUSeconds) }},
	{"relay_process_cpu_ms_per_1k_delivered", "relay CPU ms per 1k delivered", 3, func(r RunStats) float64 { return float64(r.RelayCPUMSPer1kDelivered) }},
	{"fleet_process_cpu_ms_per_1k_messages", "fleet CPU ms per 1k sent+received", 3, func(r RunStats) float64 { return float64(r.FleetCPUMSPer1kMessages) }},
	{"relay_process_peak_rss_mib", "relay RSS max MiB (sampled)", 1, func(r RunStats) float64 { return float64(r.RelayPeakRSSBytes) / (1 << 20) }},
	{"fleet_process_peak_rss_mib", "fleet peak RSS MiB", 1, func(r RunStats) float64 { return float64(r.FleetPeakRSSBytes) / (1 << 20) }},
	{"plateau_msgs_in_per_s", "messages/s in at peak logins", 0, func(r RunStats) float64 { return float64(r.PlateauMsgsInPerS) }},
	{"plateau_msgs_delivered_per_s", "messages/s delivered at peak logins", 0, func(r RunStats) float64 { return float64(r.PlateauMsgsDeliveredPerS) }},
	{"latency_p50_ms", "latency p50 ms", 2, func(r RunStats) float64 { return float64(r.LatencyP50Ms) }},
	{"latency_p99_ms", "latency p99 ms", 2, func(r RunStats) float64 { return float64(r.LatencyP99Ms) }},
	{"schedule_lag_p99_ms", "schedule lag p99 ms", 2, func(r RunStats) float64 { return float64(r.ScheduleLagP99Ms) }},
	{"min_fleet_cpu_idle_pct", "fleet host CPU idle min %", 1, func(r RunStats) float64 { return float64(r.MinFleetCPUIdlePct) }},
	{"slow_consumer_disconnects", "slow-consumer disconnects", 0, func(r RunStats) float64 { return float64(r.SlowConsumerDisconnects) }},
	{"loss_pct", "deliveries lost %", 3, func(r RunStats) float64 { return float64(r.LossPct) }},
	{"relay_udp_receive_drops", "relay UDP receive drops", 0, func(r RunStats) float64 { return float64(r.RelayUDPReceiveDrops) }},
}

// Cell is one formatted table cell.
type Cell string

// Row is one metric across scenarios.
type Row struct {
	Label string
	Cells []Cell
}

// Table is the side-by-side comparison: one column per scenario, under
// the headline.
type Table struct {
	Headline string
	Columns  []string
	Rows     []Row
}

// SideBySide builds the comparison table from a summary: mean ± sd when a
// scenario ran more than once, the value otherwise, "-" when not measured.
func SideBySide(s Summary) Table {
	t := Table{Headline: s.Headline}
	for _, sc := range s.Scenarios {
		t.Columns = append(t.Columns, fmt.Sprintf("%s (%d run%s)", sc.Scenario, sc.Runs, plural(sc.Runs)))
	}
	for i, m := range tableMetrics {
		row := Row{Label: m.label}
		for _, sc := range s.Scenarios {
			row.Cells = append(row.Cells, formatStat(sc.Stats[i], m.digits))
		}
		t.Rows = append(t.Rows, row)
	}
	fits := []struct {
		label string
		get   func(ScenarioStats) Fit
	}{
		{"relay send Gbps fit, quadratic", func(sc ScenarioStats) Fit { return sc.Quadratic }},
		{"relay send Gbps fit, linear", func(sc ScenarioStats) Fit { return sc.Linear }},
	}
	for _, f := range fits {
		row := Row{Label: f.label}
		for _, sc := range s.Scenarios {
			row.Cells = append(row.Cells, Cell(fitCell(f.get(sc))))
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

func fitCell(f Fit) string {
	if !f.OK {
		return "no fit: " + f.Reason
	}
	s := f.String()
	// The kind is already in the row label.
	return strings.TrimPrefix(s, f.Kind+": ")
}

func formatStat(st Stat, digits int) Cell {
	mean, sd := float64(st.Mean), float64(st.SD)
	if math.IsNaN(mean) {
		return "-"
	}
	if st.N < 2 || math.IsNaN(sd) {
		return Cell(fmt.Sprintf("%.*f", digits, mean))
	}
	return Cell(fmt.Sprintf("%.*f ± %.*f", digits, mean, digits, sd))
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// WriteText prints the table for a terminal.
func (t Table) WriteText(w io.Writer) error {
	if t.Headline != "" {
		if _, err := fmt.Fprintln(w, t.Headline); err != nil {
			return fmt.Errorf("write table: %w", err)
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\t%s\n", strings.Join(t.Columns, "\t"))
	for _, r := range t.Rows {
		cells := make([]string, len(r.Cells))
		for i, c := range r.Cells {
			cells[i] = string(c)
		}
		fmt.Fprintf(tw, "%s\t%s\n", r.Label, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
