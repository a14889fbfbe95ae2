package main

import (
	"fmt"
	"io"
	"slices"
)

// results are every run's figures.
type results struct {
	Load []loadRun `json:"load"`
	Idle []idleRun `json:"idle"`
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// loadMedian is the median of f over tool's load runs.
func (r results) loadMedian(tool string, f func(loadRun) float64) float64 {
	var v []float64
	for _, x := range r.Load {
		if x.Tool == tool {
			v = append(v, f(x))
		}
	}
	return median(v)
}

func (r results) idleMedian(tool string, n int) float64 {
	var v []float64
	for _, x := range r.Idle {
		if x.Tool == tool && x.Clients == n {
			v = append(v, x.PerClient)
		}
	}
	return median(v)
}

// print writes the medians and the fleet/k6 ratios.
func (r results) print(w io.Writer, k6 bool) {
	tools := []string{"fleet"}
	if k6 {
		tools = append(tools, "k6")
	}
	if len(r.Load) > 0 {
		fmt.Fprintln(w, "# load medians: tool\tCPU s per million received\tp99 ms\toffered fraction\tuser ns per message")
		for _, t := range tools {
			fmt.Fprintf(w, "%s\t%.3f\t%.2f\t%.3f\t%.0f\n", t, r.loadMedian(t, loadRun.CPUPerMillion),
				r.loadMedian(t, func(x loadRun) float64 { return x.P99MS }),
				r.loadMedian(t, func(x loadRun) float64 { return x.Offered }),
				r.loadMedian(t, loadRun.UserNSPerMessage))
		}
		if k6 {
			fmt.Fprintf(w, "fleet/k6 CPU per million received: %.2f×\n",
				r.loadMedian("fleet", loadRun.CPUPerMillion)/r.loadMedian("k6", loadRun.CPUPerMillion))
		}
	}
	if len(r.Idle) > 0 {
		fmt.Fprintln(w, "# idle medians: tool\tclients\tKiB per idle client")
		seen := map[[2]any]bool{}
		for _, x := range r.Idle {
			k := [2]any{x.Tool, x.Clients}
			if seen[k] {
				continue
			}
			seen[k] = true
			fmt.Fprintf(w, "%s\t%d\t%.2f\n", x.Tool, x.Clients, r.idleMedian(x.Tool, x.Clients))
		}
		if k6 {
			n := 0
			for _, x := range r.Idle {
				if x.Tool == "k6" {
					n = x.Clients
				}
			}
			fmt.Fprintf(w, "fleet/k6 KiB per idle client at %d: %.3f×\n", n, r.idleMedian("fleet", n)/r.idleMedian("k6", n))
		}
	}
}
