package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Series is one curve of a plot: the latencies of every operation of one endpoint (over
// one run, or every round of a comparison).
type Series struct {
	Label   string
	Samples map[Op][]time.Duration
}

// Series returns the latencies of the report's run, labelled with its endpoint.
func (r *Report) Series() Series {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Series{Label: r.Endpoint, Samples: map[Op][]time.Duration{}}
	for op, d := range r.samples {
		s.Samples[op] = slices.Clone(d)
	}
	return s
}

// Series returns one curve per endpoint of the comparison, each with the latencies of all
// its rounds.
func (c *Comparison) Series() []Series {
	out := []Series{{Label: c.Endpoint, Samples: map[Op][]time.Duration{}}, {Label: c.Baseline, Samples: map[Op][]time.Duration{}}}
	for _, pair := range c.Runs {
		for i, rep := range pair {
			for op, d := range rep.Series().Samples {
				out[i].Samples[op] = append(out[i].Samples[op], d...)
			}
		}
	}
	return out
}

// plotOps is the order of the panels.
var plotOps = []Op{OpPodUp, OpRunPodSandbox, OpCreateContainer, OpStartContainer, OpStopPodSandbox, OpRemovePodSandbox}

// Plot draws the latency distribution of each operation as an SVG: one panel per
// operation, each with one curve per series, the empirical cumulative distribution (the
// fraction of requests that took at most x, x on a log scale). Curves that rise later are
// slower; the gap between two curves at a height is their difference at that percentile.
func Plot(w io.Writer, series []Series) error {
	plots, err := panels(series)
	if err != nil {
		return err
	}
	rows, cols := len(plots), len(plots[0])
	img := vgsvg.New(vg.Length(cols)*12*vg.Centimeter, vg.Length(rows)*9*vg.Centimeter)
	drawPanels(draw.New(img), plots)
	if _, err := img.WriteTo(w); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// panels builds one plot per operation any series measured, two to a row.
func panels(series []Series) ([][]*plot.Plot, error) {
	var ops []Op
	for _, op := range plotOps {
		if slices.ContainsFunc(series, func(s Series) bool { return len(s.Samples[op]) > 0 }) {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return nil, fmt.Errorf("plot: no latencies to draw")
	}
	cols := min(2, len(ops))
	rows := (len(ops) + cols - 1) / cols
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for i, op := range ops {
		p, err := cdfPlot(op, series)
		if err != nil {
			return nil, err
		}
		plots[i/cols][i%cols] = p
	}
	return plots, nil
}

// drawPanels lays the plots out on dc in their rows and columns.
func drawPanels(dc draw.Canvas, plots [][]*plot.Plot) {
	tiles := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c, p := range plots[r] {
			if p != nil {
				p.Draw(canvases[r][c])
			}
		}
	}
}

// minPlotMs keeps latencies off zero, which a log axis cannot show.
const minPlotMs = 0.001

func cdfPlot(op Op, series []Series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = string(op)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	// Room above 1 for the legend, one line per series.
	p.Y.Min, p.Y.Max = 0, 1+0.1*float64(len(series)+1)
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25}, {Value: 0.5, Label: "0.5"}, {Value: 0.75}, {Value: 0.9, Label: "0.9"}, {Value: 1, Label: "1"}})
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.XOffs = vg.Millimeter * 2
	p.Add(plotter.NewGrid())
	for i, s := range series {
		d := slices.Clone(s.Samples[op])
		if len(d) == 0 {
			continue
		}
		slices.Sort(d)
		pts := make(plotter.XYs, 0, len(d)+1)
		pts = append(pts, plotter.XY{X: max(ms(d[0]), minPlotMs), Y: 0})
		for k, v := range d {
			pts = append(pts, plotter.XY{X: max(ms(v), minPlotMs), Y: float64(k+1) / float64(len(d))})
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", op, err)
		}
		line.StepStyle = plotter.PostStep
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i)
		line.Width = vg.Points(1.5)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s (n=%d, p50 %.1f ms)", strings.TrimPrefix(s.Label, "unix://"), len(d), ms(d[len(d)/2])), line)
	}
	// A little room left and right of the curves.
	p.X.Min, p.X.Max = p.X.Min/1.25, p.X.Max*1.25
	return p, nil
}

// logTicks marks a log axis at 1, 2 and 5 times each power of ten (labelled) and at the
// other integers times it (not labelled), so that a range of less than a decade still
// has labels.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for exp := math.Floor(math.Log10(lo)); math.Pow(10, exp) <= hi; exp++ {
		base := math.Pow(10, exp)
		for m := 1; m <= 9; m++ {
			v := float64(m) * base
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}
