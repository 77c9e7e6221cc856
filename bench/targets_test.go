package bench

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// verdicts renders targets as "name value met|NOT MET" lines, for comparing with a want.
func verdicts(targets []Target) []string {
	var out []string
	for _, t := range targets {
		v := "met"
		if !t.Met {
			v = "NOT MET"
		}
		out = append(out, fmt.Sprintf("%s %.2f %s", t.Name, t.Value, v))
	}
	return out
}

func TestComparisonTargets(t *testing.T) {
	mem := func(peak, conmon float64) *Memory {
		return &Memory{DaemonPeakRSSMiB: peak, Helpers: 20, HelperRSSPerPodMiB: conmon}
	}
	// comparison builds a two-round comparison of crijournal (or endpoint) against
	// baseline, with the given medians.
	comparison := func(endpoint, baseline string, pods, concurrency int, upFloor, downFloor, upRatio float64, mems [2]*Memory) *Comparison {
		c := &Comparison{Ratios: map[Op]RatioStats{OpPodUp: {Median: upRatio}}}
		for _, m := range mems {
			c.Runs = append(c.Runs, [2]*Report{
				{Runtime: endpoint, Pods: pods, Concurrency: concurrency, Memory: m},
				{Runtime: baseline, Pods: pods, Concurrency: concurrency},
			})
		}
		if upFloor > 0 {
			c.FloorRatios = map[Op][2]RatioStats{OpPodUp: {{Median: upFloor}, {Median: 3}}, OpPodDown: {{Median: downFloor}, {Median: 6}}}
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *Comparison
		want []string
	}{
		{"four at a time against containerd 2.x, every target met (at the limit is met)",
			comparison("crijournal 6d66239", "containerd 2.4.2+unknown", 20, 4, 1.10, 1.11, 0.45, [2]*Memory{mem(31.7, 3.95), mem(32.0, 3.97)}),
			[]string{"pod up / floor, 4 at a time 1.10 met", "pod down / floor, 4 at a time 1.11 met",
				"pod up / containerd 2.x, 4 at a time 0.45 met", "daemon peak RSS, 20 pods 32.00 met", "conmon RSS per pod 3.96 met"}},
		{"one at a time, misses",
			comparison("crijournal x", "containerd v2.1.0", 20, 1, 1.11, 1.51, 0.46, [2]*Memory{mem(32.1, 4.01), mem(31.0, 4.03)}),
			[]string{"pod up / floor, one at a time 1.11 NOT MET", "pod down / floor, one at a time 1.51 NOT MET",
				"pod up / containerd 2.x, one at a time 0.46 NOT MET", "daemon peak RSS, 20 pods 32.10 NOT MET", "conmon RSS per pod 4.02 NOT MET"}},
		{"containerd 1.6 is reported, not the anchor: no pod up target against it",
			comparison("crijournal x", "containerd 1.6.20~ds1", 20, 1, 1.05, 0.7, 0.33, [2]*Memory{mem(30, 3.9), mem(30, 3.9)}),
			[]string{"pod up / floor, one at a time 1.05 met", "pod down / floor, one at a time 0.70 met",
				"daemon peak RSS, 20 pods 30.00 met", "conmon RSS per pod 3.90 met"}},
		{"two at a time has no speed targets; RSS is judged with 20 pods only",
			comparison("crijournal x", "containerd 1.6.20", 10, 2, 1.2, 1.0, 0.4, [2]*Memory{mem(30, 3.9), mem(30, 3.9)}),
			[]string{"conmon RSS per pod 3.90 met"}},
		{"against another crijournal (a setting's A/B): no containerd target",
			comparison("crijournal x", "crijournal y", 20, 4, 0, 0, 1.1, [2]*Memory{nil, nil}),
			nil},
		{"containerd as the endpoint: its figures are not held to crijournal's targets",
			comparison("containerd 1.6.20", "crijournal x", 20, 4, 3, 6, 2.2, [2]*Memory{mem(55, 13), mem(55, 13)}),
			nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := verdicts(tc.c.targets()); !slices.Equal(got, tc.want) {
				t.Errorf("targets:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestComparisonsTargets: against containerd 1.6 and 2.x in one run, the endpoint's own
// targets (floor, memory) come once, and pod up is judged against 2.x only.
func TestComparisonsTargets(t *testing.T) {
	mem := &Memory{DaemonPeakRSSMiB: 31, Helpers: 20, HelperRSSPerPodMiB: 3.9}
	up := func(ratio float64) map[Op]RatioStats { return map[Op]RatioStats{OpPodUp: {Median: ratio}} }
	endpoint := &Report{Runtime: "crijournal x", Pods: 20, Concurrency: 1, Memory: mem}
	floors := map[Op][2]RatioStats{OpPodUp: {{Median: 1.08}, {Median: 3}}, OpPodDown: {{Median: 0.7}, {Median: 4}}}
	var cs Comparisons
	for _, b := range []struct {
		runtime string
		ratio   float64
	}{{"containerd 1.6.20~ds1", 0.35}, {"containerd 2.4.2+unknown", 0.44}} {
		c := &Comparison{Ratios: up(b.ratio), FloorRatios: floors,
			Runs: [][2]*Report{{endpoint, {Runtime: b.runtime, Pods: 20, Concurrency: 1}}}}
		c.Targets = c.targets()
		cs = append(cs, c)
	}
	want := []string{"pod up / floor, one at a time 1.08 met", "pod down / floor, one at a time 0.70 met",
		"daemon peak RSS, 20 pods 31.00 met", "conmon RSS per pod 3.90 met", "pod up / containerd 2.x, one at a time 0.44 met"}
	if got := verdicts(cs.Targets()); !slices.Equal(got, want) {
		t.Errorf("targets:\n got %q\nwant %q", got, want)
	}
}

func TestIsContainerd2(t *testing.T) {
	for runtime, want := range map[string]bool{
		"containerd 2.4.2+unknown": true, "containerd v2.1.0": true, "containerd 10.0": true,
		"containerd 1.6.20~ds1": false, "containerd v1.7.27": false, "containerd": false,
		"crijournal 2.0": false, "cri-o 1.33.0": false, "containerd x.y": false,
	} {
		if got := isContainerd2(runtime); got != want {
			t.Errorf("isContainerd2(%q) = %v, want %v", runtime, got, want)
		}
	}
}

func TestIdleTargets(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    IdleReport
		want []string
	}{
		{"under 0.5 % with 100 pods", IdleReport{Runtime: "crijournal x", PodsUp: 100, Seconds: 60, CPUPercent: 0.49},
			[]string{"idle CPU, 100 pods 0.49 met"}},
		{"0.5 % is not under 0.5 %", IdleReport{Runtime: "crijournal x", PodsUp: 100, Seconds: 60, CPUPercent: 0.5},
			[]string{"idle CPU, 100 pods 0.50 NOT MET"}},
		{"under the old 1 % is not enough (issue 52)", IdleReport{Runtime: "crijournal x", PodsUp: 100, Seconds: 60, CPUPercent: 0.97},
			[]string{"idle CPU, 100 pods 0.97 NOT MET"}},
		{"another number of pods: no CPU target; the pause processes' memory",
			IdleReport{Runtime: "crijournal x", PodsUp: 20, Seconds: 10, CPUPercent: 0.2,
				Memory: &Memory{DaemonPeakRSSMiB: 30, Helpers: 20, HelperRSSPerPodMiB: 3.9, Pauses: 20, PauseRSSMiB: 0.68}},
			[]string{"daemon peak RSS, 20 pods 30.00 met", "conmon RSS per pod 3.90 met", "pause process RSS 0.68 met"}},
		{"containerd", IdleReport{Runtime: "containerd 1.6.20", PodsUp: 100, Seconds: 60, CPUPercent: 1.8}, nil},
		{"never polled", IdleReport{Runtime: "crijournal x", PodsUp: 100}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := verdicts(tc.r.targets()); !slices.Equal(got, tc.want) {
				t.Errorf("targets:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestWithFloorTargets(t *testing.T) {
	for _, tc := range []struct {
		name     string
		up, down time.Duration // the daemon's pod up and down p50, against the floor's 100 and 90
		want     []string
	}{
		{"at 1.10 the floor, met", 110, 60, []string{"pod up / floor, one at a time 1.10 met", "pod down / floor, one at a time 0.67 met"}},
		{"the old 1.24, no longer met (issue 52)", 124, 60, []string{"pod up / floor, one at a time 1.24 NOT MET", "pod down / floor, one at a time 0.67 met"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := &Report{Runtime: "crijournal x", Pods: 20, Concurrency: 1, Ops: map[Op]Stats{OpPodUp: {P50: tc.up}, OpPodDown: {P50: tc.down}}}
			floor := &FloorReport{Ops: map[Op]Stats{OpPodUp: {P50: 100}, OpPodDown: {P50: 90}}}
			if got := verdicts(NewWithFloor(rep, floor).Targets); !slices.Equal(got, tc.want) {
				t.Errorf("targets:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestWriteTargets(t *testing.T) {
	var b bytes.Buffer
	writeTargets(&b, nil)
	if b.Len() != 0 {
		t.Errorf("no targets printed %q, want nothing", b.String())
	}
	writeTargets(&b, []Target{newTarget("idle CPU, 100 pods", 1.32, TargetIdlePercent, "% of a core", true),
		newTarget("pod up / floor, 4 at a time", 1.0951, TargetPodUpFloorFour, "x", false),
		newTarget("pod up / containerd, one at a time", 0.4537, TargetPodUpContainerd, "x", false)})
	out := b.String()
	for _, want := range []string{"idle CPU, 100 pods  1.320  < 0.50 % of a core  NOT MET", "pod up / floor, 4 at a time  1.095  ≤ 1.10 x  met",
		"pod up / containerd, one at a time  0.454  ≤ 0.45 x  NOT MET"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("printed:\n%s\nwant a line %q", out, want)
		}
	}
}

// TestComparisonPrintsTargetsOnce: a comparison's table ends with its targets once, with a
// floor or without one.
func TestComparisonPrintsTargetsOnce(t *testing.T) {
	for _, withFloor := range []bool{false, true} {
		c := &Comparison{Ratios: map[Op]RatioStats{OpPodUp: {PerRound: []float64{0.4}, Median: 0.4}},
			Runs: [][2]*Report{{{Runtime: "crijournal x", Pods: 20, Concurrency: 4, Ops: map[Op]Stats{}}, {Runtime: "containerd 2.4.2+unknown", Ops: map[Op]Stats{}}}}}
		if withFloor {
			c.Floors = []*FloorReport{{Ops: map[Op]Stats{}}}
			c.FloorRatios = map[Op][2]RatioStats{OpPodUp: {{PerRound: []float64{1.2}, Median: 1.2}, {PerRound: []float64{3}, Median: 3}}}
		}
		c.Targets = c.targets()
		var b bytes.Buffer
		c.WriteTable(&b)
		out := b.String()
		if n := strings.Count(out, "targets ("); n != 1 || !strings.HasSuffix(strings.TrimSpace(out), "met") {
			t.Errorf("with a floor %v, the targets printed %d times, not last:\n%s", withFloor, n, out)
		}
		if got := strings.Contains(out, "floor (runc and CNI"); got != withFloor {
			t.Errorf("with a floor %v, the floor printed %v:\n%s", withFloor, got, out)
		}
	}
}
