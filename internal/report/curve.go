package report

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The capacity curve: how latency, drops and the server's CPU grow with
// the users logged in (not with time), the objectives' bounds drawn
// across and each answer's held and broken users marked, one panel per
// figure over a shared x axis.

// curveLine is one marked number of users on the curve: an answer's held
// or broke-at.
type curveLine struct {
	x      float64
	label  string
	color  color.Color
	dashes []vg.Length
}

// curveLines are the cards' held and broke-at users.
func curveLines(cards []Card, idx map[string]int) []curveLine {
	var out []curveLine
	for _, c := range cards {
		col := scenarioColor(idx[c.Scenario])
		if h := float64(c.Held); !math.IsNaN(h) {
			out = append(out, curveLine{h, fmt.Sprintf("%s held %s", c.Scenario, c.Number), col, plotutil.Dashes(1)})
		}
		if b := float64(c.BrokeAt); !math.IsNaN(b) && b > 0 {
			out = append(out, curveLine{b, fmt.Sprintf("%s broke at %.0f", c.Scenario, b), col, plotutil.Dashes(3)})
		}
	}
	return out
}

// vline draws a vertical line across the data area at x.
type vline curveLine

func (v vline) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	x := trX(v.x)
	c.StrokeLine2(v.style(), x, c.Min.Y, x, c.Max.Y)
}

func (v vline) style() draw.LineStyle {
	return draw.LineStyle{Color: v.color, Width: vg.Points(2), Dashes: v.dashes}
}

// Thumbnail draws the legend's swatch.
func (v vline) Thumbnail(c *draw.Canvas) {
	y := (c.Min.Y + c.Max.Y) / 2
	c.StrokeLine2(v.style(), c.Min.X, y, c.Max.X, y)
}

// hline draws an objective's bound across the data area at y.
type hline struct{ y float64 }

var boundStyle = draw.LineStyle{Color: color.Black, Width: vg.Points(1.2), Dashes: []vg.Length{vg.Points(6), vg.Points(3)}}

func (h hline) Plot(c draw.Canvas, p *plot.Plot) {
	_, trY := p.Transforms(&c)
	y := trY(h.y)
	c.StrokeLine2(boundStyle, c.Min.X, y, c.Max.X, y)
}

// Thumbnail draws the legend's swatch.
func (hline) Thumbnail(c *draw.Canvas) {
	y := (c.Min.Y + c.Max.Y) / 2
	c.StrokeLine2(boundStyle, c.Min.X, y, c.Max.X, y)
}

// curvePanel is one figure against logged-in users: its series, and the
// objective's bound when it is on.
type curvePanel struct {
	yLabel string
	series []series
	// bound is the objective's bound on the panel's scale, with its
	// legend; NaN: off.
	bound      float64
	boundLabel string
	log        bool
	// dots: one dot per second instead of a line (latency jumps from
	// second to second; a line through it is a scribble). A dashed
	// series' dots are rings.
	dots bool
}

// curvePanels are the capacity curve's figures, with slo's bounds.
func curvePanels(slo SLO) []curvePanel {
	nan := math.NaN()
	lat := curvePanel{yLabel: "latency ms (log)", log: true, dots: true, bound: nan, series: []series{
		{get: func(p Point) float64 { return positive(p.LatencyP99Ms) }, suffix: "p99"},
		{get: func(p Point) float64 { return positive(p.LatencyP50Ms) }, suffix: "p50", dashed: true},
	}}
	if slo.on(ReasonLatency) {
		lat.bound, lat.boundLabel = ms(slo.P99.Seconds()), fmt.Sprintf("objective p99 < %v", slo.P99)
	}
	drops := curvePanel{yLabel: "clients lost", bound: nan, series: []series{
		{get: func(p Point) float64 {
			if math.IsNaN(p.SlowConsumerDiscards) && math.IsNaN(p.FleetDisconnects) {
				return math.NaN()
			}
			return math.Max(nz(p.SlowConsumerDiscards), nz(p.FleetDisconnects))
		}, suffix: "clients lost"},
	}}
	if slo.on(ReasonDisconnects) {
		drops.bound, drops.boundLabel = float64(slo.MaxDrops), fmt.Sprintf("objective drops ≤ %d", slo.MaxDrops)
	}
	cpu := curvePanel{yLabel: "server CPU %", bound: nan, series: []series{
		{get: func(p Point) float64 { return 100 - p.RelayCPUIdlePct }, suffix: "host busy % (all CPUs)"},
		{get: func(p Point) float64 { return p.RelayProcessCPUPct }, suffix: "process % (1 core)", dashed: true},
	}}
	if slo.on(ReasonCPUIdle) {
		cpu.bound, cpu.boundLabel = 100-slo.MinIdlePct, "objective busy < "+fmtPct(100-slo.MinIdlePct)
	}
	return []curvePanel{lat, drops, cpu}
}

// positive is v where a log axis can show it.
func positive(v float64) float64 {
	if v > 0 && !math.IsInf(v, 1) { // past the range: no number to draw
		return v
	}
	return math.NaN()
}

// capacityCurve draws the panels of every run against its logged-in
// clients, in time order (a line that turns back left is clients lost),
// with the objectives' bounds and the cards' held and broke-at users.
func capacityCurve(in Input, slo SLO, cards []Card, idx map[string]int) ([]*chart, error) {
	var out []*chart
	lines := curveLines(cards, idx)
	for i, pn := range curvePanels(slo) {
		c := newChart("logged-in clients", pn.yLabel)
		legend := map[string]bool{}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range in.Runs {
			for _, s := range pn.series {
				data := xy(r.Series.Points, func(p Point) float64 { return p.LoggedIn }, s.get)
				if len(data) == 0 {
					continue
				}
				for _, d := range data {
					lo, hi = math.Min(lo, d.Y), math.Max(hi, d.Y)
				}
				th, err := curveSeries(data, scenarioColor(idx[r.Scenario]), s.dashed, pn.dots)
				if err != nil {
					return nil, err
				}
				c.Add(th)
				if name := r.Scenario + " " + s.suffix; !legend[name] {
					c.legend.Add(name, th)
					legend[name] = true
				}
			}
		}
		if !math.IsNaN(pn.bound) {
			c.Add(hline{pn.bound})
			c.legend.Add(pn.boundLabel, hline{pn.bound})
			lo, hi = math.Min(lo, pn.bound), math.Max(hi, pn.bound)
		}
		for _, l := range lines {
			c.Add(vline(l))
			c.X.Max = math.Max(c.X.Max, l.x)
			if i == 0 { // one legend entry for the three panels
				c.legend.Add(l.label, vline(l))
			}
		}
		switch {
		case pn.log && lo > 0 && !math.IsInf(lo, 0):
			c.Y.Scale, c.Y.Tick.Marker = plot.LogScale{}, logTicks{}
			c.Y.Min, c.Y.Max = lo/1.5, hi*1.5
		case pn.log:
			c.Y.Min, c.Y.Max = 0, 1
		case !math.IsInf(hi, 0):
			c.Y.Max = math.Max(c.Y.Max, hi*1.1+0.5)
		}
		c.X.Min = 0
		out = append(out, c)
	}
	return out, nil
}

// curveSeries is one series of the curve: a line, dashed or not, or dots,
// rings when dashed.
func curveSeries(data plotter.XYs, col color.Color, dashed, dots bool) (interface {
	plot.Plotter
	plot.Thumbnailer
}, error) {
	if dots {
		s, err := plotter.NewScatter(data)
		if err != nil {
			return nil, err
		}
		s.GlyphStyle.Color, s.GlyphStyle.Radius, s.GlyphStyle.Shape = col, vg.Points(2), draw.CircleGlyph{}
		if dashed {
			s.GlyphStyle.Shape = draw.RingGlyph{}
		}
		return s, nil
	}
	l, err := plotter.NewLine(data)
	if err != nil {
		return nil, err
	}
	l.Color, l.Width = col, vg.Points(1.5)
	if dashed {
		l.Dashes = plotutil.Dashes(2)
	}
	return l, nil
}

// savePanels draws charts one above the other over one x axis, each
// legend right of its panel, under one title, into a PNG.
func savePanels(path, title string, cs []*chart) error {
	const panelH = 2.6 * vg.Inch
	h := panelH*vg.Length(len(cs)) + 0.4*vg.Inch
	img := vgimg.New(chartW, h)
	dc := draw.New(img)
	ps := make([][]*plot.Plot, len(cs))
	for i, c := range cs {
		finite(c.Plot)
		if _, ok := c.Y.Scale.(plot.LogScale); !ok {
			c.Y.Max += 0.04 * (c.Y.Max - c.Y.Min)
		}
		ps[i] = []*plot.Plot{c.Plot}
	}
	head := draw.Crop(dc, 0, 0, h-0.4*vg.Inch, 0)
	sty := draw.TextStyle{Color: color.Black, Font: cs[0].Title.TextStyle.Font, Handler: cs[0].Title.TextStyle.Handler,
		XAlign: draw.XCenter, YAlign: draw.YCenter}
	sty.Font.Size = vg.Points(13)
	head.FillText(sty, vg.Point{X: (chartW - legendW) / 2, Y: (head.Min.Y + head.Max.Y) / 2}, title)
	body := draw.Crop(dc, 0, -legendW, 0, -0.4*vg.Inch)
	tiles := draw.Tiles{Rows: len(cs), Cols: 1, PadY: vg.Points(6), PadLeft: vg.Points(4), PadRight: vg.Points(4)}
	canvases := plot.Align(ps, tiles, body)
	for i, c := range cs {
		c.Plot.Draw(canvases[i][0])
		c.legend.Top, c.legend.Left = true, true
		row := tiles.At(draw.Crop(dc, 0, 0, 0, -0.4*vg.Inch), 0, i)
		c.legend.Draw(draw.Canvas{Canvas: dc, Rectangle: vg.Rectangle{
			Min: vg.Point{X: chartW - legendW + vg.Points(8), Y: row.Min.Y},
			Max: vg.Point{X: chartW, Y: row.Max.Y - vg.Points(10)}}})
	}
	return writePNG(path, img)
}
