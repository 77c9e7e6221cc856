package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ScaleOptions describe the scale workload: the node is filled with pods (Concurrency at a
// time), and at 0, Step, 2*Step, ... Pods pods already there, Samples more are brought up
// one at a time and measured, and List calls are timed over what the node holds.
type ScaleOptions struct {
	Options
	Step      int // pods between two measurements (default 100)
	Samples   int // pods brought up one at a time at each measurement (default 5)
	ListCalls int // calls of each List timed at each measurement (default 20)
	// Floor, if not nil, measures the floor (runc and CNI by themselves) at each point
	// too, so that what grows with the node's mounts, processes and cgroups for every
	// runtime can be told from what grows in the daemon.
	Floor func(context.Context) (*FloorReport, error)
}

// ScalePoint is one measurement of the scale workload.
type ScalePoint struct {
	// Existing is how many pods the node held before the samples; Records how many
	// sandboxes and containers ListPodSandbox and ListContainers returned after them.
	Existing int `json:"existing_pods"`
	Records  int `json:"records"`
	// Ops are the samples' operations (PodUp, RunPodSandbox, ...), Failed how many of
	// them failed.
	Ops    map[Op]Stats `json:"ops"`
	Failed int          `json:"failed"`
	// Lists holds the List calls' latencies, by call.
	Lists map[string]Stats `json:"lists"`
	// Memory is read after the samples.
	Memory *Memory `json:"memory,omitempty"`
	// Floor is the floor measured at this point, with a floor.
	Floor *FloorReport `json:"floor,omitempty"`
}

// ScaleReport is the scale workload's outcome.
type ScaleReport struct {
	Endpoint string       `json:"endpoint"`
	Runtime  string       `json:"runtime"`
	Points   []ScalePoint `json:"points"`
	// Fill counts the pods made between the measurements that failed.
	FillFailed int `json:"fill_failed"`
	// Down is the teardown of every pod (PodDown and the rest), with what was left.
	Down *Report `json:"down"`
}

// Scale runs the scale workload and removes everything it made, also when ctx is
// cancelled.
func Scale(ctx context.Context, o ScaleOptions) (*ScaleReport, error) {
	if o.Pods < 0 || o.Concurrency <= 0 {
		return nil, errors.New("pods must not be negative, concurrency must be positive")
	}
	if o.Step <= 0 {
		o.Step = 100
	}
	if o.Samples <= 0 {
		o.Samples = 5
	}
	if o.ListCalls <= 0 {
		o.ListCalls = 20
	}
	s, err := connect(ctx, o.Options)
	if err != nil {
		return nil, err
	}
	defer s.conn.Close()
	one := *s
	one.o.Concurrency = 1
	sr := &ScaleReport{Endpoint: o.Endpoint, Runtime: s.runtime}
	var made []upPodID
	next := 0 // the next pod's index
	for existing := 0; ; existing = min(existing+o.Step, o.Pods) {
		// Fill the node up to existing (the samples of earlier points count).
		if n := existing - next; n > 0 {
			fill := s.newReport(n)
			made = append(made, s.up(ctx, fill, next, n, o.Progress)...)
			next += n
			fill.finish()
			sr.FillFailed += fill.Failed
		}
		if ctx.Err() != nil {
			break
		}
		pt := ScalePoint{Existing: next}
		samples := one.newReport(o.Samples)
		made = append(made, one.up(ctx, samples, next, o.Samples, nil)...)
		next += o.Samples
		samples.finish()
		pt.Ops, pt.Failed = samples.Ops, samples.Failed
		pt.Lists, pt.Records, err = timeLists(ctx, s.rt, o.ListCalls)
		if err != nil {
			break
		}
		pt.Memory = readMemory(s.pid, ids(made), len(made))
		if o.Floor != nil {
			if pt.Floor, err = o.Floor(ctx); err != nil {
				break
			}
		}
		sr.Points = append(sr.Points, pt)
		if existing >= o.Pods {
			break
		}
	}
	sr.Down = s.newReport(0)
	s.cleanup(ctx, sr.Down, made)
	sr.Down.finish()
	if ctx.Err() == nil && len(sr.Down.TeardownErrors) > 0 {
		return sr, errors.Join(err, fmt.Errorf("%d pods could not be cleaned up", len(sr.Down.TeardownErrors)))
	}
	if err != nil {
		return sr, err
	}
	return sr, ctx.Err()
}

// timeLists times n calls each of ListPodSandbox and ListContainers, unfiltered, and
// returns how many records (sandboxes + containers) the last ones returned.
func timeLists(ctx context.Context, rt runtimeapi.RuntimeServiceClient, n int) (map[string]Stats, int, error) {
	var sbs, ctrs []time.Duration
	records := 0
	for range n {
		t := time.Now()
		a, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
		if err != nil {
			return nil, 0, fmt.Errorf("ListPodSandbox: %w", err)
		}
		sbs = append(sbs, time.Since(t))
		t = time.Now()
		b, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
		if err != nil {
			return nil, 0, fmt.Errorf("ListContainers: %w", err)
		}
		ctrs = append(ctrs, time.Since(t))
		records = len(a.GetItems()) + len(b.GetContainers())
	}
	return map[string]Stats{CallListPodSandbox: statsOf(sbs), CallListContainers: statsOf(ctrs)}, records, nil
}

// WriteTable prints the scale curve for people.
func (r *ScaleReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "endpoint %s (%s): one more pod, and List calls, as the node fills\n", r.Endpoint, r.Runtime)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PODS\tRECORDS\tPodUp p50 ms\tRunPodSandbox p50\tCreateContainer p50\tStartContainer p50\tFLOOR PodUp p50\tListPodSandbox p50\tListContainers p50\tDAEMON RSS MiB\tFAILED\t")
	for _, p := range r.Points {
		rss, floor := 0.0, "-"
		if p.Memory != nil {
			rss = p.Memory.DaemonRSSMiB
		}
		if p.Floor != nil {
			floor = fmt.Sprintf("%.1f", p.Floor.Ops[OpPodUp].P50ms)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%.2f\t%.2f\t%.1f\t%d\t\n", p.Existing, p.Records,
			p.Ops[OpPodUp].P50ms, p.Ops[OpRunPodSandbox].P50ms, p.Ops[OpCreateContainer].P50ms, p.Ops[OpStartContainer].P50ms,
			floor, p.Lists[CallListPodSandbox].P50ms, p.Lists[CallListContainers].P50ms, rss, p.Failed)
	}
	tw.Flush()
	if r.FillFailed > 0 {
		fmt.Fprintf(w, "pods that failed while filling the node: %d\n", r.FillFailed)
	}
	if r.Down != nil {
		fmt.Fprintf(w, "teardown: PodDown p50 %.1f ms over %d pods\n", r.Down.Ops[OpPodDown].P50ms, r.Down.Ops[OpPodDown].Count)
		for _, e := range r.Down.TeardownErrors {
			fmt.Fprintf(w, "NOT CLEANED UP: %s\n", e)
		}
	}
}
