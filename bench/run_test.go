package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeRuntime is a CRI runtime service in memory, for the tests of Run. Like containerd,
// it finishes the work of a request its client abandoned: the sandbox exists (and is
// listed) though nobody got its ID.
type fakeRuntime struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	// abandonFirst: the first attempt of every pod makes a sandbox and then blocks until
	// its client gives up.
	abandonFirst bool
	// failing: pods of these names always fail with InvalidArgument.
	failing map[string]bool
	// delay: every RunPodSandbox takes this long.
	delay time.Duration

	mu         sync.Mutex
	attempts   map[string]int
	sandboxes  map[string]*runtimeapi.PodSandbox
	containers map[string]*runtimeapi.Container
	// helpers are a process per container whose command line names it, as conmon's
	// does (see helperRSS); calls counts the calls of the idle workload's poller.
	helpers map[string]*exec.Cmd
	calls   map[string]int
	seq     int

	// name and order: when order is set, each RunPodSandbox adds name to it (which of two
	// runtimes a comparison ran, in turn).
	name  string
	order *callOrder

	// reportsRemovals: a verbose Status says pendingRemovals, one less at each call
	// (crijournal's removals that answered with work left).
	reportsRemovals bool
	pendingRemovals int
}

func (f *fakeRuntime) Status(context.Context, *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	f.count(CallStatus)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.reportsRemovals {
		return &runtimeapi.StatusResponse{}, nil
	}
	n := f.pendingRemovals
	f.pendingRemovals = max(n-1, 0)
	return &runtimeapi.StatusResponse{Info: map[string]string{PendingRemovalsInfo: strconv.Itoa(n)}}, nil
}

// callOrder lists the runtimes RunPodSandbox calls reached, in order.
type callOrder struct {
	mu    sync.Mutex
	names []string
}

func (o *callOrder) add(name string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.names = append(o.names, name)
}

func (f *fakeRuntime) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	f.count(CallVersion)
	return &runtimeapi.VersionResponse{RuntimeName: "fake", RuntimeVersion: "1"}, nil
}

func (f *fakeRuntime) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	name := req.GetConfig().GetMetadata().GetName()
	f.order.add(f.name)
	time.Sleep(f.delay)
	f.mu.Lock()
	f.attempts[name]++
	first := f.attempts[name] == 1
	if f.failing[name] {
		f.mu.Unlock()
		return nil, status.Error(codes.InvalidArgument, "this pod is refused")
	}
	f.seq++
	id := fmt.Sprintf("sb-%d", f.seq)
	f.sandboxes[id] = &runtimeapi.PodSandbox{Id: id, Labels: req.GetConfig().GetLabels(),
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name}}
	f.mu.Unlock()
	if first && f.abandonFirst {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

func (f *fakeRuntime) StopPodSandbox(context.Context, *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (f *fakeRuntime) RemovePodSandbox(_ context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, req.GetPodSandboxId())
	for id, c := range f.containers {
		if c.PodSandboxId == req.GetPodSandboxId() {
			delete(f.containers, id)
			if h := f.helpers[id]; h != nil {
				_ = h.Process.Kill()
				_ = h.Wait()
				delete(f.helpers, id)
			}
		}
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListPodSandboxResponse{}
next:
	for _, sb := range f.sandboxes {
		for k, v := range req.GetFilter().GetLabelSelector() {
			if sb.Labels[k] != v {
				continue next
			}
		}
		resp.Items = append(resp.Items, sb)
	}
	return resp, nil
}

func (f *fakeRuntime) left() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sandboxes)
}

// serveFake serves f on a unix socket and returns its endpoint.
func serveFake(t *testing.T, f *fakeRuntime) string {
	t.Helper()
	f.attempts = map[string]int{}
	f.sandboxes = map[string]*runtimeapi.PodSandbox{}
	f.containers = map[string]*runtimeapi.Container{}
	f.helpers = map[string]*exec.Cmd{}
	f.calls = map[string]int{}
	sock := filepath.Join(t.TempDir(), "cri.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(g, f)
	runtimeapi.RegisterImageServiceServer(g, &fakeImages{f: f})
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	return "unix://" + sock
}

func TestRun(t *testing.T) {
	tests := []struct {
		name         string
		fake         *fakeRuntime
		opts         Options
		cancelAfter  int // cancel the run once this many pods are up (0: never)
		wantErr      error
		wantFailed   int
		wantRetries  int
		wantSwept    int
		wantSettled  bool // the run waited for the runtime's removals under way
		wantInReport []string
	}{
		{name: "abandoned first attempts: retried, and what they made is swept",
			fake: &fakeRuntime{abandonFirst: true},
			opts: Options{Pods: 4, Concurrency: 2, Timeout: 100 * time.Millisecond},
			// One retry per pod; the sandboxes the abandoned attempts made are removed.
			wantRetries: 4, wantSwept: 4,
			wantInReport: []string{"pod bench-test-0: 1 retries; \"DeadlineExceeded\" x1", "found and removed after the run: 4"}},
		{name: "a pod that always fails: retried MaxRetries times, then failed",
			fake:       &fakeRuntime{failing: map[string]bool{"bench-test-1": true}},
			opts:       Options{Pods: 3, Concurrency: 3, Timeout: time.Second, MaxRetries: 2},
			wantFailed: 1, wantRetries: 2,
			wantInReport: []string{"pod bench-test-1: 2 retries", "FAILED: rpc error: code = InvalidArgument"}},
		{name: "removals under way in the runtime after the teardown: waited for",
			fake:         &fakeRuntime{reportsRemovals: true, pendingRemovals: 3},
			opts:         Options{Pods: 2, Concurrency: 1},
			wantSettled:  true,
			wantInReport: []string{"removals under way in the runtime after the teardown, waited for"}},
		{name: "interrupted: everything made is removed",
			fake:        &fakeRuntime{abandonFirst: true},
			opts:        Options{Pods: 20, Concurrency: 1, Timeout: 50 * time.Millisecond},
			cancelAfter: 2, wantErr: context.Canceled, wantRetries: -1, wantSwept: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			o := tt.opts
			o.Endpoint = serveFake(t, tt.fake)
			o.Prefix = "bench-test"
			o.Progress = func(done, total int) {
				if tt.cancelAfter > 0 && done >= tt.cancelAfter {
					cancel()
				}
			}
			rep, err := Run(ctx, o)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Run = %v, want %v", err, tt.wantErr)
			}
			if n := tt.fake.left(); n != 0 {
				t.Errorf("%d sandboxes left on the runtime after the run", n)
			}
			if len(rep.TeardownErrors) != 0 {
				t.Errorf("teardown errors: %v", rep.TeardownErrors)
			}
			if rep.Failed != tt.wantFailed {
				t.Errorf("failed = %d, want %d", rep.Failed, tt.wantFailed)
			}
			if tt.wantRetries >= 0 && rep.RetriesTotal != tt.wantRetries {
				t.Errorf("retries = %d, want %d (per pod %+v)", rep.RetriesTotal, tt.wantRetries, rep.PerPod)
			}
			if settled := rep.RemovalsSettled > 0; settled != tt.wantSettled || tt.fake.pendingRemovals != 0 {
				t.Errorf("waited for the removals under way: %v (%v), want %v; %d left", settled, rep.RemovalsSettled, tt.wantSettled, tt.fake.pendingRemovals)
			}
			if tt.wantSwept >= 0 && rep.Swept != tt.wantSwept {
				t.Errorf("swept = %d, want %d", rep.Swept, tt.wantSwept)
			}
			if want := float64(o.Pods-tt.wantFailed) / rep.TimeToAllPods.Seconds(); tt.cancelAfter == 0 && rep.PodsPerSecond != want {
				t.Errorf("pods per second = %v, want the %d pods up over the run's time: %v", rep.PodsPerSecond, o.Pods-tt.wantFailed, want)
			}
			var table bytes.Buffer
			rep.WriteTable(&table)
			for _, want := range tt.wantInReport {
				if !strings.Contains(table.String(), want) {
					t.Errorf("the table lacks %q:\n%s", want, table.String())
				}
			}
		})
	}
}

// TestCompareAll: against two baselines, each round runs all three sides, the order
// turning by one a round, and each comparison divides the endpoint's report of a round by
// that baseline's report of the same round.
func TestCompareAll(t *testing.T) {
	order := &callOrder{}
	slow := &fakeRuntime{delay: 40 * time.Millisecond, name: "endpoint", order: order}
	mid := &fakeRuntime{delay: 20 * time.Millisecond, name: "old", order: order}
	fast := &fakeRuntime{name: "new", order: order}
	o := Options{Endpoint: serveFake(t, slow), Pods: 2, Concurrency: 1, Prefix: "cmpa"}
	oldEP, newEP := serveFake(t, mid), serveFake(t, fast)
	floors := 0
	floor := func(context.Context) (*FloorReport, error) {
		floors++
		return &FloorReport{Runs: 1, Ops: map[Op]Stats{OpPodUp: {P50: 10 * time.Millisecond, P50ms: 10}, OpPodDown: {P50: time.Millisecond, P50ms: 1}}}, nil
	}
	cs, err := CompareAll(context.Background(), o, []string{oldEP, newEP}, 3, floor)
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	for i := 0; i < len(order.names); i += o.Pods {
		runs = append(runs, order.names[i])
	}
	if want := []string{"endpoint", "old", "new", "old", "new", "endpoint", "new", "endpoint", "old"}; !slices.Equal(runs, want) {
		t.Errorf("sides in the order they ran %q, want %q", runs, want)
	}
	if len(cs) != 2 || floors != 3 {
		t.Fatalf("%d comparisons, floor measured %d times: want 2 and 3", len(cs), floors)
	}
	for b, baseline := range []string{oldEP, newEP} {
		c := cs[b]
		if c.Baseline != baseline || len(c.Runs) != 3 || len(c.Floors) != 3 {
			t.Fatalf("comparison %d: baseline %s, %d rounds, %d floors; want %s, 3, 3", b, c.Baseline, len(c.Runs), len(c.Floors), baseline)
		}
		r := c.Ratios[OpRunPodSandbox]
		for round, pair := range c.Runs {
			if pair[0] != cs[0].Runs[round][0] || pair[1].Endpoint != baseline {
				t.Errorf("comparison %d round %d: %s against %s, want the shared endpoint report against %s", b, round, pair[0].Endpoint, pair[1].Endpoint, baseline)
			}
			if want := float64(pair[0].Ops[OpRunPodSandbox].P50) / float64(pair[1].Ops[OpRunPodSandbox].P50); r.PerRound[round] != want {
				t.Errorf("comparison %d round %d ratio %v, want %v", b, round, r.PerRound[round], want)
			}
		}
	}
	if up0, up1 := cs[0].Ratios[OpPodUp].Median, cs[1].Ratios[OpPodUp].Median; up0 >= up1 || up0 <= 1 {
		t.Errorf("pod up over the 20 ms baseline %v, over the fast one %v: want 1 < the first < the second", up0, up1)
	}
	if slow.left()+mid.left()+fast.left() != 0 {
		t.Errorf("sandboxes left: %d, %d, %d", slow.left(), mid.left(), fast.left())
	}
	var table bytes.Buffer
	cs.WriteTable(&table)
	if got := strings.Count(table.String(), "against baseline"); got != 2 {
		t.Errorf("the table has %d comparisons, want 2:\n%s", got, table.String())
	}
	if got := strings.Count(table.String(), "daemon peak RSS"); got != 9 {
		t.Errorf("the table reads %d memories, want each side's of each round once (9):\n%s", got, table.String())
	}
	if !strings.Contains(table.String(), "over each baseline") || !strings.Contains(table.String(), fmt.Sprintf("%.3f", cs[1].Ratios[OpPodUp].Median)) {
		t.Errorf("the table lacks the summary with pod up over the second baseline:\n%s", table.String())
	}
}

func TestCompare(t *testing.T) {
	order := &callOrder{}
	slow := &fakeRuntime{delay: 50 * time.Millisecond, name: "endpoint", order: order}
	fast := &fakeRuntime{name: "baseline", order: order}
	o := Options{Endpoint: serveFake(t, slow), Pods: 3, Concurrency: 1, Prefix: "cmp"}
	c, err := Compare(context.Background(), o, serveFake(t, fast), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The side that goes first alternates: endpoint, baseline; baseline, endpoint; ...
	var runs []string
	for i := 0; i < len(order.names); i += o.Pods {
		runs = append(runs, order.names[i])
	}
	if want := []string{"endpoint", "baseline", "baseline", "endpoint", "endpoint", "baseline"}; !slices.Equal(runs, want) {
		t.Errorf("sides in the order they ran %q, want %q (all calls: %q)", runs, want, order.names)
	}
	if slow.left() != 0 || fast.left() != 0 {
		t.Errorf("sandboxes left: %d on the endpoint, %d on the baseline", slow.left(), fast.left())
	}
	r, ok := c.Ratios[OpRunPodSandbox]
	if !ok || len(r.PerRound) != 3 || len(c.Runs) != 3 {
		t.Fatalf("ratios %+v over %d rounds, want 3 rounds of RunPodSandbox", r, len(c.Runs))
	}
	for i, pair := range c.Runs {
		if pair[0].Endpoint != o.Endpoint || pair[1].Endpoint == o.Endpoint {
			t.Errorf("round %d ran on %s and %s", i, pair[0].Endpoint, pair[1].Endpoint)
		}
		if want := float64(pair[0].Ops[OpRunPodSandbox].P50) / float64(pair[1].Ops[OpRunPodSandbox].P50); r.PerRound[i] != want {
			t.Errorf("round %d ratio %v, want p50 %v / %v", i, r.PerRound[i], pair[0].Ops[OpRunPodSandbox].P50, pair[1].Ops[OpRunPodSandbox].P50)
		}
	}
	if r.Median != median(r.PerRound) || r.Median <= 1 {
		t.Errorf("median ratio %v of %v: want their median, above 1 (the endpoint sleeps 50ms a call)", r.Median, r.PerRound)
	}
	var table bytes.Buffer
	c.WriteTable(&table)
	ratios := fmt.Sprintf("%.2f, %.2f, %.2f", r.PerRound[0], r.PerRound[1], r.PerRound[2])
	if !strings.Contains(table.String(), "RunPodSandbox") || !strings.Contains(table.String(), ratios) {
		t.Errorf("the table lacks the RunPodSandbox ratios %q:\n%s", ratios, table.String())
	}
}
