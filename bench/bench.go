// Package bench drives a CRI endpoint (crijournal, containerd or CRI-O) with a pod
// workload and measures it: latency percentiles per operation, pods per second, and, with a
// client timeout, how many kubelet-style retries each pod took and which errors they met.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
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
	// DaemonPID is the process whose CPU time and memory are read from /proc: 0 finds it
	// from the socket's peer credentials, -1 reads nothing (a remote endpoint).
	DaemonPID int
	// SharePID makes the pods share one pid namespace among their containers (pid POD,
	// as a pod with shareProcessNamespace: true), where crijournal runs a pause process
	// per pod (containerd a pause container). Default: pid CONTAINER, as a kubelet's pods.
	SharePID bool
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
	OpPodUp            Op = "PodUp"   // RunPodSandbox (+ CreateContainer + StartContainer), retries included
	OpPodDown          Op = "PodDown" // StopPodSandbox + RemovePodSandbox
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
	// RemovalsSettled is how long after the teardown the runtime still had removals
	// under way, by its verbose Status (PendingRemovalsInfo; crijournal deletes a
	// container's root filesystem after its removal has answered): the run waits for
	// them, so that they do not weigh on what is measured next.
	RemovalsSettled   time.Duration `json:"-"`
	RemovalsSettledMs float64       `json:"removals_settled_ms,omitempty"`
	// TeardownErrors lists what could not be stopped or removed: left on the node.
	TeardownErrors []string       `json:"teardown_errors,omitempty"`
	ErrorKinds     map[string]int `json:"error_kinds,omitempty"`
	PerPod         []PodResult    `json:"per_pod,omitempty"`
	// Memory, read from /proc once every pod is up (when the daemon is local).
	Memory  *Memory `json:"memory,omitempty"`
	samples map[Op][]time.Duration
	mu      sync.Mutex
}

// Memory is what the daemon and its helpers hold, read from /proc.
type Memory struct {
	DaemonPID int `json:"daemon_pid"`
	// DaemonPeakRSSMiB is the daemon's VmHWM: its peak resident memory since it started.
	DaemonPeakRSSMiB float64 `json:"daemon_peak_rss_mib"`
	DaemonRSSMiB     float64 `json:"daemon_rss_mib"`
	// Helpers counts the helper processes (conmon, containerd's shim) of the run's pods
	// and containers; HelperRSSPerPodMiB is their summed VmRSS over the pods up.
	Helpers            int     `json:"helpers"`
	HelperRSSPerPodMiB float64 `json:"helper_rss_per_pod_mib"`
	// Pauses counts crijournal's pause processes of the run's pods (with SharePID, one
	// per pod), not among the helpers; PauseRSSMiB is their mean VmRSS.
	Pauses      int     `json:"pauses,omitempty"`
	PauseRSSMiB float64 `json:"pause_rss_mib,omitempty"`
}

// writePauses prints the pause processes' memory, if there are any.
func (m *Memory) writePauses(w io.Writer) {
	if m.Pauses > 0 {
		fmt.Fprintf(w, "%d pause processes, %.2f MiB each\n", m.Pauses, m.PauseRSSMiB)
	}
}

// readMemory reads the daemon's and its helpers' memory, for pods pods whose sandbox and
// container IDs are ids; nil if the daemon's process cannot be read.
func readMemory(pid int, ids []string, pods int) *Memory {
	if pid <= 0 {
		return nil
	}
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil
	}
	u, err := readUsage(fs, pid)
	if err != nil {
		return nil
	}
	m := &Memory{DaemonPID: pid, DaemonPeakRSSMiB: mib(u.PeakRSS), DaemonRSSMiB: mib(u.RSS)}
	if u, err := helperRSS(fs, pid, ids); err == nil && pods > 0 {
		m.Helpers, m.HelperRSSPerPodMiB = u.N, mib(u.RSS)/float64(pods)
		if u.Pauses > 0 {
			m.Pauses, m.PauseRSSMiB = u.Pauses, mib(u.PauseRSS)/float64(u.Pauses)
		}
	}
	return m
}

// daemonPID resolves o.DaemonPID: 0 asks the socket, -1 (or a socket that cannot say) is 0.
func daemonPID(o Options) int {
	switch {
	case o.DaemonPID > 0:
		return o.DaemonPID
	case o.DaemonPID < 0:
		return 0
	}
	pid, err := PeerPID(o.Endpoint)
	if err != nil {
		return 0
	}
	return pid
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
		r.Ops[op] = statsOf(s)
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
	return run(ctx, o, nil)
}

// hold is called by run once every pod is up, before the teardown, with the run's
// connection: the idle workload polls the pods there. Its error ends the run (after the
// teardown).
type hold func(ctx context.Context, conn grpc.ClientConnInterface, pods []upPodID) error

// upPodID names a pod that is up: its sandbox and, with an image, its container.
type upPodID struct{ Sandbox, Container string }

// session is a connection to one endpoint, with the options' defaults filled in.
type session struct {
	o       Options
	conn    *grpc.ClientConn
	rt      runtimeapi.RuntimeServiceClient
	runtime string // name and version
	pid     int    // the daemon's, 0 if unknown
}

// connect opens a session on o.Endpoint and asks the runtime its version.
func connect(ctx context.Context, o Options) (*session, error) {
	if o.Prefix == "" {
		o.Prefix = fmt.Sprintf("bench-%d", time.Now().Unix())
	}
	if len(o.Command) == 0 {
		o.Command = []string{"sleep", "3600"}
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 100
	}
	o.Concurrency = max(o.Concurrency, 1)
	conn, err := grpc.NewClient(o.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", o.Endpoint, err)
	}
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	v, err := rt.Version(vctx, &runtimeapi.VersionRequest{})
	cancel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("version of %s: %w", o.Endpoint, err)
	}
	return &session{o: o, conn: conn, rt: rt, runtime: v.RuntimeName + " " + v.RuntimeVersion, pid: daemonPID(o)}, nil
}

func (s *session) newReport(pods int) *Report {
	rep := &Report{Endpoint: s.o.Endpoint, Runtime: s.runtime, Pods: pods, Concurrency: s.o.Concurrency,
		samples: map[Op][]time.Duration{}, PerPod: make([]PodResult, pods)}
	if s.o.Timeout > 0 {
		rep.ClientTimeout = s.o.Timeout.String()
	}
	return rep
}

// up brings pods first..first+n-1 up, concurrency at a time, into rep (whose PerPod it
// fills from index 0), and returns those that came up.
func (s *session) up(ctx context.Context, rep *Report, first, n int, progress func(done, total int)) []upPodID {
	made := make([]upPodID, n)
	work := make(chan int)
	var wg sync.WaitGroup
	var done int
	var doneMu sync.Mutex
	if progress != nil {
		progress(0, n)
	}
	for range s.o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				res, id := upPod(ctx, s.rt, s.o, first+i, rep)
				rep.PerPod[i] = res
				made[i] = id
				doneMu.Lock()
				done++
				if progress != nil {
					progress(done, n)
				}
				doneMu.Unlock()
			}
		}()
	}
	for i := range n {
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
	return slices.DeleteFunc(made, func(p upPodID) bool { return p.Sandbox == "" })
}

// cleanup stops and removes the pods made (measuring the calls into rep), then sweeps the
// pods of the run that no answered request returned; also after an interrupt, with a
// context of its own.
func (s *session) cleanup(ctx context.Context, rep *Report, made []upPodID) {
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer ccancel()
	ids := make([]string, 0, len(made))
	for _, p := range made {
		ids = append(ids, p.Sandbox)
	}
	rep.teardown(cctx, s.rt, ids, s.o.Concurrency, true)
	// Then what no answered request returned: pods made by requests that were abandoned
	// (client timeout) or interrupted, which the runtime finished all the same.
	list, err := s.rt.ListPodSandbox(cctx, &runtimeapi.ListPodSandboxRequest{Filter: &runtimeapi.PodSandboxFilter{
		LabelSelector: map[string]string{RunLabel: s.o.Prefix}}})
	if err != nil {
		rep.TeardownErrors = append(rep.TeardownErrors, fmt.Sprintf("list the pods left: %v", err))
		return
	}
	ids = ids[:0]
	for _, sb := range list.GetItems() {
		ids = append(ids, sb.GetId())
	}
	rep.Swept += len(ids)
	rep.teardown(cctx, s.rt, ids, s.o.Concurrency, false)
	s.settle(cctx, rep)
}

// PendingRemovalsInfo is the key of a verbose Status's info under which crijournal says
// how many removals answered with work left: server.StatusInfoPendingRemovals, written
// again here because the bench, a client of any CRI runtime, does not link the daemon.
const PendingRemovalsInfo = "pendingRemovals"

// settle waits until the runtime says it has no removal under way (PendingRemovalsInfo
// "0"), at most a minute, and records how long that took; a runtime that does not say
// (containerd) is not waited for.
func (s *session) settle(ctx context.Context, rep *Report) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		st, err := s.rt.Status(ctx, &runtimeapi.StatusRequest{Verbose: true})
		n, says := st.GetInfo()[PendingRemovalsInfo]
		if err != nil || !says {
			return
		}
		if n == "0" {
			rep.RemovalsSettled = time.Since(start)
			rep.RemovalsSettledMs = ms(rep.RemovalsSettled)
			return
		}
		select {
		case <-ctx.Done():
			rep.TeardownErrors = append(rep.TeardownErrors, fmt.Sprintf("%s removals still under way a minute after the teardown", n))
			return
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// ids lists the sandbox and container IDs of pods.
func ids(pods []upPodID) []string {
	var v []string
	for _, p := range pods {
		v = append(v, p.Sandbox)
		if p.Container != "" {
			v = append(v, p.Container)
		}
	}
	return v
}

// run is Run, with h (if not nil) called once every pod is up.
func run(ctx context.Context, o Options, h hold) (*Report, error) {
	if o.Pods <= 0 || o.Concurrency <= 0 {
		return nil, errors.New("pods and concurrency must be positive")
	}
	s, err := connect(ctx, o)
	if err != nil {
		return nil, err
	}
	defer s.conn.Close()
	rep := s.newReport(o.Pods)
	start := time.Now()
	made := s.up(ctx, rep, 0, o.Pods, o.Progress)
	rep.TimeToAllPods = time.Since(start)
	up := 0
	for _, p := range rep.PerPod {
		if p.Name != "" && p.Err == "" {
			up++
		}
	}
	rep.PodsPerSecond = float64(up) / rep.TimeToAllPods.Seconds()
	rep.Memory = readMemory(s.pid, ids(made), len(made))
	var herr error
	if h != nil && ctx.Err() == nil {
		herr = h(ctx, s.conn, made)
	}
	s.cleanup(ctx, rep, made)
	rep.finish()
	if ctx.Err() == nil && len(rep.TeardownErrors) > 0 {
		return rep, errors.Join(herr, fmt.Errorf("%d pods could not be cleaned up", len(rep.TeardownErrors)))
	}
	if herr != nil {
		return rep, herr
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
				down := t
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
					r.add(OpPodDown, time.Since(down))
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
func upPod(ctx context.Context, rt runtimeapi.RuntimeServiceClient, o Options, i int, rep *Report) (PodResult, upPodID) {
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
	if o.SharePID {
		cfg.Linux.SecurityContext.NamespaceOptions.Pid = runtimeapi.NamespaceMode_POD
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
	var cid string
	if err == nil && o.Image != "" {
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
	return res, upPodID{Sandbox: id, Container: cid}
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
