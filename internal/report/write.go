package report

import (
	"bytes"
	"embed"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// Files of a report directory besides the charts.
const (
	SummaryFile = "summary.json"
	SeriesFile  = "series.csv"
	IndexFile   = "index.html"
)

//go:embed index.html.tmpl
var templates embed.FS

var indexTemplate = template.Must(template.New("index.html.tmpl").Funcs(template.FuncMap{
	"add": func(a, b int) int { return a + b },
	"num": func(n Num, digits int) string {
		if math.IsNaN(float64(n)) {
			return "-"
		}
		return strconv.FormatFloat(float64(n), 'f', digits, 64)
	},
	"ms": func(n Num, digits int) string {
		if n.PastRange() {
			return PastRangeText
		}
		if math.IsNaN(float64(n)) {
			return "-"
		}
		return strconv.FormatFloat(float64(n), 'f', digits, 64)
	},
}).ParseFS(templates, "index.html.tmpl"))

// Write analyses in and writes the whole report into dir (created if
// missing): summary.json, series.csv, the charts and index.html, whose
// images are files alongside it so it opens with no network. It returns
// the summary it wrote.
func Write(dir string, in Input) (Summary, error) {
	sum := Analyze(in)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sum, fmt.Errorf("report: %w", err)
	}
	writers := []struct {
		name string
		fn   func(io.Writer) error
	}{
		{SummaryFile, func(w io.Writer) error { return WriteSummaryJSON(w, sum) }},
		{SeriesFile, func(w io.Writer) error { return WriteSeriesCSV(w, in) }},
		{IndexFile, func(w io.Writer) error { return WriteHTML(w, sum) }},
	}
	for _, wr := range writers {
		if err := writeFile(filepath.Join(dir, wr.name), wr.fn); err != nil {
			return sum, err
		}
	}
	if err := WriteCharts(dir, in, sum); err != nil {
		return sum, fmt.Errorf("report: %w", err)
	}
	return sum, nil
}

// writeFile renders into memory first so a failed render leaves no half
// file behind.
func writeFile(path string, fn func(io.Writer) error) error {
	var buf bytes.Buffer
	if err := fn(&buf); err != nil {
		return fmt.Errorf("report %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// WriteSummaryJSON writes summary.json.
func WriteSummaryJSON(w io.Writer, s Summary) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(s); err != nil {
		return fmt.Errorf("encode summary: %w", err)
	}
	return nil
}

// SeriesHeader is series.csv's header row.
var SeriesHeader = []string{
	"scenario", "repeat", "t_s", "send_gbps", "recv_gbps", "relay_cpu_idle_pct",
	"relay_process_cpu_pct", "logged_in", "login_attempts", "login_failures",
	"msgs_in_per_s", "msgs_delivered_per_s", "latency_p50_ms", "latency_p99_ms",
	"schedule_lag_p99_ms", "fleet_cpu_idle_pct", "relay_connections", "slow_consumer_disconnects",
	"fleet_process_cpu_pct", "fleet_disconnects", "host_other_cores",
}

// seriesHeaderBefore is how many columns series.csv had before
// host_other_cores: such files still read, that column unmeasured.
const seriesHeaderBefore = 20

// WriteSeriesCSV writes one row per second per run; unmeasured values are
// empty cells. Each number is written exactly (csvNum), so the report's
// figures judged again from the file are the figures it printed.
func WriteSeriesCSV(w io.Writer, in Input) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(SeriesHeader); err != nil {
		return fmt.Errorf("write series: %w", err)
	}
	for _, r := range in.Runs {
		for _, p := range r.Series.Points {
			row := []string{r.Scenario, strconv.Itoa(r.Repeat), csvNum(p.T)}
			for _, v := range []float64{p.SendGbps, p.RecvGbps, p.RelayCPUIdlePct, p.RelayProcessCPUPct,
				p.LoggedIn, p.LoginAttempts, p.LoginFailures, p.MsgsInPerS, p.MsgsDeliveredPerS,
				p.LatencyP50Ms, p.LatencyP99Ms, p.ScheduleLagP99Ms, p.FleetCPUIdlePct,
				p.RelayConnections, p.SlowConsumerDiscards, p.FleetProcessCPUPct, p.FleetDisconnects, p.HostOtherCores} {
				row = append(row, csvNum(v))
			}
			if err := cw.Write(row); err != nil {
				return fmt.Errorf("write series: %w", err)
			}
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write series: %w", err)
	}
	return nil
}

// csvNum prints v as the shortest decimal that reads back as v (counts
// stay integers, no exponent): a value rounded to a few decimals can land
// on the other side of a rounding edge (idle 0.5000003 % printed "1 %",
// read back as 0.5 it prints "0 %") and make Verify's second judgement
// differ from the first.
func csvNum(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf" // past the histograms' range (PastRangeText)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return ""
	}
	if v == 0 {
		return "0" // and not "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// htmlView is what index.html.tmpl renders.
type htmlView struct {
	Summary
	Table  Table
	Charts []Chart
	Files  []string
	// PeakWindowS names the peak rates' window.
	PeakWindowS int
	// AtPeakNote says what the table's peaks, "at peak logins" and fits
	// cover.
	AtPeakNote string
}

// WriteHTML writes index.html: parameters, warnings, the side-by-side
// table, each run's figures and the charts (relative image paths).
func WriteHTML(w io.Writer, s Summary) error {
	v := htmlView{Summary: s, Table: SideBySide(s), Charts: chartsFor(s.Capacity != nil),
		Files: []string{SummaryFile, SeriesFile}, PeakWindowS: PeakWindowS, AtPeakNote: atPeakNote}
	if err := indexTemplate.Execute(w, v); err != nil {
		return fmt.Errorf("render html: %w", err)
	}
	return nil
}
