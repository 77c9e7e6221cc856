package bench

import (
	"fmt"
	"io"
	"slices"
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
	var ops []Op
	for _, op := range plotOps {
		if slices.ContainsFunc(series, func(s Series) bool { return len(s.Samples[op]) > 0 }) {
			ops = append(ops, op)
		}
	}
	if len(ops) == 0 {
		return fmt.Errorf("plot: no latencies to draw")
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
			return err
		}
		plots[i/cols][i%cols] = p
	}
	width, height := vg.Length(cols)*12*vg.Centimeter, vg.Length(rows)*9*vg.Centimeter
	img := vgsvg.New(width, height)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Centimeter, PadY: vg.Centimeter,
		PadTop: vg.Centimeter / 2, PadBottom: vg.Centimeter / 2, PadLeft: vg.Centimeter / 2, PadRight: vg.Centimeter / 2}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c, p := range plots[r] {
			if p != nil {
				p.Draw(canvases[r][c])
			}
		}
	}
	if _, err := img.WriteTo(w); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// minPlotMs keeps latencies off zero, which a log axis cannot show.
const minPlotMs = 0.001

func cdfPlot(op Op, series []Series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = string(op)
	p.X.Label.Text = "latency (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
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
		p.Legend.Add(fmt.Sprintf("%s (n=%d, p50 %.1f ms)", s.Label, len(d), ms(d[len(d)/2])), line)
	}
	return p, nil
}
