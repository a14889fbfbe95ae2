package report

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// metric is one row of the side-by-side table: its group, how to read it
// from a run and how to print it.
type metric struct {
	key    string
	group  string
	label  string
	unit   string
	digits int
	get    func(RunStats) float64
}

// Groups of the side-by-side table, in the order a reader asks: how many
// got in, what they sent, what it cost the server and the fleet, how it
// felt, what was lost.
const (
	groupLogins  = "logins"
	groupTraffic = "traffic"
	groupServer  = "server"
	groupFleet   = "fleet"
	groupLatency = "latency"
	groupLoss    = "loss"
)

// atPeak is the rows taken at peak logins; atPeakNote says what that
// covers, once under the table.
const atPeak = "at peak logins"

var atPeakNote = fmt.Sprintf("at peak logins: the mean while logged-in clients were within 1 %% of their maximum; peaks: the highest %d s rolling mean; fits: over each run's seconds before its breaking point", PeakWindowS)

// tableMetrics are the rows of the comparison, by group.
var tableMetrics = []metric{
	{"max_logged_in", groupLogins, "most logged in", "clients", 0, func(r RunStats) float64 { return float64(r.MaxLoggedIn) }},
	{"plateau_at_s", groupLogins, "logins plateaued at (- no plateau)", "s", 0, func(r RunStats) float64 {
		if !r.Plateau.Detected {
			return math.NaN()
		}
		return float64(r.Plateau.AtS)
	}},
	{"end_logged_in", groupLogins, "logged in at the end", "clients", 0, func(r RunStats) float64 { return float64(r.EndLoggedIn) }},
	{"login_attempts", groupLogins, "login attempts", "logins", 0, func(r RunStats) float64 { return float64(r.LoginAttempts) }},
	{"logins_succeeded", groupLogins, "logins succeeded", "logins", 0, func(r RunStats) float64 { return float64(r.LoginsSucceeded) }},
	{"logins_failed", groupLogins, "logins failed", "logins", 0, func(r RunStats) float64 { return float64(r.LoginsFailed) }},
	{"peak_send_gbps", groupTraffic, fmt.Sprintf("peak relay send, relay → clients (highest %d s rolling mean)", PeakWindowS), "Gbps", 4, func(r RunStats) float64 { return float64(r.PeakSendGbps) }},
	{"plateau_send_gbps", groupTraffic, "relay send, relay → clients, " + atPeak, "Gbps", 4, func(r RunStats) float64 { return float64(r.PlateauSendGbps) }},
	{"peak_recv_gbps", groupTraffic, fmt.Sprintf("peak relay receive, clients → relay (highest %d s rolling mean)", PeakWindowS), "Gbps", 4, func(r RunStats) float64 { return float64(r.PeakRecvGbps) }},
	{"plateau_recv_gbps", groupTraffic, "relay receive, clients → relay, " + atPeak, "Gbps", 4, func(r RunStats) float64 { return float64(r.PlateauRecvGbps) }},
	{"plateau_msgs_in_per_s", groupTraffic, "messages in, " + atPeak, "msg/s", 0, func(r RunStats) float64 { return float64(r.PlateauMsgsInPerS) }},
	{"plateau_msgs_delivered_per_s", groupTraffic, "messages delivered, " + atPeak, "msg/s", 0, func(r RunStats) float64 { return float64(r.PlateauMsgsDeliveredPerS) }},
	{"plateau_cpu_idle_pct", groupServer, "relay host CPU idle, " + atPeak, "% of all CPUs", 1, func(r RunStats) float64 { return float64(r.PlateauCPUIdlePct) }},
	{"plateau_relay_process_cpu_pct", groupServer, "relay process CPU, " + atPeak, "% of 1 core", 1, func(r RunStats) float64 { return float64(r.PlateauRelayProcessCPUPct) }},
	{"relay_process_cpu_seconds", groupServer, "relay process CPU over the run", "s", 2, func(r RunStats) float64 { return float64(r.RelayProcessCPUSeconds) }},
	{"relay_process_cpu_ms_per_1k_delivered", groupServer, "relay CPU per 1k delivered", "ms", 3, func(r RunStats) float64 { return float64(r.RelayCPUMSPer1kDelivered) }},
	{"relay_process_peak_rss_mib", groupServer, "relay RSS, most sampled", "MiB", 1, func(r RunStats) float64 { return float64(r.RelayPeakRSSBytes) / (1 << 20) }},
	{"plateau_fleet_process_cpu_pct", groupFleet, "fleet process CPU, " + atPeak, "% of 1 core", 1, func(r RunStats) float64 { return float64(r.PlateauFleetProcessCPUPct) }},
	{"fleet_process_cpu_seconds", groupFleet, "fleet process CPU over the run", "s", 2, func(r RunStats) float64 { return float64(r.FleetProcessCPUSeconds) }},
	{"fleet_process_cpu_ms_per_1k_messages", groupFleet, "fleet CPU per 1k sent + received", "ms", 3, func(r RunStats) float64 { return float64(r.FleetCPUMSPer1kMessages) }},
	{"fleet_process_peak_rss_mib", groupFleet, "fleet peak RSS", "MiB", 1, func(r RunStats) float64 { return float64(r.FleetPeakRSSBytes) / (1 << 20) }},
	{"min_fleet_cpu_idle_pct", groupFleet, "fleet host CPU idle, least second", "% of all CPUs", 1, func(r RunStats) float64 { return float64(r.MinFleetCPUIdlePct) }},
	{"schedule_lag_p99_ms", groupFleet, "schedule lag p99 over the run", "ms", 2, func(r RunStats) float64 { return float64(r.ScheduleLagP99Ms) }},
	{"fleet_saturated_s", groupFleet, "seconds the fleet was saturated", "s", 0, func(r RunStats) float64 { return float64(r.FleetSaturatedS) }},
	{"host_busy_s", groupFleet, "seconds its host was busy with other work", "s", 0, func(r RunStats) float64 { return float64(r.HostBusyS) }},
	{"latency_p50_ms", groupLatency, "latency p50 over the run", "ms", 2, func(r RunStats) float64 { return float64(r.LatencyP50Ms) }},
	{"latency_p99_ms", groupLatency, "latency p99 over the run", "ms", 2, func(r RunStats) float64 { return float64(r.LatencyP99Ms) }},
	{"slow_consumer_disconnects", groupLoss, "slow-consumer disconnects", "clients", 0, func(r RunStats) float64 { return float64(r.SlowConsumerDisconnects) }},
	{"loss_pct", groupLoss, "deliveries lost (numbered casts)", "%", 3, func(r RunStats) float64 { return float64(r.LossPct) }},
	{"relay_udp_receive_drops", groupLoss, "relay UDP receive drops", "datagrams", 0, func(r RunStats) float64 { return float64(r.RelayUDPReceiveDrops) }},
}

// Cell is one formatted table cell.
type Cell string

// Row is one metric across scenarios, or a group's heading (Group set,
// no cells).
type Row struct {
	Group string
	Label string
	Unit  string
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
	group := ""
	for i, m := range tableMetrics {
		if m.group != group {
			group = m.group
			t.Rows = append(t.Rows, Row{Group: group})
		}
		row := Row{Label: m.label, Unit: m.unit}
		for _, sc := range s.Scenarios {
			row.Cells = append(row.Cells, formatStat(sc.Stats[i], m.digits))
		}
		t.Rows = append(t.Rows, row)
		if m.key == "plateau_msgs_delivered_per_s" {
			t.Rows = append(t.Rows, fitRows(s)...)
		}
	}
	return t
}

// fitRows are the fits of send Gbps against logged-in clients (n), each
// cell with the seconds it covers.
func fitRows(s Summary) []Row {
	fits := []struct {
		label string
		get   func(ScenarioStats) Fit
	}{
		{"relay send against logged-in clients n, quadratic fit", func(sc ScenarioStats) Fit { return sc.Quadratic }},
		{"relay send against logged-in clients n, linear fit", func(sc ScenarioStats) Fit { return sc.Linear }},
	}
	var rows []Row
	for _, f := range fits {
		row := Row{Label: f.label, Unit: "Gbps"}
		for _, sc := range s.Scenarios {
			row.Cells = append(row.Cells, Cell(fitCell(f.get(sc))))
		}
		rows = append(rows, row)
	}
	return rows
}

// fitCell is a fit's formula and what it covers.
func fitCell(f Fit) string {
	if !f.OK {
		return "no fit: " + f.Reason
	}
	s := f.String()
	if f.Over != "" {
		s += ", over " + f.Over
	}
	return s
}

func formatStat(st Stat, digits int) Cell {
	mean, sd := float64(st.Mean), float64(st.SD)
	if math.IsNaN(mean) {
		return "-"
	}
	if Num(mean).PastRange() { // a latency past the histograms' range in any run
		return PastRangeText
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
	fmt.Fprintf(tw, "\tunit\t%s\n", strings.Join(t.Columns, "\t"))
	for _, r := range t.Rows {
		if r.Group != "" {
			// Tabs keep the columns aligned across the groups.
			fmt.Fprintf(tw, "%s\t\t%s\n", strings.ToUpper(r.Group), strings.Repeat("\t", len(t.Columns)))
			continue
		}
		cells := make([]string, len(r.Cells))
		for i, c := range r.Cells {
			cells[i] = string(c)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Label, r.Unit, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if _, err := fmt.Fprintln(w, atPeakNote); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
