package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/prometheus/procfs"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// IdleOptions describe the idle workload: Pods pods are brought up (with Image, each with
// a running container), then polled as a kubelet does for Duration while the daemon's
// CPU time is read from /proc.
type IdleOptions struct {
	Options
	Duration time.Duration // how long to poll (default 60s)
	// RelistEvery is the period of ListPodSandbox and ListContainers (the kubelet's PLEG
	// relist; default 1s); StatusEvery that of ContainerStatus and PodSandboxStatus of
	// every pod and container, of ListContainerStats, ListPodSandboxMetrics and
	// ImageFsInfo (the eviction manager's stats), and of Version (the node status; default
	// 10s); RuntimeStatusEvery that of Status (the kubelet's runtime health check; default
	// 5s); ImagesEvery that of ListImages (the image manager's cache; default 30s).
	RelistEvery, StatusEvery, RuntimeStatusEvery, ImagesEvery time.Duration
}

// Poll calls made by the idle workload.
const (
	CallListPodSandbox     = "ListPodSandbox"
	CallListContainers     = "ListContainers"
	CallPodSandboxStatus   = "PodSandboxStatus"
	CallContainerStatus    = "ContainerStatus"
	CallListContainerStats = "ListContainerStats"
	// CallListPodSandboxMetrics is what the kubelet calls for /metrics/cadvisor with
	// PodAndContainerStatsFromCRI; what it costs depends on the daemon's
	// included_pod_metrics.
	CallListPodSandboxMetrics = "ListPodSandboxMetrics"
	// CallStatus, CallVersion, CallImageFsInfo and CallListImages are the kubelet's
	// other periodic calls: its runtime health check, the node status's version, the
	// eviction manager's image filesystem stats and the image manager's cache.
	CallStatus      = "Status"
	CallVersion     = "Version"
	CallImageFsInfo = "ImageFsInfo"
	CallListImages  = "ListImages"
)

// IdleReport is the idle workload's outcome.
type IdleReport struct {
	Endpoint string `json:"endpoint"`
	Runtime  string `json:"runtime"`
	Pods     int    `json:"pods"`
	PodsUp   int    `json:"pods_up"`
	// DaemonPID is the process measured; CPUSeconds its user + system time over the
	// polling (not its children's: conmon and plugins are processes of their own), and
	// CPUPercent that over the wall time, in % of one core.
	DaemonPID  int     `json:"daemon_pid"`
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpu_seconds"`
	CPUPercent float64 `json:"cpu_percent_of_one_core"`
	// Memory is read at the end of the polling.
	Memory *Memory `json:"memory,omitempty"`
	// Calls holds each poll call's latency, and Errors the calls that failed, by call,
	// with the first error of each in FirstErrors.
	Calls       map[string]Stats  `json:"calls"`
	Errors      map[string]int    `json:"errors,omitempty"`
	FirstErrors map[string]string `json:"first_errors,omitempty"`
	// Up is the report of bringing the pods up and down.
	Up *Report `json:"up"`
	// Targets are the targets the workload measured (targets.go).
	Targets []Target `json:"targets,omitempty"`
}

// Idle runs the idle workload and removes everything it made, also when ctx is
// cancelled. It needs the daemon's process (o.DaemonPID, or the socket's peer): the
// endpoint must be local.
func Idle(ctx context.Context, o IdleOptions) (*IdleReport, error) {
	if o.Duration <= 0 {
		o.Duration = time.Minute
	}
	if o.RelistEvery <= 0 {
		o.RelistEvery = time.Second
	}
	if o.StatusEvery <= 0 {
		o.StatusEvery = 10 * time.Second
	}
	if o.RuntimeStatusEvery <= 0 {
		o.RuntimeStatusEvery = 5 * time.Second
	}
	if o.ImagesEvery <= 0 {
		o.ImagesEvery = 30 * time.Second
	}
	pid := daemonPID(o.Options)
	if pid == 0 {
		return nil, fmt.Errorf("idle workload on %s: the daemon's PID is unknown (give --daemon-pid)", o.Endpoint)
	}
	o.DaemonPID = pid
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	ir := &IdleReport{Endpoint: o.Endpoint, Pods: o.Pods, DaemonPID: pid}
	rep, err := run(ctx, o.Options, func(ctx context.Context, conn grpc.ClientConnInterface, pods []upPodID) error {
		ir.PodsUp = len(pods)
		before, err := readUsage(fs, pid)
		if err != nil {
			return fmt.Errorf("idle workload: read the daemon's usage: %w", err)
		}
		start := time.Now()
		calls := poll(ctx, runtimeapi.NewRuntimeServiceClient(conn), runtimeapi.NewImageServiceClient(conn), o)
		ir.Seconds = time.Since(start).Seconds()
		after, err := readUsage(fs, pid)
		if err != nil {
			return fmt.Errorf("idle workload: read the daemon's usage: %w", err)
		}
		ir.CPUSeconds = after.CPUSeconds - before.CPUSeconds
		ir.CPUPercent = 100 * ir.CPUSeconds / ir.Seconds
		ir.Memory = readMemory(pid, ids(pods), len(pods))
		ir.Calls, ir.Errors, ir.FirstErrors = calls.stats()
		return ctx.Err()
	})
	if rep != nil {
		ir.Up, ir.Runtime = rep, rep.Runtime
	}
	if err != nil {
		return ir, err
	}
	if ir.Seconds == 0 {
		return ir, errors.New("idle workload: the pods never came up")
	}
	ir.Targets = ir.targets()
	return ir, nil
}

// callSamples collects the poller's call latencies and errors.
type callSamples struct {
	mu      sync.Mutex
	samples map[string][]time.Duration
	errors  map[string]int
	first   map[string]string
}

func (c *callSamples) add(call string, t time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.errors[call] == 0 {
			c.first[call] = err.Error()
		}
		c.errors[call]++
		return
	}
	c.samples[call] = append(c.samples[call], time.Since(t))
}

func (c *callSamples) stats() (map[string]Stats, map[string]int, map[string]string) {
	out := map[string]Stats{}
	for call, s := range c.samples {
		out[call] = statsOf(s)
	}
	if len(c.errors) == 0 {
		return out, nil, nil
	}
	return out, c.errors, c.first
}

// statsOf summarises the durations s (sorting them).
func statsOf(s []time.Duration) Stats {
	if len(s) == 0 {
		return Stats{}
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	st := Stats{Count: len(s), P50: percentile(s, 0.5), P90: percentile(s, 0.9), P99: percentile(s, 0.99), Max: s[len(s)-1]}
	st.P50ms, st.P90ms, st.P99ms, st.MaxMs = ms(st.P50), ms(st.P90), ms(st.P99), ms(st.Max)
	return st
}

// poll calls the runtime as a kubelet does, for o.Duration: every relist, ListPodSandbox
// and ListContainers; every status period, PodSandboxStatus of every sandbox and
// ContainerStatus of every container those lists returned, ListContainerStats,
// ListPodSandboxMetrics, ImageFsInfo and Version; every runtime status period, Status;
// every image period, ListImages. The first round of each comes at once. One call at a
// time, as the kubelet's loops are sequential; a call that fails is counted and the
// polling goes on. A call under way when the polling ends is finished (and counted):
// calls have a timeout of their own, as the kubelet's do, not the end of the polling.
func poll(ctx context.Context, rt runtimeapi.RuntimeServiceClient, img runtimeapi.ImageServiceClient, o IdleOptions) *callSamples {
	d, relistEvery, statusEvery := o.Duration, o.RelistEvery, o.StatusEvery
	c := &callSamples{samples: map[string][]time.Duration{}, errors: map[string]int{}, first: map[string]string{}}
	end := time.Now().Add(d)
	over := func() bool { return ctx.Err() != nil || !time.Now().Before(end) }
	stop := time.NewTimer(d)
	defer stop.Stop()
	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		return f(cctx)
	}
	relist := time.NewTicker(relistEvery)
	defer relist.Stop()
	status := time.NewTicker(statusEvery)
	defer status.Stop()
	runtimeStatus := time.NewTicker(o.RuntimeStatusEvery)
	defer runtimeStatus.Stop()
	images := time.NewTicker(o.ImagesEvery)
	defer images.Stop()
	// timed makes the call f, named name, and counts it, unless the polling is over.
	timed := func(name string, f func(context.Context) error) {
		if over() {
			return
		}
		t := time.Now()
		err := call(f)
		if ctx.Err() != nil {
			return
		}
		c.add(name, t, err)
	}
	health := func() {
		timed(CallStatus, func(ctx context.Context) error {
			_, err := rt.Status(ctx, &runtimeapi.StatusRequest{})
			return err
		})
	}
	listImages := func() {
		timed(CallListImages, func(ctx context.Context) error {
			_, err := img.ListImages(ctx, &runtimeapi.ListImagesRequest{})
			return err
		})
	}
	var sandboxes, containers []string
	list := func() {
		t := time.Now()
		var sbs *runtimeapi.ListPodSandboxResponse
		err := call(func(ctx context.Context) (err error) {
			sbs, err = rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
			return err
		})
		if ctx.Err() != nil {
			return
		}
		c.add(CallListPodSandbox, t, err)
		if err == nil {
			sandboxes = sandboxes[:0]
			for _, sb := range sbs.GetItems() {
				sandboxes = append(sandboxes, sb.GetId())
			}
		}
		t = time.Now()
		var ctrs *runtimeapi.ListContainersResponse
		err = call(func(ctx context.Context) (err error) {
			ctrs, err = rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
			return err
		})
		if ctx.Err() != nil {
			return
		}
		c.add(CallListContainers, t, err)
		if err == nil {
			containers = containers[:0]
			for _, ctr := range ctrs.GetContainers() {
				containers = append(containers, ctr.GetId())
			}
		}
	}
	statuses := func() {
		for _, id := range sandboxes {
			if over() {
				return
			}
			t := time.Now()
			err := call(func(ctx context.Context) error {
				_, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id})
				return err
			})
			if ctx.Err() != nil {
				return
			}
			c.add(CallPodSandboxStatus, t, err)
		}
		for _, id := range containers {
			if over() {
				return
			}
			t := time.Now()
			err := call(func(ctx context.Context) error {
				_, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
				return err
			})
			if ctx.Err() != nil {
				return
			}
			c.add(CallContainerStatus, t, err)
		}
		if over() {
			return
		}
		t := time.Now()
		err := call(func(ctx context.Context) error {
			_, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{})
			return err
		})
		if ctx.Err() != nil {
			return
		}
		c.add(CallListContainerStats, t, err)
		if over() {
			return
		}
		t = time.Now()
		err = call(func(ctx context.Context) error {
			_, err := rt.ListPodSandboxMetrics(ctx, &runtimeapi.ListPodSandboxMetricsRequest{})
			return err
		})
		if ctx.Err() != nil {
			return
		}
		c.add(CallListPodSandboxMetrics, t, err)
		timed(CallImageFsInfo, func(ctx context.Context) error {
			_, err := img.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{})
			return err
		})
		timed(CallVersion, func(ctx context.Context) error {
			_, err := rt.Version(ctx, &runtimeapi.VersionRequest{})
			return err
		})
	}
	health()
	list()
	statuses()
	listImages()
	for {
		select {
		case <-ctx.Done():
			return c
		case <-stop.C:
			return c
		case <-relist.C:
			list()
		case <-status.C:
			statuses()
		case <-runtimeStatus.C:
			health()
		case <-images.C:
			listImages()
		}
	}
}

// WriteTable prints the idle report for people.
func (r *IdleReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "endpoint %s (%s): %d of %d pods up, polled kubelet-style for %.0f s\n", r.Endpoint, r.Runtime, r.PodsUp, r.Pods, r.Seconds)
	fmt.Fprintf(w, "daemon (pid %d) CPU: %.2f s, %.2f %% of one core\n", r.DaemonPID, r.CPUSeconds, r.CPUPercent)
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "daemon RSS %.1f MiB, peak %.1f MiB; %d helper processes, %.2f MiB per pod\n",
			m.DaemonRSSMiB, m.DaemonPeakRSSMiB, m.Helpers, m.HelperRSSPerPodMiB)
		m.writePauses(w)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "CALL\tCOUNT\tERRORS\tP50 ms\tP90 ms\tP99 ms\tMAX ms\t")
	for _, call := range slices.Sorted(maps.Keys(r.Calls)) {
		s := r.Calls[call]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t\n", call, s.Count, r.Errors[call], s.P50ms, s.P90ms, s.P99ms, s.MaxMs)
	}
	for _, call := range slices.Sorted(maps.Keys(r.Errors)) {
		if _, ok := r.Calls[call]; !ok {
			fmt.Fprintf(tw, "%s\t0\t%d\t\t\t\t\t\n", call, r.Errors[call])
		}
	}
	tw.Flush()
	for _, call := range slices.Sorted(maps.Keys(r.FirstErrors)) {
		fmt.Fprintf(w, "  first error of %s: %s\n", call, r.FirstErrors[call])
	}
	if r.Up != nil {
		r.Up.WriteTable(w)
	}
	writeTargets(w, r.Targets)
}
