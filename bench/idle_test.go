package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The fake's container calls, for the idle and scale workloads.

func (f *fakeRuntime) count(call string) {
	f.mu.Lock()
	f.calls[call]++
	f.mu.Unlock()
}

func (f *fakeRuntime) called(call string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[call]
}

// fakeImages is the fake's image service: the calls a kubelet makes periodically.
type fakeImages struct {
	runtimeapi.UnimplementedImageServiceServer
	f *fakeRuntime
}

func (i *fakeImages) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	i.f.count(CallImageFsInfo)
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

func (i *fakeImages) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	i.f.count(CallListImages)
	return &runtimeapi.ListImagesResponse{}, nil
}

// CreateContainer starts the container's helper, a process whose command line names the
// container (as conmon -c <ID> does) and whose child does not.
func (f *fakeRuntime) CreateContainer(_ context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("ctr-%d-%d", os.Getpid(), f.seq)
	h := exec.Command("sh", "-c", "sleep 60; :", id)
	if err := h.Start(); err != nil {
		return nil, err
	}
	f.helpers[id] = h
	f.containers[id] = &runtimeapi.Container{Id: id, PodSandboxId: req.GetPodSandboxId(), State: runtimeapi.ContainerState_CONTAINER_CREATED}
	return &runtimeapi.CreateContainerResponse{ContainerId: id}, nil
}

func (f *fakeRuntime) StartContainer(_ context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.containers[req.GetContainerId()].State = runtimeapi.ContainerState_CONTAINER_RUNNING
	return &runtimeapi.StartContainerResponse{}, nil
}

func (f *fakeRuntime) ListContainers(context.Context, *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f.count(CallListContainers)
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &runtimeapi.ListContainersResponse{}
	for _, c := range f.containers {
		resp.Containers = append(resp.Containers, c)
	}
	return resp, nil
}

func (f *fakeRuntime) ContainerStatus(context.Context, *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	f.count(CallContainerStatus)
	return &runtimeapi.ContainerStatusResponse{Status: &runtimeapi.ContainerStatus{}}, nil
}

func (f *fakeRuntime) PodSandboxStatus(context.Context, *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	f.count(CallPodSandboxStatus)
	return &runtimeapi.PodSandboxStatusResponse{}, nil
}

func (f *fakeRuntime) ListContainerStats(context.Context, *runtimeapi.ListContainerStatsRequest) (*runtimeapi.ListContainerStatsResponse, error) {
	f.count(CallListContainerStats)
	return &runtimeapi.ListContainerStatsResponse{}, nil
}

func (f *fakeRuntime) ListPodSandboxMetrics(context.Context, *runtimeapi.ListPodSandboxMetricsRequest) (*runtimeapi.ListPodSandboxMetricsResponse, error) {
	f.count(CallListPodSandboxMetrics)
	return &runtimeapi.ListPodSandboxMetricsResponse{}, nil
}

func (f *fakeRuntime) helpersLeft() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.helpers)
}

// TestPeerPID: the PID behind a unix socket is the process that listens on it (here,
// the test itself serves the fake).
func TestPeerPID(t *testing.T) {
	endpoint := serveFake(t, &fakeRuntime{})
	pid, err := PeerPID(endpoint)
	if err != nil || pid != os.Getpid() {
		t.Fatalf("PeerPID = %d, %v; want this process, %d", pid, err, os.Getpid())
	}
	if _, err := PeerPID("unix:///nonexistent/cri.sock"); err == nil {
		t.Error("PeerPID of a socket that does not exist did not fail")
	}
}

// TestHelperRSSPause: a process whose command line is "<program> pause <sandbox ID>" (a
// crijournal pause process) is counted apart from the other helpers.
func TestHelperRSSPause(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pause"), []byte("sleep 60; :\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("sb-%d-pause", os.Getpid())
	ctr := fmt.Sprintf("ctr-%d-pause", os.Getpid())
	var procs []*exec.Cmd
	for _, args := range [][]string{{"pause", id}, {"-c", "sleep 60; :", ctr}} {
		c := exec.Command("sh", args...) // sh pause <id>: sh runs ./pause
		c.Dir = dir
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, c)
	}
	t.Cleanup(func() {
		for _, c := range procs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	// Until both have executed sh.
	var u helperUsage
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if u, err = helperRSS(fs, os.Getpid(), []string{id, ctr}); err != nil {
			t.Fatal(err)
		}
		if u.N+u.Pauses == 2 {
			break
		}
	}
	if u.N != 1 || u.Pauses != 1 || u.RSS == 0 || u.PauseRSS == 0 {
		t.Errorf("helpers %+v: want one helper and one pause process, with their RSS", u)
	}
}

// TestReadUsage: CPU time burnt by the process shows in its usage; the peak RSS is at
// least the current one.
func TestReadUsage(t *testing.T) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		t.Fatal(err)
	}
	before, err := readUsage(fs, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
	}
	after, err := readUsage(fs, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// The clock ticks are 10 ms; a loaded machine may give the loop less than all of
	// its 300 ms.
	if d := after.CPUSeconds - before.CPUSeconds; d < 0.05 {
		t.Errorf("300 ms of busy loop added %.3f s of CPU time", d)
	}
	if after.RSS == 0 || after.PeakRSS < after.RSS {
		t.Errorf("RSS %d, peak %d: want a peak at least the current", after.RSS, after.PeakRSS)
	}
}

// TestIdle: the poller calls what a kubelet calls, at its periods, over every pod and
// container up; the daemon measured is the one behind the socket; helpers are counted by
// the IDs on their command lines; everything is removed afterwards.
func TestIdle(t *testing.T) {
	f := &fakeRuntime{}
	o := IdleOptions{Options: Options{Endpoint: serveFake(t, f), Pods: 3, Concurrency: 2, Image: "img", Prefix: "idle"},
		Duration: 450 * time.Millisecond, RelistEvery: 100 * time.Millisecond, StatusEvery: 200 * time.Millisecond,
		RuntimeStatusEvery: 100 * time.Millisecond, ImagesEvery: 300 * time.Millisecond}
	r, err := Idle(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if r.DaemonPID != os.Getpid() || r.PodsUp != 3 {
		t.Errorf("daemon %d, %d pods up; want this process and 3", r.DaemonPID, r.PodsUp)
	}
	if r.Seconds < 0.45 || r.CPUSeconds < 0 || r.CPUPercent != 100*r.CPUSeconds/r.Seconds {
		t.Errorf("%.3f s of CPU over %.3f s: %.2f %%", r.CPUSeconds, r.Seconds, r.CPUPercent)
	}
	// Relists at 0, 100, ... 400 ms; statuses at 0, 200, 400 ms (the last may miss the end).
	if n := f.called(CallListContainers); n < 3 || n > 6 {
		t.Errorf("%d relists in 450 ms at a period of 100 ms", n)
	}
	for _, call := range []string{CallPodSandboxStatus, CallContainerStatus} {
		if n := f.called(call); n < 6 || n > 9 || n%3 != 0 {
			t.Errorf("%d calls of %s: want one per pod in each of 2 or 3 status rounds", n, call)
		}
		if r.Calls[call].Count != f.called(call) {
			t.Errorf("the report has %d calls of %s, the runtime got %d", r.Calls[call].Count, call, f.called(call))
		}
	}
	if n := f.called(CallListContainerStats); n < 2 || n > 3 {
		t.Errorf("%d calls of ListContainerStats, want one per status round", n)
	}
	if n := f.called(CallListPodSandboxMetrics); n < 2 || n > 3 {
		t.Errorf("%d calls of ListPodSandboxMetrics, want one per status round", n)
	}
	// The kubelet's other periodic calls: ImageFsInfo and Version with the statuses (and
	// Version once more when the run connects), Status at its own period, ListImages at
	// 0 and 300 ms.
	if n := f.called(CallImageFsInfo); n < 2 || n > 3 {
		t.Errorf("%d calls of ImageFsInfo, want one per status round", n)
	}
	if n := f.called(CallVersion); n < 3 || n > 4 {
		t.Errorf("%d calls of Version, want one when connecting and one per status round", n)
	}
	if n := f.called(CallStatus); n < 3 || n > 6 {
		t.Errorf("%d calls of Status in 450 ms at a period of 100 ms", n)
	}
	if n := f.called(CallListImages); n != 2 {
		t.Errorf("%d calls of ListImages, want 2 (at 0 and 300 ms)", n)
	}
	for _, call := range []string{CallStatus, CallVersion, CallImageFsInfo, CallListImages} {
		if r.Calls[call].Count == 0 || r.Errors[call] != 0 {
			t.Errorf("the report has %d calls of %s and %d errors", r.Calls[call].Count, call, r.Errors[call])
		}
	}
	if m := r.Memory; m == nil || m.Helpers != 3 || m.HelperRSSPerPodMiB <= 0 || m.DaemonPeakRSSMiB <= 0 {
		t.Errorf("memory %+v: want the 3 helpers, their RSS and the daemon's peak", m)
	}
	if f.left() != 0 || f.helpersLeft() != 0 {
		t.Errorf("%d sandboxes and %d helpers left", f.left(), f.helpersLeft())
	}
	var table bytes.Buffer
	r.WriteTable(&table)
	for _, want := range []string{"% of one core", "3 helper processes", "ContainerStatus", "PodUp"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
	}
}

// TestIdleNeedsTheDaemon: without a PID to read, the idle workload refuses to run rather
// than report a CPU time of nothing.
func TestIdleNeedsTheDaemon(t *testing.T) {
	f := &fakeRuntime{}
	_, err := Idle(context.Background(), IdleOptions{Options: Options{Endpoint: serveFake(t, f), Pods: 1, Concurrency: 1, DaemonPID: -1}})
	if err == nil || !strings.Contains(err.Error(), "PID") {
		t.Fatalf("Idle without a daemon PID = %v", err)
	}
	if f.left() != 0 {
		t.Errorf("%d sandboxes made", f.left())
	}
}

// TestScale: a measurement at 0, Step, ... Pods pods, each with Samples pods up one at a
// time; the records counted are what the lists return; every pod is removed and its
// removal measured.
func TestScale(t *testing.T) {
	f := &fakeRuntime{}
	floors := 0
	floor := func(context.Context) (*FloorReport, error) {
		floors++
		return &FloorReport{Runs: 1, Ops: map[Op]Stats{OpPodUp: {P50: time.Millisecond, P50ms: 1}}}, nil
	}
	r, err := Scale(context.Background(), ScaleOptions{Options: Options{Endpoint: serveFake(t, f), Pods: 4, Concurrency: 2, Image: "img", Prefix: "scale"},
		Step: 2, Samples: 1, ListCalls: 3, Floor: floor})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range r.Points {
		got = append(got, fmt.Sprintf("%d:%d:%d:%d", p.Existing, p.Records, p.Ops[OpPodUp].Count, p.Lists[CallListPodSandbox].Count))
	}
	// existing pods : records (sandboxes + containers, the sample included) : samples : list calls
	if want := []string{"0:2:1:3", "2:6:1:3", "4:10:1:3"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("points %v, want %v", got, want)
	}
	if floors != 3 || r.Points[2].Floor == nil {
		t.Errorf("the floor was measured %d times, want at each of the 3 points", floors)
	}
	if n := r.Down.Ops[OpPodDown].Count; n != 5 {
		t.Errorf("%d pods down, want the 4 of the fill and the samples: 5", n)
	}
	if f.left() != 0 || f.helpersLeft() != 0 {
		t.Errorf("%d sandboxes and %d helpers left", f.left(), f.helpersLeft())
	}
	var table bytes.Buffer
	r.WriteTable(&table)
	if !strings.Contains(table.String(), "ListContainers p50") || strings.Count(table.String(), "\n") < 5 {
		t.Errorf("table:\n%s", table.String())
	}
}

// TestCompareFloor: with a floor, each side's PodUp and PodDown are divided by the
// floor of the same round.
func TestCompareFloor(t *testing.T) {
	slow, fast := &fakeRuntime{delay: 20 * time.Millisecond}, &fakeRuntime{}
	o := Options{Endpoint: serveFake(t, slow), Pods: 2, Concurrency: 1, Prefix: "cmpf"}
	floors := 0
	floor := func(context.Context) (*FloorReport, error) {
		floors++
		return &FloorReport{Runs: 1, Ops: map[Op]Stats{OpPodUp: {P50: 10 * time.Millisecond, P50ms: 10}, OpPodDown: {P50: time.Millisecond, P50ms: 1}}}, nil
	}
	c, err := Compare(context.Background(), o, serveFake(t, fast), 2, floor)
	if err != nil {
		t.Fatal(err)
	}
	if floors != 2 || len(c.Floors) != 2 {
		t.Fatalf("floor measured %d times, %d kept, want once per round", floors, len(c.Floors))
	}
	for round, pair := range c.Runs {
		for side, rep := range pair {
			want := float64(rep.Ops[OpPodUp].P50) / float64(10*time.Millisecond)
			if got := c.FloorRatios[OpPodUp][side].PerRound[round]; got != want {
				t.Errorf("round %d side %d: PodUp / floor %v, want %v", round, side, got, want)
			}
		}
	}
	if c.FloorRatios[OpPodUp][0].Median < 2 {
		t.Errorf("the slow side's PodUp is %v times a 10 ms floor, want at least 2 (it sleeps 20 ms)", c.FloorRatios[OpPodUp][0].Median)
	}
	var table bytes.Buffer
	c.WriteTable(&table)
	if !strings.Contains(table.String(), "ENDPOINT / FLOOR") || !strings.Contains(table.String(), "runc create") {
		t.Errorf("table:\n%s", table.String())
	}
}
