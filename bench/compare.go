package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// Comparison is the outcome of Compare: the same workload run on two endpoints in
// alternation, and the ratio of their latencies.
type Comparison struct {
	Endpoint string `json:"endpoint"`
	Baseline string `json:"baseline"`
	// Runs holds each round's reports: [endpoint, baseline].
	Runs [][2]*Report `json:"runs"`
	// Ratios holds, per operation, endpoint p50 / baseline p50 of each round, and their
	// median under "median".
	Ratios map[Op]RatioStats `json:"ratios"`
	// Floors holds the floor measured after each round (with a floor), and FloorRatios,
	// for PodUp and PodDown, each side's p50 over the round's floor.
	Floors      []*FloorReport       `json:"floors,omitempty"`
	FloorRatios map[Op][2]RatioStats `json:"floor_ratios,omitempty"`
	// Targets are the targets the comparison measured (targets.go).
	Targets []Target `json:"targets,omitempty"`
}

// RatioStats are the per-round ratios of one operation's p50 and their median.
type RatioStats struct {
	PerRound []float64 `json:"per_round"`
	Median   float64   `json:"median"`
}

// Compare runs the workload o on o.Endpoint and on baseline, alternately, rounds times
// each, and reports the ratio of their p50 latencies per operation: the median of the
// per-round ratios. Alternating within one run keeps the machine's drift out of the
// ratio, which is what the comparison of two configurations of one runtime (the
// journal's fsync on and off, say) needs. The side that goes first in a round alternates
// too (the endpoint in the first round, the baseline in the second, ...): what the first
// side leaves behind (a runtime's work after its teardown, the caches it warmed) weighs
// on the second, and so on both alike.
//
// With floor (a func that measures it, such as Floor), the floor (runc and CNI by
// themselves) is measured after each round too, and
// each side's PodUp and PodDown are compared with it.
func Compare(ctx context.Context, o Options, baseline string, rounds int, floor func(context.Context) (*FloorReport, error)) (*Comparison, error) {
	cs, err := CompareAll(ctx, o, []string{baseline}, rounds, floor)
	if len(cs) == 0 {
		return &Comparison{Endpoint: o.Endpoint, Baseline: baseline, Ratios: map[Op]RatioStats{}}, err
	}
	return cs[0], err
}

// CompareAll is Compare against several baselines in one run: each round runs the
// workload on the endpoint and on every baseline, one after the other, the order turning
// by one side a round (with the endpoint and two baselines: E B1 B2, B1 B2 E, B2 E B1,
// ...), then measures the floor. It returns one Comparison per baseline, in the order
// given; they share the endpoint's reports and the floors, so that the endpoint's ratios
// to each baseline (containerd 1.6 and 2.x, say) are taken within the same rounds. On an
// error it returns the comparisons of the rounds that finished, if any.
func CompareAll(ctx context.Context, o Options, baselines []string, rounds int, floor func(context.Context) (*FloorReport, error)) (Comparisons, error) {
	if rounds <= 0 {
		return nil, fmt.Errorf("rounds must be positive")
	}
	if len(baselines) == 0 {
		return nil, fmt.Errorf("no baseline to compare with")
	}
	endpoints := append([]string{o.Endpoint}, baselines...)
	var runs [][]*Report // per round, per side (0 the endpoint, then the baselines)
	var floors []*FloorReport
	prefix := o.Prefix
	var err error
rounds:
	for round := range rounds {
		reps := make([]*Report, len(endpoints))
		for k := range endpoints {
			i := (round + k) % len(endpoints)
			ro := o
			ro.Endpoint = endpoints[i]
			if prefix != "" {
				ro.Prefix = fmt.Sprintf("%s-r%d-%d", prefix, round, i)
			}
			rep, rerr := Run(ctx, ro)
			if rerr != nil {
				err = fmt.Errorf("round %d on %s: %w", round+1, endpoints[i], rerr)
				break rounds
			}
			reps[i] = rep
		}
		if floor != nil {
			f, ferr := floor(ctx)
			if ferr != nil {
				err = fmt.Errorf("round %d: %w", round+1, ferr)
				break
			}
			floors = append(floors, f)
		}
		runs = append(runs, reps)
	}
	if len(runs) == 0 {
		return nil, err
	}
	cs := make(Comparisons, len(baselines))
	for b, baseline := range baselines {
		pairs := make([][2]*Report, len(runs))
		for round, reps := range runs {
			pairs[round] = [2]*Report{reps[0], reps[1+b]}
		}
		cs[b] = newComparison(o.Endpoint, baseline, pairs, floors)
	}
	return cs, err
}

// newComparison computes the ratios of the endpoint's reports to the baseline's, round by
// round, and over the floors measured after the rounds (if any).
func newComparison(endpoint, baseline string, runs [][2]*Report, floors []*FloorReport) *Comparison {
	cmp := &Comparison{Endpoint: endpoint, Baseline: baseline, Runs: runs, Floors: floors, Ratios: map[Op]RatioStats{}}
	if len(cmp.Floors) > 0 {
		cmp.FloorRatios = map[Op][2]RatioStats{}
		for _, op := range []Op{OpPodUp, OpPodDown} {
			var rs [2]RatioStats
			for round, f := range cmp.Floors {
				for i := range 2 {
					if fl := f.Ops[op].P50; fl > 0 && cmp.Runs[round][i].Ops[op].P50 > 0 {
						rs[i].PerRound = append(rs[i].PerRound, float64(cmp.Runs[round][i].Ops[op].P50)/float64(fl))
					}
				}
			}
			if len(rs[0].PerRound) > 0 && len(rs[1].PerRound) > 0 {
				rs[0].Median, rs[1].Median = median(rs[0].PerRound), median(rs[1].PerRound)
				cmp.FloorRatios[op] = rs
			}
		}
	}
	for op := range cmp.Runs[0][0].Ops {
		var rs RatioStats
		for _, pair := range cmp.Runs {
			a, b := pair[0].Ops[op], pair[1].Ops[op]
			if b.P50 > 0 {
				rs.PerRound = append(rs.PerRound, float64(a.P50)/float64(b.P50))
			}
		}
		if len(rs.PerRound) > 0 {
			rs.Median = median(rs.PerRound)
			cmp.Ratios[op] = rs
		}
	}
	cmp.Targets = cmp.targets()
	return cmp
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// WriteTable prints the comparison for people: per operation, the p50 of each side in
// each round, and the median ratio; then the targets.
func (c *Comparison) WriteTable(w io.Writer) {
	c.writeBody(w, true)
	writeTargets(w, c.Targets)
}

// writeBody is WriteTable without the targets; the endpoint's memory only with
// endpointMemory (the comparisons of one run share the endpoint's reports).
func (c *Comparison) writeBody(w io.Writer, endpointMemory bool) {
	fmt.Fprintf(w, "endpoint %s against baseline %s, %d rounds, alternating\n", c.Endpoint, c.Baseline, len(c.Runs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATION\tP50 ms (endpoint / baseline, per round)\tRATIO per round\tMEDIAN RATIO\t")
	for _, op := range slices.Sorted(maps.Keys(c.Ratios)) {
		var p50s, ratios string
		for i, pair := range c.Runs {
			if i > 0 {
				p50s += ", "
			}
			p50s += fmt.Sprintf("%.1f/%.1f", pair[0].Ops[op].P50ms, pair[1].Ops[op].P50ms)
		}
		for i, r := range c.Ratios[op].PerRound {
			if i > 0 {
				ratios += ", "
			}
			ratios += fmt.Sprintf("%.2f", r)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t\n", op, p50s, ratios, c.Ratios[op].Median)
	}
	tw.Flush()
	for i, pair := range c.Runs {
		for side, rep := range pair {
			if side == 0 && !endpointMemory {
				continue
			}
			if m := rep.Memory; m != nil {
				fmt.Fprintf(w, "round %d, %s: daemon peak RSS %.1f MiB, %d helpers, %.2f MiB per pod\n",
					i+1, rep.Runtime, m.DaemonPeakRSSMiB, m.Helpers, m.HelperRSSPerPodMiB)
				m.writePauses(w)
			}
		}
	}
	c.writeFloors(w)
}

// writeFloors prints the floor measured after each round and each side's PodUp and
// PodDown over it, if there is a floor.
func (c *Comparison) writeFloors(w io.Writer) {
	if len(c.Floors) == 0 {
		return
	}
	fmt.Fprintln(w, "floor (runc and CNI by themselves), after each round:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STEP\tP50 ms per round\tMEDIAN\t")
	for _, op := range FloorSteps {
		var p50s string
		var v []float64
		for i, f := range c.Floors {
			if i > 0 {
				p50s += ", "
			}
			p50s += fmt.Sprintf("%.1f", f.Ops[op].P50ms)
			v = append(v, f.Ops[op].P50ms)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t\n", op, p50s, median(v))
	}
	tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OPERATION\tENDPOINT / FLOOR per round\tMEDIAN\tBASELINE / FLOOR per round\tMEDIAN\t")
	for _, op := range []Op{OpPodUp, OpPodDown} {
		rs, ok := c.FloorRatios[op]
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%s\t%.2f\t\n", op, joinRatios(rs[0].PerRound), rs[0].Median, joinRatios(rs[1].PerRound), rs[1].Median)
	}
	tw.Flush()
}

func joinRatios(v []float64) string {
	s := make([]string, len(v))
	for i, r := range v {
		s[i] = fmt.Sprintf("%.2f", r)
	}
	return strings.Join(s, ", ")
}

// WriteJSON prints the comparison for machines.
func (c *Comparison) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// Comparisons are the comparisons of one run against several baselines (CompareAll).
type Comparisons []*Comparison

// Targets are the targets the comparisons measured, each once: those of the endpoint
// alone (its floor, its memory) are the same in every comparison.
func (cs Comparisons) Targets() []Target {
	var out []Target
	for _, c := range cs {
		for _, t := range c.Targets {
			if !slices.ContainsFunc(out, func(o Target) bool { return o.Name == t.Name }) {
				out = append(out, t)
			}
		}
	}
	return out
}

// WriteTable prints each comparison, then the endpoint's pod up and pod down over each
// baseline's side by side, then the targets.
func (cs Comparisons) WriteTable(w io.Writer) {
	for i, c := range cs {
		c.writeBody(w, i == 0)
		fmt.Fprintln(w)
	}
	if len(cs) == 0 {
		return
	}
	fmt.Fprintf(w, "endpoint %s over each baseline, %d rounds, one run (median of the per-round ratios):\n", cs[0].Endpoint, len(cs[0].Runs))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "BASELINE\tRUNTIME\tPodUp\tPodDown\tDAEMON PEAK RSS MiB\t")
	for _, c := range cs {
		fmt.Fprintf(tw, "%s\t%s\t%.3f\t%.3f\t%s\t\n", c.Baseline, c.Runs[0][1].Runtime, c.Ratios[OpPodUp].Median, c.Ratios[OpPodDown].Median, peakRange(c.Runs, 1))
	}
	fmt.Fprintf(tw, "(endpoint)\t%s\t\t\t%s\t\n", cs[0].Runs[0][0].Runtime, peakRange(cs[0].Runs, 0))
	tw.Flush()
	writeTargets(w, cs.Targets())
}

// peakRange is the lowest and highest daemon peak RSS of a side over the rounds.
func peakRange(runs [][2]*Report, side int) string {
	var peaks []float64
	for _, pair := range runs {
		if m := pair[side].Memory; m != nil && m.DaemonPeakRSSMiB > 0 {
			peaks = append(peaks, m.DaemonPeakRSSMiB)
		}
	}
	if len(peaks) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f-%.1f", slices.Min(peaks), slices.Max(peaks))
}

// MarshalJSON gives the comparisons with their targets once.
func (cs Comparisons) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Comparisons []*Comparison `json:"comparisons"`
		Targets     []Target      `json:"targets,omitempty"`
	}{[]*Comparison(cs), cs.Targets()})
}

// Series is each side's latencies over every round: the endpoint's, then each
// baseline's.
func (cs Comparisons) Series() []Series {
	var out []Series
	for i, c := range cs {
		s := c.Series()
		if i == 0 {
			out = append(out, s[0])
		}
		out = append(out, s[1])
	}
	return out
}
