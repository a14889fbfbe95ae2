package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"text/tabwriter"
)

func cpus() int { return runtime.NumCPU() }

// Medians takes, per workload and server, the median of every figure over
// the repetitions (each figure on its own, so a median row need not be one
// real run). Order follows first appearance.
func Medians(runs []Run) []Run {
	type key struct{ w, s string }
	var order []key
	groups := map[key][]Run{}
	for _, r := range runs {
		k := key{r.Workload, r.Server}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := make([]Run, 0, len(order))
	for _, k := range order {
		g := groups[k]
		f := func(get func(Run) float64) float64 {
			v := make([]float64, len(g))
			for i, r := range g {
				v[i] = get(r)
			}
			return median(v)
		}
		u := func(get func(Run) uint64) uint64 {
			return uint64(f(func(r Run) float64 { return float64(get(r)) }))
		}
		m := Run{
			Server: k.s, Workload: k.w, Rep: -1, Connections: g[0].Connections, WindowS: g[0].WindowS,
			NominalPerS:   g[0].NominalPerS,
			OfferedPerS:   f(func(r Run) float64 { return r.OfferedPerS }),
			DeliveredPerS: f(func(r Run) float64 { return r.DeliveredPerS }),
			ServerCPUS:    f(func(r Run) float64 { return r.ServerCPUS }),
			ServerCPUPerM: f(func(r Run) float64 { return r.ServerCPUPerM }),
			ServerRSSMiB:  f(func(r Run) float64 { return r.ServerRSSMiB }),
			P50Ms:         f(func(r Run) float64 { return r.P50Ms }),
			P99Ms:         f(func(r Run) float64 { return r.P99Ms }),
			P999Ms:        f(func(r Run) float64 { return r.P999Ms }),
			MaxMs:         f(func(r Run) float64 { return r.MaxMs }),
			ClientCPUS:    f(func(r Run) float64 { return r.ClientCPUS }),
			ClientCPUPerM: f(func(r Run) float64 { return r.ClientCPUPerM }),
			Sent:          u(func(r Run) uint64 { return r.Sent }),
			Expected:      u(func(r Run) uint64 { return r.Expected }),
			Missing:       u(func(r Run) uint64 { return r.Missing }),
			Dups:          u(func(r Run) uint64 { return r.Dups }),
			Gaps:          u(func(r Run) uint64 { return r.Gaps }),
			Misrouted:     u(func(r Run) uint64 { return r.Misrouted }),
			Late:          u(func(r Run) uint64 { return r.Late }),
			Skipped:       u(func(r Run) uint64 { return r.Skipped }),
			Errors:        u(func(r Run) uint64 { return r.Errors }),
		}
		out = append(out, m)
	}
	return out
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ratioRows are the comparisons worth a ratio row, numerator first: the
// relay against nats-server, the relay over UDP against itself over TCP
// and against the UDP floor.
var ratioRows = [][2]string{{"reprise", "nats"}, {"reprise-udp", "reprise"}, {"reprise-udp", "floor"}}

// ratioPairs picks the ratio rows whose two servers both ran; with two
// other servers, their ratio.
func ratioPairs(rows []Run) [][2]Run {
	by := map[string]Run{}
	for _, r := range rows {
		by[r.Server] = r
	}
	var out [][2]Run
	for _, p := range ratioRows {
		a, okA := by[p[0]]
		b, okB := by[p[1]]
		if okA && okB {
			out = append(out, [2]Run{a, b})
		}
	}
	if len(out) == 0 && len(rows) == 2 {
		out = append(out, [2]Run{rows[0], rows[1]})
	}
	return out
}

// WriteTable prints the medians per workload, one row per server and
// ratio rows (ratioRows).
func WriteTable(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\tserver\tnominal/s\toffered/s\tdelivered/s\tsrv CPU s/M\tp50 ms\tp99 ms\tp999 ms\tsrv RSS MiB\tclient CPU s/M\tmissing\tlate+skipped\t\n")
	byW := map[string][]Run{}
	var ws []string
	for _, m := range rep.Medians {
		if _, ok := byW[m.Workload]; !ok {
			ws = append(ws, m.Workload)
		}
		byW[m.Workload] = append(byW[m.Workload], m)
	}
	for _, wl := range ws {
		rows := byW[wl]
		for _, m := range rows {
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f\t%.3f\t%.2f\t%.2f\t%.2f\t%.1f\t%.3f\t%d\t%d\t\n",
				m.Workload, m.Server, m.NominalPerS, m.OfferedPerS, m.DeliveredPerS, m.ServerCPUPerM, m.P50Ms, m.P99Ms, m.P999Ms, m.ServerRSSMiB, m.ClientCPUPerM, m.Missing, m.Late+m.Skipped)
		}
		for _, p := range ratioPairs(rows) {
			a, b := p[0], p[1]
			fmt.Fprintf(tw, "%s\t%s/%s\t\t\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\t\t\n", wl, a.Server, b.Server,
				ratio(a.DeliveredPerS, b.DeliveredPerS), ratio(a.ServerCPUPerM, b.ServerCPUPerM), ratio(a.P50Ms, b.P50Ms),
				ratio(a.P99Ms, b.P99Ms), ratio(a.P999Ms, b.P999Ms), ratio(a.ServerRSSMiB, b.ServerRSSMiB), ratio(a.ClientCPUPerM, b.ClientCPUPerM))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("table: %w", err)
	}
	if len(rep.Idle) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "idle\tconnections\tbase RSS MiB\tRSS MiB\tKiB per conn\t\n")
		for _, id := range rep.Idle {
			fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.2f\t\n", id.Server, id.Connections, id.BaseRSSMiB, id.RSSMiB, id.PerConnKiB)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("idle table: %w", err)
		}
	}
	if len(rep.FleetRun) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "fleet (cmd/replay)\tclients\truns\tdelivered/s\treplay CPU s/M msgs\treplay cores\treplay RSS MiB\trelay CPU s/M\t\n")
		var order []string
		byW := map[string][]FleetLoad{}
		for _, f := range rep.FleetRun {
			if _, ok := byW[f.Workload]; !ok {
				order = append(order, f.Workload)
			}
			byW[f.Workload] = append(byW[f.Workload], f)
		}
		for _, wl := range order {
			g := byW[wl]
			med := func(get func(FleetLoad) float64) float64 {
				v := make([]float64, len(g))
				for i, f := range g {
					v[i] = get(f)
				}
				return median(v)
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.3f\t%.2f\t%.1f\t%.3f\t\n", wl, g[0].Clients, len(g),
				med(func(f FleetLoad) float64 { return f.DeliveredPerS }), med(func(f FleetLoad) float64 { return f.ReplayCPUPerM }),
				med(func(f FleetLoad) float64 { return f.ReplayCPUCores }), med(func(f FleetLoad) float64 { return f.ReplayRSSMiB }),
				med(func(f FleetLoad) float64 { return f.RelayCPUPerM }))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("fleet table: %w", err)
		}
	}
	if fi := rep.Fleet; fi != nil {
		fmt.Fprintf(w, "\nfleet (cmd/replay --receive-only): %d clients logged in in %.1f s; replay RSS %.1f → %.1f MiB = %.2f KiB per client; relay %.2f KiB per connection\n",
			fi.Clients, fi.LoginS, fi.BaseRSSMiB, fi.RSSMiB, fi.PerClientKiB, fi.RelayPerConnKiB)
	}
	for _, f := range rep.Failures {
		if _, err := fmt.Fprintln(w, "FAILED:", f); err != nil {
			return err
		}
	}
	return nil
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// WriteJSON writes the report to path.
func WriteJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("json: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
