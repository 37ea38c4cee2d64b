package chart

import (
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/seglog/seglog/bench"
)

// Chart is one plot of an image: a *Bars or a *Distributions.
type Chart interface {
	// plot makes the gonum plot, nil if the chart has nothing to show,
	// and the legend to draw to its right, if any.
	plot() (*plot.Plot, *plot.Legend, error)
	// height is the height the chart wants in the image.
	height() vg.Length
}

// Bars is a bar chart of a value per group (a workload) and series (a
// store, a backend): each group's bars side by side, a color per series
// named in a legend when there is more than one.
type Bars struct {
	Title string
	Unit  string // the value axis's label
	// Log draws the values on a log scale (for values spanning decades);
	// a value of 0 then shows no bar.
	Log bool
	// Horizontal lists the groups down the left side, the bars to the
	// right (for long group names); else the groups go along the bottom.
	Horizontal bool
	Groups     []string
	Series     []Series
}

// Series is one set of bars: Values[i] is group i's (0: no bar; NaN and
// infinities are refused).
type Series struct {
	Name   string
	Values []float64
}

// Distributions is a latency distribution per line: the share of
// operations (0 to 100 percent, up) that took at most a latency (along,
// in microseconds, on a log scale).
type Distributions struct {
	Title string
	Lines []Distribution
}

// Distribution is one line: a run's latencies at percentiles.
type Distribution struct {
	Name   string
	Points []bench.Percentile
}

// Size of the image: width, and the height of the charts' parts.
const (
	width       = 10 * vg.Inch
	dpi         = 96
	barRow      = 0.28 * vg.Inch // per bar of a horizontal chart
	chartMargin = 1.4 * vg.Inch  // title, axis and labels of a chart
	lineHeight  = 4 * vg.Inch    // a distribution chart
	barsHeight  = 4 * vg.Inch    // a vertical bar chart
)

// WriteFile writes the charts (see WritePNG) to a PNG file at path.
func WriteFile(path string, charts ...Chart) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = WritePNG(f, charts...)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WritePNG draws the charts one under the other, each across the image's
// width (960 pixels), and writes the image to w as a PNG. Charts with
// nothing to show are left out; it is an error if that leaves none.
func WritePNG(w io.Writer, charts ...Chart) error {
	var plots []*plot.Plot
	var legends []*plot.Legend
	var heights []vg.Length
	var total vg.Length
	for _, c := range charts {
		p, l, err := c.plot()
		if err != nil {
			return err
		}
		if p == nil {
			continue
		}
		plots = append(plots, p)
		legends = append(legends, l)
		heights = append(heights, c.height())
		total += c.height()
	}
	if len(plots) == 0 {
		return errors.New("chart: nothing to draw")
	}
	img := vgimg.NewWith(vgimg.UseWH(width, total), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	// Each chart its own height: a canvas per chart, top down.
	top := dc.Max.Y
	for i, p := range plots {
		c := dc
		c.Max.Y, c.Min.Y = top, top-heights[i]
		top = c.Min.Y
		c = padded(c)
		if l := legends[i]; l != nil {
			// The legend right of the plot, under the title's line: at
			// most 40% of the width.
			w := min(l.Rectangle(c).Size().X+0.15*vg.Inch, 0.4*(c.Max.X-c.Min.X))
			lc := c
			lc.Min.X = c.Max.X - w
			lc.Max.Y -= 0.4 * vg.Inch
			c.Max.X = lc.Min.X
			l.Draw(lc)
		}
		p.Draw(c)
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

// padded is c less a margin on each side.
func padded(c draw.Canvas) draw.Canvas {
	const pad = 0.12 * vg.Inch
	c.Min.X += pad
	c.Max.X -= pad
	c.Min.Y += pad
	c.Max.Y -= pad
	return c
}

func (b *Bars) height() vg.Length {
	if !b.Horizontal {
		return barsHeight
	}
	return chartMargin + barRow*vg.Length(len(b.Groups)*max(len(b.Series), 1))
}

func (b *Bars) plot() (*plot.Plot, *plot.Legend, error) {
	if len(b.Groups) == 0 || len(b.Series) == 0 {
		return nil, nil, nil
	}
	p := plot.New()
	p.Title.Text = b.Title
	value := &p.Y
	if b.Horizontal {
		value = &p.X
	}
	value.Label.Text = b.Unit
	// A group's bars fill 80% of its slot.
	slot := barRow * vg.Length(len(b.Series))
	if !b.Horizontal {
		slot = (width - 1.5*vg.Inch) / vg.Length(len(b.Groups))
	}
	bw := min(0.8*slot/vg.Length(len(b.Series)), 0.6*vg.Inch)
	var lo, hi float64 // the smallest positive and the largest value
	for _, s := range b.Series {
		if len(s.Values) != len(b.Groups) {
			return nil, nil, fmt.Errorf("chart: series %q has %d values for %d groups", s.Name, len(s.Values), len(b.Groups))
		}
		for _, v := range s.Values {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, nil, fmt.Errorf("chart: series %q has the value %v", s.Name, v)
			}
			if v > 0 && (lo == 0 || v < lo) {
				lo = v
			}
			hi = max(hi, v)
		}
	}
	if hi <= 0 {
		return nil, nil, nil
	}
	floor := 0.0
	if b.Log {
		// A decade or more under the smallest bar, which is then at
		// least log10(2) decades long.
		floor = math.Pow10(int(math.Floor(math.Log10(lo / 2))))
		value.Scale = floorLog{floor}
		value.Tick.Marker = logTicks{label: human}
	} else {
		value.Tick.Marker = humanTicks{}
	}
	n := len(b.Groups)
	for si, s := range b.Series {
		vals := make(plotter.Values, n)
		for g, v := range s.Values {
			v = max(v, 0)
			vals[at(g, n, b.Horizontal)] = v
		}
		bars, err := plotter.NewBarChart(vals, bw)
		if err != nil {
			return nil, nil, err
		}
		bars.Horizontal = b.Horizontal
		bars.LineStyle.Width = 0
		bars.Color = palette[si%len(palette)]
		// Side by side in the group, the first series first (top or left).
		off := (vg.Length(si) - vg.Length(len(b.Series)-1)/2) * bw
		if b.Horizontal {
			off = -off
		}
		bars.Offset = off
		p.Add(bars)
		if b.Horizontal {
			// The value at the end of each bar.
			labels, err := barLabels(vals, off)
			if err != nil {
				return nil, nil, err
			}
			p.Add(labels)
		}
		if len(b.Series) > 1 {
			p.Legend.Add(s.Name, bars)
		}
	}
	names := make([]string, n)
	for g, name := range b.Groups {
		names[at(g, n, b.Horizontal)] = name
	}
	if b.Horizontal {
		p.NominalY(names...)
		p.Legend.Left = false
	} else {
		p.NominalX(names...)
		p.Legend.Left = true
	}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	// Each group in the middle of its slot.
	category := &p.X
	if b.Horizontal {
		category = &p.Y
	}
	category.Min, category.Max = -0.5, float64(n)-0.5
	if b.Log {
		value.Min = floor
		value.Max = math.Pow10(int(math.Ceil(math.Log10(hi))))
	} else {
		value.Min = 0
		value.Max = hi * 1.05
	}
	return p, nil, nil
}

// barLabels writes each value of a horizontal bar chart at its bar's
// end, off from the group's middle as the bars are.
func barLabels(vals plotter.Values, off vg.Length) (*plotter.Labels, error) {
	xys := make(plotter.XYs, 0, len(vals))
	var texts []string
	for i, v := range vals {
		if v > 0 {
			xys = append(xys, plotter.XY{X: v, Y: float64(i)})
			texts = append(texts, human(v))
		}
	}
	l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: texts})
	if err != nil {
		return nil, err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Font.Size = vg.Points(8)
		l.TextStyle[i].YAlign = draw.YCenter
	}
	l.Offset = vg.Point{X: vg.Points(3), Y: off}
	return l, nil
}

// at is where group g of n goes on the category axis: in order along the
// bottom, top down along the side (the axis counts from the bottom).
func at(g, n int, horizontal bool) int {
	if horizontal {
		return n - 1 - g
	}
	return g
}

func (d *Distributions) height() vg.Length { return lineHeight }

func (d *Distributions) plot() (*plot.Plot, *plot.Legend, error) {
	// The axis spans the decades of the latencies, at most five under
	// the longest: a shorter one (a wake-up seen before the flush's
	// return was measured, 0) is drawn at its left edge.
	lo, hi := math.Inf(1), 0.0
	for _, l := range d.Lines {
		for _, pt := range l.Points {
			if v := micros(pt.Latency); v > minMicros {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if hi == 0 {
		return nil, nil, nil
	}
	xmax := math.Pow10(int(math.Ceil(math.Log10(hi))))
	xmin := max(math.Pow10(int(math.Floor(math.Log10(lo)))), xmax/1e5)
	if xmax <= xmin {
		xmax = xmin * 10
	}
	p := plot.New()
	p.Title.Text = d.Title
	p.X.Label.Text = "latency (log scale)"
	p.Y.Label.Text = "operations done within it (%)"
	p.X.Scale = floorLog{xmin}
	p.X.Tick.Marker = logTicks{label: microsLabel}
	p.Y.Tick.Marker = plot.ConstantTicks(percentTicks())
	legend := plot.NewLegend()
	legend.TextStyle.Font.Size = vg.Points(10)
	legend.Top, legend.Left = true, true
	for i, l := range d.Lines {
		if len(l.Points) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(l.Points))
		for j, pt := range l.Points {
			pts[j] = plotter.XY{X: max(micros(pt.Latency), xmin), Y: pt.P}
		}
		slices.SortStableFunc(pts, func(a, b plotter.XY) int {
			if a.Y != b.Y {
				return cmpFloat(a.Y, b.Y)
			}
			return cmpFloat(a.X, b.X)
		})
		line, scatter, err := plotterLinePoints(pts)
		if err != nil {
			return nil, nil, err
		}
		c := palette[i%len(palette)]
		line.Color, line.Width = c, vg.Points(1.5)
		line.Dashes = dashes[(i/len(palette))%len(dashes)]
		scatter.Color, scatter.Radius = c, vg.Points(2)
		p.Add(line, scatter)
		legend.Add(l.Name, line)
	}
	p.Add(plotter.NewGrid())
	p.X.Min, p.X.Max = xmin, xmax
	p.Y.Min, p.Y.Max = 0, 100
	return p, &legend, nil
}

func plotterLinePoints(pts plotter.XYs) (*plotter.Line, *plotter.Scatter, error) {
	line, err := plotter.NewLine(pts)
	if err != nil {
		return nil, nil, err
	}
	scatter, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, nil, err
	}
	return line, scatter, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// minMicros is the shortest latency drawn: a shorter one (0) is drawn
// there, where a log scale can show it.
const minMicros = 0.001

// micros is d in microseconds, at least minMicros.
func micros(d time.Duration) float64 { return max(float64(d)/1e3, minMicros) }

func percentTicks() []plot.Tick {
	var ts []plot.Tick
	for v := 0; v <= 100; v += 10 {
		t := plot.Tick{Value: float64(v)}
		if v%20 == 0 {
			t.Label = fmt.Sprint(v)
		}
		ts = append(ts, t)
	}
	return ts
}

// floorLog is a log scale that draws a value below floor (0 too) at
// floor, where a bar starting at 0 begins.
type floorLog struct{ floor float64 }

func (s floorLog) Normalize(lo, hi, x float64) float64 {
	return plot.LogScale{}.Normalize(max(lo, s.floor), max(hi, s.floor), max(x, s.floor))
}

// logTicks marks each power of ten with a label (1k, 10M; 10µs, 1ms) and
// the steps between without.
type logTicks struct{ label func(float64) string }

func (lt logTicks) Ticks(lo, hi float64) []plot.Tick {
	lo = max(lo, minMicros)
	hi = max(hi, lo)
	var ts []plot.Tick
	for e := int(math.Floor(math.Log10(lo))); e <= int(math.Ceil(math.Log10(hi))); e++ {
		p := math.Pow10(e)
		for i := 1; i < 10; i++ {
			v := p * float64(i)
			if v < lo*(1-1e-9) || v > hi*(1+1e-9) {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 {
				t.Label = lt.label(v)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// humanTicks is gonum's default ticks, labelled as human does.
type humanTicks struct{}

func (humanTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = human(ts[i].Value)
		}
	}
	return ts
}

// human writes v short: 1.5M, 20k, 300, 0.01.
func human(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e9:
		return trim(v/1e9) + "G"
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e3:
		return trim(v/1e3) + "k"
	}
	return trim(v)
}

// microsLabel writes a latency in microseconds with its unit: 500ns,
// 10µs, 1ms, 2s.
func microsLabel(us float64) string {
	switch {
	case us >= 1e6:
		return trim(us/1e6) + "s"
	case us >= 1e3:
		return trim(us/1e3) + "ms"
	case us >= 1:
		return trim(us) + "µs"
	}
	return trim(us*1e3) + "ns"
}

func trim(v float64) string { return fmt.Sprintf("%.3g", v) }

// palette: distinct colors that read on white (the Tableau 10).
var palette = []color.Color{
	color.RGBA{0x4e, 0x79, 0xa7, 0xff}, color.RGBA{0xf2, 0x8e, 0x2b, 0xff}, color.RGBA{0xe1, 0x57, 0x59, 0xff},
	color.RGBA{0x76, 0xb7, 0xb2, 0xff}, color.RGBA{0x59, 0xa1, 0x4f, 0xff}, color.RGBA{0xed, 0xc9, 0x48, 0xff},
	color.RGBA{0xb0, 0x7a, 0xa1, 0xff}, color.RGBA{0xff, 0x9d, 0xa7, 0xff}, color.RGBA{0x9c, 0x75, 0x5f, 0xff},
	color.RGBA{0xba, 0xb0, 0xac, 0xff},
}

// dashes tell lines of the same color apart once the palette repeats.
var dashes = [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}}
