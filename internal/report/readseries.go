package report

import (
	"encoding/csv"
	"fmt"
	"io"
	"math"
	"strconv"
)

// ReadSeriesCSV reads a series.csv back into its runs (scenario, repeat
// and points, in the file's order): to judge a recorded run again, or to
// check a report's headline against the samples it claims.
func ReadSeriesCSV(r io.Reader) ([]Run, error) {
	cr := csv.NewReader(r)
	head, err := readSeriesHeader(cr)
	if err != nil {
		return nil, err
	}
	var runs []Run
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return runs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read series: %w", err)
		}
		rep, err := strconv.Atoi(rec[1])
		if err != nil {
			return nil, fmt.Errorf("read series: line %d: repeat %q: %w", line, rec[1], err)
		}
		v := make([]float64, len(rec)-2)
		for i, s := range rec[2:] {
			if v[i], err = parseCell(s); err != nil {
				return nil, fmt.Errorf("read series: line %d, %s: %w", line, SeriesHeader[i+2], err)
			}
		}
		p := Point{T: v[0], SendGbps: v[1], RecvGbps: v[2], RelayCPUIdlePct: v[3], RelayProcessCPUPct: v[4],
			LoggedIn: v[5], LoginAttempts: v[6], LoginFailures: v[7], MsgsInPerS: v[8], MsgsDeliveredPerS: v[9],
			LatencyP50Ms: v[10], LatencyP99Ms: v[11], ScheduleLagP99Ms: v[12], FleetCPUIdlePct: v[13],
			RelayConnections: v[14], SlowConsumerDiscards: v[15], FleetProcessCPUPct: v[16], FleetDisconnects: v[17],
			RelayRSSBytes: math.NaN(), HostOtherCores: math.NaN()}
		if len(head) > seriesHeaderBefore {
			p.HostOtherCores = v[18]
		}
		if n := len(runs); n == 0 || runs[n-1].Scenario != rec[0] || runs[n-1].Repeat != rep {
			runs = append(runs, Run{Scenario: rec[0], Repeat: rep})
		}
		pts := &runs[len(runs)-1].Series.Points
		*pts = append(*pts, p)
	}
}

// readSeriesHeader reads series.csv's header: today's, or that of a file
// written before host_other_cores. The rows must have as many cells.
func readSeriesHeader(cr *csv.Reader) ([]string, error) {
	cr.FieldsPerRecord = 0 // the header's count, for every row
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read series: %w", err)
	}
	if len(head) != len(SeriesHeader) && len(head) != seriesHeaderBefore {
		return nil, fmt.Errorf("read series: %d columns, want %d", len(head), len(SeriesHeader))
	}
	for i, h := range head {
		if h != SeriesHeader[i] {
			return nil, fmt.Errorf("read series: column %d is %q, want %q", i+1, h, SeriesHeader[i])
		}
	}
	return head, nil
}

// parseCell reads one number of series.csv; empty is not measured (NaN).
func parseCell(s string) (float64, error) {
	if s == "" {
		return math.NaN(), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if s == "+Inf" {
		return math.Inf(1), nil // past the histograms' range (csvNum)
	}
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return v, nil
}
