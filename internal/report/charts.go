package report

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Chart is one PNG of the report.
type Chart struct {
	File    string // name inside the report directory
	Title   string
	Caption string
}

// Charts are the report's pictures, in the order index.html shows them.
var Charts = []Chart{
	{"send_gbps.png", "Relay send Gbps over time", "Bytes the relay wrote to clients, per second. N:N should climb much faster than 1:N as clients log in."},
	{"cpu_idle.png", "CPU over time", "Relay host CPU idle % (solid) and relay process CPU % where 100 is one core busy (dashed)."},
	{"logged_in.png", "Logged-in clients over time", "Logged-in clients (solid) and login attempts (dashed); flat stretches of both are ramp pauses, a flat solid line under a rising dashed one is a plateau."},
	{"gbps_vs_clients.png", "Send Gbps against logged-in clients", "One dot per second; the quadratic fit is solid, the linear fit dashed. N:N should come out quadratic, 1:N linear."},
	{"latency_vs_clients.png", "Delivery latency p99 against logged-in clients", "Send → deliver latency p99 per second, from the fleet's histogram."},
}

const chartW, chartH = 9 * vg.Inch, 4.5 * vg.Inch

// scenarioColor gives each scenario a fixed colour that stays readable
// for colour-blind readers (Okabe-Ito palette).
func scenarioColor(i int) color.Color {
	palette := []color.Color{
		color.RGBA{R: 213, G: 94, A: 255},          // vermillion
		color.RGBA{G: 114, B: 178, A: 255},         // blue
		color.RGBA{G: 158, B: 115, A: 255},         // green
		color.RGBA{R: 204, G: 121, B: 167, A: 255}, // purple
		color.RGBA{R: 230, G: 159, A: 255},         // orange
		color.RGBA{R: 86, G: 180, B: 233, A: 255},  // sky
	}
	return palette[i%len(palette)]
}

// WriteCharts renders every chart into dir.
func WriteCharts(dir string, in Input, sum Summary) error {
	idx := scenarioIndex(in)
	builders := map[string]func() (*plot.Plot, error){
		"send_gbps.png": func() (*plot.Plot, error) {
			return timeChart(in, idx, "Gbps", []series{{get: func(p Point) float64 { return p.SendGbps }}})
		},
		"cpu_idle.png": func() (*plot.Plot, error) {
			return timeChart(in, idx, "%", []series{
				{get: func(p Point) float64 { return p.RelayCPUIdlePct }, suffix: "idle"},
				{get: func(p Point) float64 { return p.RelayProcessCPUPct }, suffix: "relay CPU", dashed: true},
			})
		},
		"logged_in.png": func() (*plot.Plot, error) {
			return timeChart(in, idx, "clients", []series{
				{get: func(p Point) float64 { return p.LoggedIn }, suffix: "logged in"},
				{get: func(p Point) float64 { return p.LoginAttempts }, suffix: "attempts", dashed: true},
			})
		},
		"gbps_vs_clients.png": func() (*plot.Plot, error) { return fitChart(in, sum, idx) },
		"latency_vs_clients.png": func() (*plot.Plot, error) {
			return scatterChart(in, idx, "latency p99 (ms)", func(p Point) float64 { return p.LatencyP99Ms })
		},
	}
	for _, c := range Charts {
		p, err := builders[c.File]()
		if err != nil {
			return fmt.Errorf("chart %s: %w", c.File, err)
		}
		p.Title.Text = c.Title
		if err := p.Save(chartW, chartH, filepath.Join(dir, c.File)); err != nil {
			return fmt.Errorf("chart %s: %w", c.File, err)
		}
	}
	return nil
}

func scenarioIndex(in Input) map[string]int {
	idx := map[string]int{}
	for _, r := range in.Runs {
		if _, ok := idx[r.Scenario]; !ok {
			idx[r.Scenario] = len(idx)
		}
	}
	return idx
}

type series struct {
	get    func(Point) float64
	suffix string
	dashed bool
}

func newPlot(xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p
}

// xy keeps the points where both coordinates were measured: gonum's
// plotters refuse NaN.
func xy(pts []Point, x, y func(Point) float64) plotter.XYs {
	var out plotter.XYs
	for _, p := range pts {
		a, b := x(p), y(p)
		if math.IsNaN(a) || math.IsNaN(b) || math.IsInf(a, 0) || math.IsInf(b, 0) {
			continue
		}
		out = append(out, plotter.XY{X: a, Y: b})
	}
	return out
}

func timeChart(in Input, idx map[string]int, yLabel string, ss []series) (*plot.Plot, error) {
	p := newPlot("seconds since the run started", yLabel)
	t := func(pt Point) float64 { return pt.T }
	legend := map[string]bool{}
	for _, r := range in.Runs {
		for _, s := range ss {
			data := xy(r.Series.Points, t, s.get)
			if len(data) == 0 {
				continue
			}
			l, err := plotter.NewLine(data)
			if err != nil {
				return nil, err
			}
			l.Color = scenarioColor(idx[r.Scenario])
			l.Width = vg.Points(1.5)
			if s.dashed {
				l.Dashes = plotutil.Dashes(2)
			}
			p.Add(l)
			// Repeats share their scenario's colour and one legend entry.
			name := strings.TrimSpace(r.Scenario + " " + s.suffix)
			if !legend[name] {
				p.Legend.Add(name, l)
				legend[name] = true
			}
		}
	}
	headroom(p, len(legend))
	return p, nil
}

// headroom raises the top of the y axis so the legend, drawn in the top
// left corner, does not cover the data.
func headroom(p *plot.Plot, entries int) {
	p.Y.Max += (p.Y.Max - p.Y.Min) * 0.07 * float64(entries)
}

func scatterChart(in Input, idx map[string]int, yLabel string, get func(Point) float64) (*plot.Plot, error) {
	p := newPlot("logged-in clients", yLabel)
	seen := map[string]bool{}
	for _, r := range in.Runs {
		data := xy(r.Series.Points, func(pt Point) float64 { return pt.LoggedIn }, get)
		if len(data) == 0 {
			continue
		}
		s, err := plotter.NewScatter(data)
		if err != nil {
			return nil, err
		}
		s.GlyphStyle.Color = scenarioColor(idx[r.Scenario])
		s.GlyphStyle.Radius = vg.Points(2)
		s.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(s)
		if !seen[r.Scenario] {
			p.Legend.Add(r.Scenario, s)
			seen[r.Scenario] = true
		}
	}
	headroom(p, len(seen))
	return p, nil
}

func fitChart(in Input, sum Summary, idx map[string]int) (*plot.Plot, error) {
	p, err := scatterChart(in, idx, "send Gbps", func(pt Point) float64 { return pt.SendGbps })
	if err != nil {
		return nil, err
	}
	// Room for the fit entries too (the scatter made room for its own).
	headroom(p, 2*len(sum.Scenarios))
	// Each fit is drawn over the clients its scenario reached: past them
	// it would be a prediction, not a fit.
	maxX := map[string]float64{}
	for _, r := range in.Runs {
		for _, pt := range r.Series.Points {
			if !math.IsNaN(pt.LoggedIn) {
				maxX[r.Scenario] = math.Max(maxX[r.Scenario], pt.LoggedIn)
			}
		}
	}
	for _, sc := range sum.Scenarios {
		for _, f := range []Fit{sc.Quadratic, sc.Linear} {
			if !f.OK {
				continue
			}
			fn := plotter.NewFunction(f.Eval)
			fn.XMin, fn.XMax = 0, maxX[sc.Scenario]
			fn.Samples = 100
			fn.Color = scenarioColor(idx[sc.Scenario])
			fn.Width = vg.Points(1.5)
			if f.Kind == "linear" {
				fn.Dashes = plotutil.Dashes(2)
			}
			p.Add(fn)
			p.Legend.Add(fmt.Sprintf("%s %s", sc.Scenario, f.String()), fn)
		}
	}
	return p, nil
}
