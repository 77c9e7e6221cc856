// Package bench drives a CRI endpoint (crijournal, containerd or CRI-O) with a pod
// workload and measures it: latency percentiles per operation, pods per second, and, with a
// client timeout, how many kubelet-style retries each pod took and which errors they met.
package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Options describe a run.
type Options struct {
	Endpoint    string                // unix:///path/to.sock
	Pods        int                   // how many pods
	Concurrency int                   // how many at a time
	Image       string                // with an image, a container is created and started in each pod
	Command     []string              // the container's command (default: sleep 3600)
	Timeout     time.Duration         // client timeout per request; 0: none. With one, failed requests are retried with the same name
	MaxRetries  int                   // with a Timeout, retries per request before the pod counts as failed (default 100)
	Prefix      string                // pod name prefix, so runs do not collide
	Progress    func(done, total int) // called with 0 when the pods start, then once per pod up (or failed)
}

// Op names a measured operation.
type Op string

// Operations measured.
const (
	OpRunPodSandbox    Op = "RunPodSandbox"
	OpCreateContainer  Op = "CreateContainer"
	OpStartContainer   Op = "StartContainer"
	OpStopPodSandbox   Op = "StopPodSandbox"
	OpRemovePodSandbox Op = "RemovePodSandbox"
	OpPodUp            Op = "PodUp" // RunPodSandbox (+ CreateContainer + StartContainer), retries included
)

// Stats summarise one operation's latencies.
type Stats struct {
	Count              int           `json:"count"`
	P50, P90, P99, Max time.Duration `json:"-"`
	P50ms              float64       `json:"p50_ms"`
	P90ms              float64       `json:"p90_ms"`
	P99ms              float64       `json:"p99_ms"`
	MaxMs              float64       `json:"max_ms"`
}

// PodResult is what one pod went through.
type PodResult struct {
	Name    string   `json:"name"`
	Retries int      `json:"retries"`
	Errors  []string `json:"errors,omitempty"`
	Err     string   `json:"error,omitempty"`
}

// Report is a run's outcome.
type Report struct {
	Endpoint      string        `json:"endpoint"`
	Runtime       string        `json:"runtime"`
	Pods          int           `json:"pods"`
	Concurrency   int           `json:"concurrency"`
	ClientTimeout string        `json:"client_timeout,omitempty"`
	Ops           map[Op]Stats  `json:"ops"`
	PodsPerSecond float64       `json:"pods_per_second"`
	TimeToAllPods time.Duration `json:"-"`
	TimeToAllMs   float64       `json:"time_to_all_pods_ms"`
	Failed        int           `json:"failed"`
	RetriesTotal  int           `json:"retries_total"`
	// Swept counts pods that no answered request returned, found by their label after
	// the teardown (made by an abandoned or interrupted request) and removed.
	Swept int `json:"swept"`
	// TeardownErrors lists what could not be stopped or removed: left on the node.
	TeardownErrors []string       `json:"teardown_errors,omitempty"`
	ErrorKinds     map[string]int `json:"error_kinds,omitempty"`
	PerPod         []PodResult    `json:"per_pod,omitempty"`
	samples        map[Op][]time.Duration
	mu             sync.Mutex
}

func (r *Report) add(op Op, d time.Duration) {
	r.mu.Lock()
	r.samples[op] = append(r.samples[op], d)
	r.mu.Unlock()
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p)
	return sorted[i]
}

func (r *Report) finish() {
	r.Ops = map[Op]Stats{}
	for op, s := range r.samples {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		st := Stats{Count: len(s), P50: percentile(s, 0.5), P90: percentile(s, 0.9), P99: percentile(s, 0.99), Max: s[len(s)-1]}
		st.P50ms, st.P90ms, st.P99ms, st.MaxMs = ms(st.P50), ms(st.P90), ms(st.P99), ms(st.Max)
		r.Ops[op] = st
	}
	r.TimeToAllMs = ms(r.TimeToAllPods)
	r.ErrorKinds = map[string]int{}
	for _, p := range r.PerPod {
		r.RetriesTotal += p.Retries
		for _, e := range p.Errors {
			r.ErrorKinds[classify(e)]++
		}
		if p.Err != "" {
			r.Failed++
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// classify groups error messages so a report can count them.
func classify(msg string) string {
	switch {
	case strings.Contains(msg, "is reserved"):
		return "name is reserved"
	case strings.Contains(msg, "DeadlineExceeded"), strings.Contains(msg, "deadline exceeded"):
		return "DeadlineExceeded"
	case strings.Contains(msg, "AlreadyExists"):
		return "AlreadyExists"
	}
	if len(msg) > 60 {
		msg = msg[:60]
	}
	return msg
}

// Run executes the workload and removes everything it made, also when ctx is cancelled.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Pods <= 0 || o.Concurrency <= 0 {
		return nil, errors.New("pods and concurrency must be positive")
	}
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("bench-%d", time.Now().Unix())
	}
	if len(o.Command) == 0 {
		o.Command = []string{"sleep", "3600"}
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 100
	}
	conn, err := grpc.NewClient(o.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", o.Endpoint, err)
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	v, err := rt.Version(vctx, &runtimeapi.VersionRequest{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("version of %s: %w", o.Endpoint, err)
	}
	rep := &Report{Endpoint: o.Endpoint, Runtime: v.RuntimeName + " " + v.RuntimeVersion, Pods: o.Pods,
		Concurrency: o.Concurrency, samples: map[Op][]time.Duration{}, PerPod: make([]PodResult, o.Pods)}
	if o.Timeout > 0 {
		rep.ClientTimeout = o.Timeout.String()
	}

	var made sync.Map // pod index -> sandbox ID
	work := make(chan int)
	var wg sync.WaitGroup
	var done int
	var doneMu sync.Mutex
	start := time.Now()
	if o.Progress != nil {
		o.Progress(0, o.Pods)
	}
	for range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				res, id := upPod(ctx, rt, o, i, rep)
				rep.PerPod[i] = res
				if id != "" {
					made.Store(i, id)
				}
				doneMu.Lock()
				done++
				if o.Progress != nil {
					o.Progress(done, o.Pods)
				}
				doneMu.Unlock()
			}
		}()
	}
	for i := range o.Pods {
		select {
		case work <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(work)
	wg.Wait()
	rep.TimeToAllPods = time.Since(start)
	up := 0
	for _, p := range rep.PerPod {
		if p.Name != "" && p.Err == "" {
			up++
		}
	}
	rep.PodsPerSecond = float64(up) / rep.TimeToAllPods.Seconds()

	// Tear down, also after an interrupt: with a context of its own.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer ccancel()
	var ids []string
	made.Range(func(_, v any) bool { ids = append(ids, v.(string)); return true })
	rep.teardown(cctx, rt, ids, o.Concurrency, true)
	// Then what no answered request returned: pods made by requests that were abandoned
	// (client timeout) or interrupted, which the runtime finished all the same.
	list, err := rt.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{RunLabel: o.Prefix}}})
	if err != nil {
		rep.TeardownErrors = append(rep.TeardownErrors, fmt.Sprintf("list the pods left: %v", err))
	} else {
		ids = ids[:0]
		for _, sb := range list.GetItems() {
			ids = append(ids, sb.GetId())
		}
		rep.Swept = len(ids)
		rep.teardown(cctx, rt, ids, o.Concurrency, false)
	}
	rep.finish()
	if ctx.Err() == nil && len(rep.TeardownErrors) > 0 {
		return rep, fmt.Errorf("%d pods could not be cleaned up", len(rep.TeardownErrors))
	}
	return rep, ctx.Err()
}

// RunLabel is the label key every pod of a run carries; its value is the run's prefix.
const RunLabel = "io.crijournal.bench"

// teardown stops and removes the sandboxes ids, concurrency at a time, measuring the
// calls when measure is set, and recording what fails.
func (r *Report) teardown(ctx context.Context, rt runtimeapi.RuntimeServiceClient, ids []string, concurrency int, measure bool) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				t := time.Now()
				_, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: id})
				if err == nil && measure {
					r.add(OpStopPodSandbox, time.Since(t))
				}
				t = time.Now()
				if err == nil {
					_, err = rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id})
				}
				if err == nil && measure {
					r.add(OpRemovePodSandbox, time.Since(t))
				}
				if err != nil {
					r.mu.Lock()
					r.TeardownErrors = append(r.TeardownErrors, fmt.Sprintf("%s: %v", id, err))
					r.mu.Unlock()
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
}

// upPod brings one pod up, kubelet-style: a request that exceeds the client timeout is
// abandoned, and a failed request is retried with the same name until it succeeds (at
// most MaxRetries times).
func upPod(ctx context.Context, rt runtimeapi.RuntimeServiceClient, o Options, i int, rep *Report) (PodResult, string) {
	name := fmt.Sprintf("%s-%d", o.Prefix, i)
	res := PodResult{Name: name}
	cfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "bench", Uid: fmt.Sprintf("%s-uid-%d", o.Prefix, i)},
		Hostname: name,
		Labels:   map[string]string{RunLabel: o.Prefix},
		// As a kubelet sends it for a pod without shareProcessNamespace.
		Linux: &runtimeapi.LinuxPodSandboxConfig{SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	start := time.Now()
	var id string
	retry := func(op Op, call func(context.Context) error) error {
		attempts := 0
		for {
			rctx, cancel := ctx, context.CancelFunc(func() {})
			if o.Timeout > 0 {
				rctx, cancel = context.WithTimeout(ctx, o.Timeout)
			}
			t := time.Now()
			err := call(rctx)
			cancel()
			if err == nil {
				rep.add(op, time.Since(t))
				return nil
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			res.Errors = append(res.Errors, status.Convert(err).Code().String()+": "+status.Convert(err).Message())
			if o.Timeout == 0 || attempts >= o.MaxRetries {
				return err
			}
			attempts++
			res.Retries++
			time.Sleep(retryDelay(err))
		}
	}
	err := retry(OpRunPodSandbox, func(c context.Context) error {
		resp, err := rt.RunPodSandbox(c, &runtimeapi.RunPodSandboxRequest{Config: cfg})
		if err == nil {
			id = resp.PodSandboxId
		}
		return err
	})
	if err == nil && o.Image != "" {
		var cid string
		err = retry(OpCreateContainer, func(c context.Context) error {
			resp, err := rt.CreateContainer(c, &runtimeapi.CreateContainerRequest{PodSandboxId: id, SandboxConfig: cfg,
				Config: &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
					Image: &runtimeapi.ImageSpec{Image: o.Image}, Command: o.Command,
					Linux: &runtimeapi.LinuxContainerConfig{SecurityContext: &runtimeapi.LinuxContainerSecurityContext{
						NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
					}}}})
			if err == nil {
				cid = resp.ContainerId
			}
			return err
		})
		if err == nil {
			err = retry(OpStartContainer, func(c context.Context) error {
				_, err := rt.StartContainer(c, &runtimeapi.StartContainerRequest{ContainerId: cid})
				if err != nil && running(ctx, rt, cid) {
					// An earlier attempt started it and its answer was lost (a
					// timeout, a runtime restart): the kubelet sees it running at its
					// next sync and moves on, rather than start it again.
					return nil
				}
				return err
			})
		}
	}
	if err != nil {
		res.Err = err.Error()
	} else {
		rep.add(OpPodUp, time.Since(start))
	}
	return res, id
}

// running reports whether the runtime says the container is running.
func running(ctx context.Context, rt runtimeapi.RuntimeServiceClient, id string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := rt.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id})
	return err == nil && resp.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
}

// retryDelay is the pause before the retry of a request that failed with err: short after
// a timeout or a name still reserved by the abandoned attempt (the kubelet's next sync
// comes soon), longer after any other failure, as a kubelet backs off.
func retryDelay(err error) time.Duration {
	if retryable(err) {
		return 100 * time.Millisecond
	}
	return time.Second
}

// retryable reports whether err is what an abandoned attempt leaves behind: a timeout, or
// the name still reserved by the abandoned attempt.
func retryable(err error) bool {
	msg := err.Error()
	return slices.ContainsFunc([]string{"DeadlineExceeded", "deadline exceeded", "is reserved", "Canceled"},
		func(s string) bool { return strings.Contains(msg, s) })
}
