package test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestStats drives crictl stats and crictl statsp: a busy container that
// writes 8 MiB into its writable layer and one idle container in another pod.
// It checks CPU, memory, the writable layer, the pod's network counters and
// the sum of its containers, the filters by ID, pod and label, and that no
// stats call runs the OCI runtime (a wrapper counts its runs).
func TestStats(t *testing.T) {
	t.Parallel()
	runc, err := nodeRunc()
	if err != nil {
		testenv.Need(t, "TestStats needs runc in PATH: %v", err)
	}
	dir := t.TempDir()
	calls := filepath.Join(dir, "runc-calls")
	wrapper := filepath.Join(dir, "runc")
	writeFile(t, wrapper, "#!/bin/sh\necho \"$@\" >> "+shellQuote(calls)+"\nexec "+shellQuote(runc)+" \"$@\"\n", 0o755)
	d, _ := startContainerDaemon(t, daemonOptions{runtimePath: wrapper})

	busyPod := d.containerPod(t, "stats-busy", false)
	busyPodID := d.mustRunp(t, busyPod)
	busy := d.run(t, busyPodID, containerConfig(t, "busy", 0, []string{"sh", "-c",
		"dd if=/dev/zero of=/blob bs=1M count=8 && i=0 && while [ $i -lt 50000 ]; do i=$((i+1)); done && echo written && sleep 3600"},
		withLabel("role", "busy")), busyPod)
	idlePod := d.containerPod(t, "stats-idle", false)
	idlePodID := d.mustRunp(t, idlePod)
	idle := d.run(t, idlePodID, containerConfig(t, "idle", 0, sleeper, withLabel("role", "idle")), idlePod)
	d.waitLog(t, busy, "written", 30*time.Second)
	d.sendDatagrams(t, busyPodID)

	// The writable layers are measured in the background (stats_collect_period, 1s
	// here), so the 8 MiB shows up within a pass or two of being written.
	testenv.Eventually(t, 15*time.Second, 100*time.Millisecond, testenv.Until("the busy container's writable layer to be measured", func() bool {
		for _, s := range d.containerStats(t, "--id", busy) {
			if s.GetWritableLayer().GetUsedBytes().GetValue() >= 8<<20 {
				return true
			}
		}
		return false
	}))
	before := runcCalls(t, calls)
	all := d.containerStats(t, "-a")
	if got := statsIDs(all); !slices.Equal(got, sortedIDs(busy, idle)) {
		t.Fatalf("crictl stats -a lists %v, want %v", got, sortedIDs(busy, idle))
	}
	cst := all[slices.IndexFunc(all, func(s *runtimeapi.ContainerStats) bool { return s.GetAttributes().GetId() == busy })]
	if cst.GetAttributes().GetMetadata().GetName() != "busy" || cst.GetAttributes().GetLabels()["role"] != "busy" {
		t.Errorf("stats attributes of %s: %v, want name busy and label role=busy", busy, cst.GetAttributes())
	}
	if cst.GetCpu().GetTimestamp() == 0 || cst.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0 {
		t.Errorf("CPU of the busy container: %v, want a timestamp and a non-zero usage", cst.GetCpu())
	}
	mem := cst.GetMemory()
	if mem.GetTimestamp() == 0 || mem.GetWorkingSetBytes().GetValue() == 0 || mem.GetUsageBytes().GetValue() < mem.GetWorkingSetBytes().GetValue() ||
		mem.GetRssBytes().GetValue() == 0 || mem.GetPageFaults().GetValue() == 0 {
		t.Errorf("memory of the busy container: %v, want a working set <= usage, RSS and page faults", mem)
	}
	layer := cst.GetWritableLayer()
	if layer.GetUsedBytes().GetValue() < 8<<20 || layer.GetInodesUsed().GetValue() == 0 || layer.GetFsId().GetMountpoint() != d.storageRoot() {
		t.Errorf("writable layer of the busy container: %v, want at least the 8 MiB it wrote, on the image filesystem %s", layer, d.storageRoot())
	}

	// Filters: by ID, by pod, by label.
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--id", busy}, []string{busy}},
		{[]string{"--pod", idlePodID}, []string{idle}},
		{[]string{"--label", "role=idle"}, []string{idle}},
		{[]string{"--label", "role=nobody"}, nil},
	} {
		if got := statsIDs(d.containerStats(t, append([]string{"-a"}, tc.args...)...)); !slices.Equal(got, tc.want) {
			t.Errorf("crictl stats -a %s lists %v, want %v", strings.Join(tc.args, " "), got, tc.want)
		}
	}

	// The pods, which share their cgroup_parent: their containers and their conmons
	// (no pause process: no shared pid namespace), summed, and the network of their
	// namespace.
	pods := d.podStats(t)
	if len(pods) != 2 {
		t.Fatalf("crictl statsp lists %d pods, want 2", len(pods))
	}
	ps := pods[slices.IndexFunc(pods, func(s *runtimeapi.PodSandboxStats) bool { return s.GetAttributes().GetId() == busyPodID })]
	linux := ps.GetLinux()
	if len(linux.GetContainers()) != 1 || linux.GetContainers()[0].GetAttributes().GetId() != busy {
		t.Errorf("statsp of the busy pod lists containers %v, want %s", linux.GetContainers(), busy)
	} else {
		c := linux.GetContainers()[0]
		if linux.GetCpu().GetUsageCoreNanoSeconds().GetValue() < c.GetCpu().GetUsageCoreNanoSeconds().GetValue() ||
			linux.GetMemory().GetWorkingSetBytes().GetValue() <= c.GetMemory().GetWorkingSetBytes().GetValue() {
			t.Errorf("statsp of the busy pod: cpu %v memory %v, want the sum of its one container's (%v, %v) and its conmon's",
				linux.GetCpu(), linux.GetMemory(), c.GetCpu(), c.GetMemory())
		}
		if linux.GetMemory().GetAvailableBytes() != nil {
			t.Errorf("statsp of the busy pod: available_bytes %v, want none (no cgroup of its own)", linux.GetMemory().GetAvailableBytes())
		}
	}
	if got, want := linux.GetProcess().GetProcessCount().GetValue(), uint64(cgroupProcs(t, d.memoryCgroup(t, busy))+1); got != want {
		t.Errorf("statsp of the busy pod: process count %d, want %d: its container's and its conmon", got, want)
	}
	eth := linux.GetNetwork().GetDefaultInterface()
	if eth.GetName() != "eth0" || eth.GetRxBytes().GetValue() == 0 || eth.GetTxBytes().GetValue() == 0 {
		t.Errorf("statsp of the busy pod: default interface %v, want eth0 with traffic", eth)
	}
	if got := d.podStats(t, "--id", idlePodID); len(got) != 1 || got[0].GetAttributes().GetId() != idlePodID {
		t.Errorf("crictl statsp --id %s lists %v", idlePodID, got)
	}
	if got := d.podStats(t, "--label", "e2e=nobody"); len(got) != 0 {
		t.Errorf("crictl statsp --label e2e=nobody lists %d pods, want none", len(got))
	}
	if n := runcCalls(t, calls) - before; n != 0 {
		t.Errorf("the stats calls ran the OCI runtime %d times, want none", n)
	}

	// One container asked for by ID (ContainerStats), and an unknown one.
	if got := d.mustCrictl(t, "stats", "-o", "json", "--id", idle[:12]); !strings.Contains(got, idle) {
		t.Errorf("crictl stats --id %s does not show %s:\n%s", idle[:12], idle, got)
	}
	resp, err := d.cri(t).ContainerStats(t.Context(), &runtimeapi.ContainerStatsRequest{ContainerId: strings.Repeat("ab", 32)})
	if status.Code(err) != codes.NotFound {
		t.Errorf("ContainerStats of an unknown ID: %v %v, want NotFound", resp, err)
	}

	for _, id := range []string{busy, idle} {
		d.removeCtr(t, id)
	}
	d.removePod(t, busyPodID)
	d.removePod(t, idlePodID)
}

// withLabel adds a label to a container configuration.
func withLabel(key, value string) ctrOption {
	return func(cfg map[string]any) {
		labels, _ := cfg["labels"].(map[string]string)
		labels[key] = value
	}
}

// containerStats runs crictl stats -o json with args.
func (d *daemon) containerStats(t *testing.T, args ...string) []*runtimeapi.ContainerStats {
	t.Helper()
	out := d.mustCrictl(t, append([]string{"stats", "-o", "json"}, args...)...)
	var resp runtimeapi.ListContainerStatsResponse
	if err := protojsonLenient.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("crictl stats %v: %v\n%s", args, err, out)
	}
	return resp.GetStats()
}

// podStats runs crictl statsp -o json with args.
func (d *daemon) podStats(t *testing.T, args ...string) []*runtimeapi.PodSandboxStats {
	t.Helper()
	out := d.mustCrictl(t, append([]string{"statsp", "-o", "json"}, args...)...)
	var resp runtimeapi.ListPodSandboxStatsResponse
	if err := protojsonLenient.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("crictl statsp %v: %v\n%s", args, err, out)
	}
	return resp.GetStats()
}

func statsIDs(stats []*runtimeapi.ContainerStats) []string {
	var ids []string
	for _, s := range stats {
		ids = append(ids, s.GetAttributes().GetId())
	}
	slices.Sort(ids)
	return ids
}

func sortedIDs(ids ...string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return ids
}

// runcCalls counts the runs of the runtime wrapper so far.
func runcCalls(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// protojsonLenient reads crictl's JSON output as CRI messages, skipping what
// crictl adds.
var protojsonLenient = protojson.UnmarshalOptions{DiscardUnknown: true}

// sendDatagrams makes some traffic on a pod's interface: UDP datagrams from the node to
// a closed port of the pod (in), answered with port unreachable (out).
func (d *daemon) sendDatagrams(t *testing.T, podID string) {
	t.Helper()
	st := d.inspectp(t, podID)
	if st.Status.Network == nil || st.Status.Network.IP == "" {
		t.Fatalf("crictl inspectp %s shows no pod IP", podID)
	}
	conn, err := net.Dial("udp", net.JoinHostPort(st.Status.Network.IP, "9"))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		_, _ = conn.Write([]byte("stats"))
	}
	conn.Close()
}
