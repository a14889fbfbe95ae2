package report

import (
	"bufio"
	"fmt"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart is one PNG of the report.
type Chart struct {
	File    string // name inside the report directory
	Title   string
	Caption string
	// CapacityCaption replaces Caption in a capacity search's report
	// (one fleet stepping up, no scenarios side by side); empty: the same.
	CapacityCaption string
}

// Charts are the report's pictures, in the order index.html shows them.
// Shaded bands are the ramp's pauses, or a capacity search's holds: login
// attempts stood still there. Legends sit right of the data.
var Charts = []Chart{
	{"capacity_curve.png", "Latency, drops and server CPU against logged-in clients",
		"How each figure grows with the users logged in, one line per run in time order (a line turning back left is clients lost); dotted black: the objective's bound; coloured verticals: the users each scenario held (short dashes) and where it broke (long dashes).",
		"How each figure grows with the users logged in as the levels step up (a line turning back left is clients lost); dotted black: the objective's bound; verticals: the users held (short dashes) and the level that broke (long dashes)."},
	{"logged_in.png", "Login attempts and logged-in clients over time",
		"Logged-in clients (solid) and login attempts (dashed); grey bands are ramp pauses. Attempts going on while logged-in stays flat is a plateau: the relay refused or lost the rest.",
		"Logged-in clients (solid) and login attempts (dashed); grey bands are the levels' holds, where each level is judged (no logins). Attempts going on while logged-in stays flat: the server refused or lost the rest."},
	{"send_gbps.png", "Relay send Gbps over time (relay → clients)",
		fmt.Sprintf("Bytes the relay wrote to clients, as a %d s rolling mean (each sample weighted by its real interval: one short sample makes no spike). N:N should climb much faster than 1:N as clients log in.", PeakWindowS),
		fmt.Sprintf("Bytes the relay wrote to clients, as a %d s rolling mean (each sample weighted by its real interval), as the levels step up; grey bands are the holds.", PeakWindowS)},
	{"recv_gbps.png", "Relay receive Gbps over time (clients → relay)",
		fmt.Sprintf("Bytes the relay read from clients, as a %d s rolling mean (each sample weighted by its real interval, the same rule as send). What the clients sent: N:N, where every client sends, well above 1:N, where one does.", PeakWindowS),
		fmt.Sprintf("Bytes the relay read from clients, as a %d s rolling mean (each sample weighted by its real interval, the same rule as send), as the levels step up; grey bands are the holds.", PeakWindowS)},
	{"cpu_idle.png", "Host CPU idle over time (% of all CPUs)", "Idle share of the relay's host (solid) and of the fleet's host (dashed); 0 % is every CPU busy. On one machine they are the same host.", ""},
	{"process_cpu.png", "Process CPU over time (% of one core)", "CPU of the relay process (solid) and of the fleet process (dashed); 100 % is one core busy.", ""},
	{"gbps_vs_clients.png", "Send Gbps against logged-in clients",
		"One dot per second, filled before the run's breaking point (the objective that decided its answer, or the first client lost) and hollow after; the fits, quadratic solid and linear dashed, cover only the filled dots (formulas in the table). N:N should come out quadratic, 1:N linear.",
		"One dot per second, filled before the breaking point and hollow after; the fits, quadratic solid and linear dashed, cover only the filled dots (formulas in the table): how the relay's output grows with users."},
	{"latency_vs_clients.png", "Delivery latency p99 against logged-in clients (log scale)", "Send → deliver latency p99 per second, from the fleet's histogram, on a log axis so fast and slow scenarios both show.",
		"Send → deliver latency p99 per second, from the fleet's histogram, on a log axis; the objective's bound is the answer's."},
}

// chartsFor are the charts with the captions of a compare or, capacity
// true, of a capacity search.
func chartsFor(capacity bool) []Chart {
	out := append([]Chart(nil), Charts...)
	for i, c := range out {
		if capacity && c.CapacityCaption != "" {
			out[i].Caption = c.CapacityCaption
		}
	}
	return out
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
	bands, bandName := pauseBands(in), "ramp pause"
	if sum.Capacity != nil {
		// Each level is judged over its hold from a quarter in (the last
		// logins settle first): the band is what it was judged over.
		bands, bandName = holdBands(sum.Capacity.Levels), "judged: last ¾ of a hold"
	}
	slo := DefaultSLO()
	if in.SLO != nil {
		slo = *in.SLO
	}
	pct := func(p *chart) { p.Y.Max = math.Max(p.Y.Max, 100) }
	builders := map[string]func() (*chart, error){
		// The rolling means the table's peaks are taken from: one short
		// sample makes no spike.
		"send_gbps.png": func() (*chart, error) {
			return rollingChart(in, idx, bands, bandName, func(p Point) float64 { return p.SendGbps }, func(p *Point, v float64) { p.SendGbps = v })
		},
		"recv_gbps.png": func() (*chart, error) {
			return rollingChart(in, idx, bands, bandName, func(p Point) float64 { return p.RecvGbps }, func(p *Point, v float64) { p.RecvGbps = v })
		},
		"cpu_idle.png": func() (*chart, error) {
			c, err := timeChart(in, idx, bands, bandName, "% idle", []series{
				{get: func(p Point) float64 { return p.RelayCPUIdlePct }, suffix: "relay host idle"},
				{get: func(p Point) float64 { return p.FleetCPUIdlePct }, suffix: "fleet host idle", dashed: true},
			})
			if err == nil {
				pct(c)
			}
			return c, err
		},
		"process_cpu.png": func() (*chart, error) {
			return timeChart(in, idx, bands, bandName, "% of one core", []series{
				{get: func(p Point) float64 { return p.RelayProcessCPUPct }, suffix: "relay process"},
				{get: func(p Point) float64 { return p.FleetProcessCPUPct }, suffix: "fleet process", dashed: true},
			})
		},
		"logged_in.png": func() (*chart, error) {
			return timeChart(in, idx, bands, bandName, "clients", []series{
				{get: func(p Point) float64 { return p.LoggedIn }, suffix: "logged in"},
				{get: func(p Point) float64 { return p.LoginAttempts }, suffix: "attempts", dashed: true},
			})
		},
		"gbps_vs_clients.png": func() (*chart, error) { return fitChart(in, sum, idx) },
		"latency_vs_clients.png": func() (*chart, error) {
			lat := func(p Point) float64 { return p.LatencyP99Ms }
			c, err := scatterChart(in, idx, "latency p99 (ms)", func(p Point) float64 {
				// A log axis has no zero.
				if v := lat(p); v > 0 && !math.IsInf(v, 1) { // past the range: no number to draw
					return v
				}
				return math.NaN()
			})
			if err == nil {
				logY(c, in, lat)
			}
			return c, err
		},
	}
	for _, ch := range Charts {
		if ch.File == "capacity_curve.png" {
			cs, err := capacityCurve(in, slo, sum.Cards, idx)
			if err == nil {
				err = savePanels(filepath.Join(dir, ch.File), ch.Title, cs)
			}
			if err != nil {
				return fmt.Errorf("chart %s: %w", ch.File, err)
			}
			continue
		}
		c, err := builders[ch.File]()
		if err != nil {
			return fmt.Errorf("chart %s: %w", ch.File, err)
		}
		c.Title.Text = ch.Title
		if err := c.save(filepath.Join(dir, ch.File)); err != nil {
			return fmt.Errorf("chart %s: %w", ch.File, err)
		}
	}
	return nil
}

// chart is a plot with its legend kept apart, drawn right of the data so
// it never covers a line.
type chart struct {
	*plot.Plot
	legend plot.Legend
}

const legendW = 2.4 * vg.Inch

// save draws the plot and its legend side by side into a PNG.
func (c *chart) save(path string) error {
	finite(c.Plot)
	if _, ok := c.Y.Scale.(plot.LogScale); !ok {
		// A little room above the highest line, off the frame.
		c.Y.Max += 0.04 * (c.Y.Max - c.Y.Min)
	}
	img := vgimg.New(chartW, chartH)
	dc := draw.New(img)
	c.Plot.Draw(draw.Crop(dc, 0, -legendW, 0, 0))
	c.legend.Top, c.legend.Left = true, true
	c.legend.Draw(draw.Crop(dc, chartW-legendW+vg.Points(8), 0, 0, -vg.Points(30)))
	return writePNG(path, img)
}

// writePNG writes a drawn image to path.
func writePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	// BestSpeed: PNG encoding at the default level was two thirds of a
	// report's CPU; a chart's flat colours compress at the fastest level
	// to files 3 % larger, and the report takes 15 % less CPU (a third
	// less in the race-built binaries every test runs).
	b := bufio.NewWriter(f)
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	if err := enc.Encode(b, img.Image()); err != nil {
		f.Close()
		return err
	}
	if err := b.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// finite gives an axis without data a range, so an empty chart draws
// (gonum's tick search does not end on NaN bounds).
func finite(p *plot.Plot) {
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		if math.IsNaN(a.Min) || math.IsInf(a.Min, 0) {
			a.Min = 0
		}
		if math.IsNaN(a.Max) || math.IsInf(a.Max, 0) || a.Max <= a.Min {
			a.Max = a.Min + 1
		}
	}
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

func newChart(xLabel, yLabel string) *chart {
	p := plot.New()
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Y.Min = 0
	p.X.Tick.Marker = fiveTicks{}
	p.Y.Tick.Marker = fiveTicks{}
	p.Add(plotter.NewGrid())
	return &chart{Plot: p, legend: plot.NewLegend()}
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

func timeChart(in Input, idx map[string]int, bands []band, bandName, yLabel string, ss []series) (*chart, error) {
	c := newChart("seconds since the run started", yLabel)
	if len(bands) > 0 {
		c.Add(bandPlotter(bands))
		c.legend.Add(bandName, bandPlotter(bands))
	}
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
			c.Add(l)
			// Repeats share their scenario's colour and one legend entry.
			name := strings.TrimSpace(r.Scenario + " " + s.suffix)
			if !legend[name] {
				c.legend.Add(name, l)
				legend[name] = true
			}
		}
	}
	return c, nil
}

func scatterChart(in Input, idx map[string]int, yLabel string, get func(Point) float64) (*chart, error) {
	c := newChart("logged-in clients", yLabel)
	return c, addScatter(c, in, idx, get, draw.CircleGlyph{}, "")
}

// addScatter adds get against logged-in clients of every run to c as
// dots of shape, one legend entry per scenario (its name and suffix).
func addScatter(c *chart, in Input, idx map[string]int, get func(Point) float64, shape draw.GlyphDrawer, suffix string) error {
	seen := map[string]bool{}
	for _, r := range in.Runs {
		data := xy(r.Series.Points, func(pt Point) float64 { return pt.LoggedIn }, get)
		if len(data) == 0 {
			continue
		}
		s, err := plotter.NewScatter(data)
		if err != nil {
			return err
		}
		s.GlyphStyle.Color = scenarioColor(idx[r.Scenario])
		s.GlyphStyle.Radius = vg.Points(2)
		s.GlyphStyle.Shape = shape
		c.Add(s)
		if !seen[r.Scenario] {
			c.legend.Add(r.Scenario+suffix, s)
			seen[r.Scenario] = true
		}
	}
	return nil
}

// logY puts the y axis on a log scale over get's positive values.
func logY(c *chart, in Input, get func(Point) float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, r := range in.Runs {
		for _, p := range r.Series.Points {
			if v := get(p); v > 0 && !math.IsInf(v, 0) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if math.IsInf(lo, 0) {
		lo, hi = 0.1, 1000
	}
	c.Y.Scale = plot.LogScale{}
	c.Y.Tick.Marker = logTicks{}
	c.Y.Min, c.Y.Max = lo/1.5, hi*1.5
}

func fitChart(in Input, sum Summary, idx map[string]int) (*chart, error) {
	// Each run's samples before its breaking point are filled dots, the
	// fits' data; those after are hollow.
	before, after := in, in
	before.Runs, after.Runs = make([]Run, len(in.Runs)), make([]Run, len(in.Runs))
	maxX := map[string]float64{}
	for i, r := range in.Runs {
		var h Headline
		if i < len(sum.Runs) {
			h = sum.Runs[i].Headline
		}
		win, _ := fitWindow(r.Series.Points, h)
		before.Runs[i], after.Runs[i] = r, r
		before.Runs[i].Series.Points = win
		after.Runs[i].Series.Points = r.Series.Points[len(win):]
		// Each fit is drawn over the clients its data reached: past them
		// it would be a prediction, not a fit.
		for _, pt := range win {
			if !math.IsNaN(pt.LoggedIn) {
				maxX[r.Scenario] = math.Max(maxX[r.Scenario], pt.LoggedIn)
			}
		}
	}
	gbps := func(pt Point) float64 { return pt.SendGbps }
	c, err := scatterChart(before, idx, "send Gbps", gbps)
	if err != nil {
		return nil, err
	}
	if err := addScatter(c, after, idx, gbps, draw.RingGlyph{}, " after its break"); err != nil {
		return nil, err
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
			c.Add(fn)
			span, _, _ := strings.Cut(f.Over, ",")
			c.legend.Add(fmt.Sprintf("%s %s, R² %.3f, %s", sc.Scenario, f.Kind, f.R2, span), fn)
		}
	}
	return c, nil
}

// rollingChart draws one Gbps column of every run as its RollingMeans.
func rollingChart(in Input, idx map[string]int, bands []band, bandName string, get func(Point) float64, set func(*Point, float64)) (*chart, error) {
	return timeChart(rolled(in, get, set), idx, bands, bandName, "Gbps", []series{{get: get}})
}

// rolled is in with one column of every run replaced by its RollingMeans
// (NaN, so no point, until a run's samples span the window).
func rolled(in Input, get func(Point) float64, set func(*Point, float64)) Input {
	out := in
	out.Runs = make([]Run, len(in.Runs))
	for i, r := range in.Runs {
		pts := append([]Point(nil), r.Series.Points...)
		for j, v := range RollingMeans(r.Series.Points, get) {
			set(&pts[j], v)
		}
		r.Series.Points = pts
		out.Runs[i] = r
	}
	return out
}

// band is a stretch of a run's clock, in seconds.
type band struct{ from, to float64 }

// holdBands are a capacity search's holds, where each level was judged.
func holdBands(levels []Level) []band {
	var out []band
	for _, l := range levels {
		if from, to := float64(l.HoldFromS), float64(l.ToS); !math.IsNaN(from) && to > from {
			out = append(out, band{from, to})
		}
	}
	return out
}

// pauseBands are the stretches where the first run's login attempts stood
// still before the last attempt: the ramp's pauses.
func pauseBands(in Input) []band {
	if len(in.Runs) == 0 {
		return nil
	}
	pts := in.Runs[0].Series.Points
	final := math.NaN()
	for _, p := range pts {
		if !math.IsNaN(p.LoginAttempts) {
			final = p.LoginAttempts
		}
	}
	var out []band
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if a.LoginAttempts > 0 && a.LoginAttempts == b.LoginAttempts && b.LoginAttempts < final {
			if n := len(out); n > 0 && out[n-1].to == a.T {
				out[n-1].to = b.T
			} else {
				out = append(out, band{a.T, b.T})
			}
		}
	}
	return out
}

// bandPlotter shades bands across the whole height of the data area.
type bandPlotter []band

var bandColor = color.RGBA{R: 226, G: 226, B: 226, A: 255}

func (bs bandPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, b := range bs {
		x0, x1 := trX(b.from), trX(b.to)
		c.FillPolygon(bandColor, []vg.Point{{X: x0, Y: c.Min.Y}, {X: x1, Y: c.Min.Y}, {X: x1, Y: c.Max.Y}, {X: x0, Y: c.Max.Y}})
	}
}

// Thumbnail draws the legend's swatch.
func (bs bandPlotter) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(bandColor, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}})
}

// fiveTicks labels at least five ticks: the largest round step (1, 2, 2.5
// or 5 × 10^k) that fits five times into the range, with unlabelled
// ticks halfway.
type fiveTicks struct{}

func (fiveTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		hi = lo + 1
	}
	step := roundStepBelow((hi - lo) / 5)
	// As many decimals as the step has (25: none, 2.5: one, 0.25: two).
	digits := 0
	for ; digits < 9; digits++ {
		if x := step * math.Pow(10, float64(digits)); math.Abs(x-math.Round(x)) < 1e-6*x {
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', digits, 64)})
		if m := v + step/2; m < hi {
			ticks = append(ticks, plot.Tick{Value: m})
		}
	}
	return ticks
}

// roundStepBelow is the largest of 1, 2, 2.5, 5 × 10^k not over x.
func roundStepBelow(x float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{5, 2.5, 2, 1} {
		if m*p <= x*(1+1e-9) {
			return m * p
		}
	}
	return p
}

// logTicks labels 1, 2 and 5 × 10^k on a log axis, and every integer
// multiple when that makes fewer than five labels.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(lo > 0) || !(hi > lo) {
		return fiveTicks{}.Ticks(lo, hi)
	}
	gen := func(ms []float64) []plot.Tick {
		var out []plot.Tick
		for k := math.Floor(math.Log10(lo)); k <= math.Ceil(math.Log10(hi)); k++ {
			p := math.Pow(10, k)
			for _, m := range ms {
				if v := m * p; v >= lo && v <= hi {
					out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
				}
			}
		}
		return out
	}
	ticks := gen([]float64{1, 2, 5})
	if len(ticks) < 5 {
		ticks = gen([]float64{1, 2, 3, 4, 5, 6, 7, 8, 9})
	}
	return ticks
}
