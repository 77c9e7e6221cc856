package test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	sdcgroups "github.com/opencontainers/cgroups/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestPodStatsOwnCgroup is issue 51's item 7 (pod stats): a pod with a cgroup of its own
// (its cgroup_parent, as the kubelet gives every pod) reports, through crictl statsp,
// that cgroup's figures, as containerd's pod stats read the pod's cgroup: its process
// count is its container's processes plus the pause process and the container's conmon,
// its working set is above its container's, and available_bytes is the pod's memory
// limit (written on the pod's cgroup, as the kubelet's pod cgroup manager does) less the
// working set, as the kubelet computes it for a container.
func TestPodStatsOwnCgroup(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	var parent string
	pod := d.editedPod(t, "stats-own", func(cfg map[string]any) {
		uid := cfg["metadata"].(map[string]any)["uid"].(string)
		parent = d.cgroupParent + "/pod" + uid[:8]
		if e2eSystemd() {
			parent = d.podCgroupParent(uid)
		}
		cfg["linux"].(map[string]any)["cgroup_parent"] = parent
		namespaceOptions(cfg)["pid"] = int(runtimeapi.NamespaceMode_POD)
	})
	podID := d.mustRunp(t, pod)
	reaper.add(podID)
	d.pull(t, testImage)
	id := d.run(t, podID, containerConfig(t, "c", 0, sleeper, func(cfg map[string]any) {
		namespaceOptions(cfg)["pid"] = int(runtimeapi.NamespaceMode_POD)
	}), pod)
	d.waitLog(t, id, "hello-from-container", 30*time.Second)

	dir := parent
	if e2eSystemd() {
		var err error
		if dir, err = sdcgroups.ExpandSlice(parent); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 256 << 20
	writeFile(t, memoryLimitFile(dir), strconv.Itoa(limit), 0o644)
	ctrProcs := cgroupProcs(t, d.memoryCgroup(t, id))

	stats := d.podStats(t, "--id", podID)
	if len(stats) != 1 {
		t.Fatalf("crictl statsp --id %s lists %d pods", podID, len(stats))
	}
	linux := stats[0].GetLinux()
	if len(linux.GetContainers()) != 1 {
		t.Fatalf("statsp lists containers %v, want %s", linux.GetContainers(), id)
	}
	ctr := linux.GetContainers()[0]
	if got, want := linux.GetProcess().GetProcessCount().GetValue(), uint64(ctrProcs+2); got != want {
		t.Errorf("statsp process count %d, want %d: the container's %d, the pause process and conmon", got, want, ctrProcs)
	}
	ws := linux.GetMemory().GetWorkingSetBytes().GetValue()
	if ws <= ctr.GetMemory().GetWorkingSetBytes().GetValue() {
		t.Errorf("statsp working set %d, want above the container's %d (the pause process and conmon count)", ws, ctr.GetMemory().GetWorkingSetBytes().GetValue())
	}
	if avail := linux.GetMemory().GetAvailableBytes(); avail == nil || avail.GetValue() != limit-ws {
		t.Errorf("statsp available_bytes %v, want the pod's limit %d less its working set %d", avail, limit, ws)
	}
	if linux.GetCpu().GetUsageCoreNanoSeconds().GetValue() < ctr.GetCpu().GetUsageCoreNanoSeconds().GetValue() {
		t.Errorf("statsp CPU %v below its container's %v", linux.GetCpu(), ctr.GetCpu())
	}
	logger := d.run(t, podID, containerConfig(t, "logger", 0, chatty, func(cfg map[string]any) {
		namespaceOptions(cfg)["pid"] = int(runtimeapi.NamespaceMode_POD)
	}), pod)
	d.waitLog(t, logger, "hello-from-container", 30*time.Second)
	checkPodRate(t, d, podID)

	d.removeCtr(t, logger)
	d.removeCtr(t, id)
	d.removePod(t, podID)
	// The pod's cgroup is the kubelet's to remove: here the test's.
	if !e2eSystemd() {
		for _, h := range cgroupHierarchies() {
			if err := os.Remove(filepath.Join(h, parent)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("remove the pod's cgroup: %v", err)
			}
		}
	}
	d.stopClean(t)
}

// TestPodStatsSharedCgroup is TestPodStatsOwnCgroup's counterpart for pods that share
// their cgroup_parent (the harness's, as a kubelet without QoS cgroups sends none): a pod's
// figures are then sums, of its containers' cgroups and of the cgroups of what runs beside
// them: its pause process and each container's conmon; no available_bytes (no pod limit).
func TestPodStatsSharedCgroup(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	shared := func(cfg map[string]any) { namespaceOptions(cfg)["pid"] = int(runtimeapi.NamespaceMode_POD) }
	pod := d.editedPod(t, "stats-shared", shared)
	podID := d.mustRunp(t, pod)
	reaper.add(podID)
	other := d.containerPod(t, "stats-other", false)
	otherID := d.mustRunp(t, other)
	id := d.run(t, podID, containerConfig(t, "c", 0, sleeper, shared), pod)
	d.waitLog(t, id, "hello-from-container", 30*time.Second)
	ctrProcs := cgroupProcs(t, d.memoryCgroup(t, id))

	stats := d.podStats(t, "--id", podID)
	if len(stats) != 1 || len(stats[0].GetLinux().GetContainers()) != 1 {
		t.Fatalf("crictl statsp --id %s: %v, want the pod with its container", podID, stats)
	}
	linux := stats[0].GetLinux()
	ctr := linux.GetContainers()[0]
	if got, want := linux.GetProcess().GetProcessCount().GetValue(), uint64(ctrProcs+2); got != want {
		t.Errorf("statsp process count %d, want %d: the container's %d, the pause process and conmon", got, want, ctrProcs)
	}
	if ws := linux.GetMemory().GetWorkingSetBytes().GetValue(); ws <= ctr.GetMemory().GetWorkingSetBytes().GetValue() {
		t.Errorf("statsp working set %d, want above the container's %d", ws, ctr.GetMemory().GetWorkingSetBytes().GetValue())
	}
	if avail := linux.GetMemory().GetAvailableBytes(); avail != nil {
		t.Errorf("statsp available_bytes %v, want none for a pod without a cgroup of its own", avail)
	}
	// Its CPU rate is the rate of the CPU time it reports, which counts its pause process
	// and conmons, as a pod cgroup's rate does: a container that logs keeps its conmon busy.
	logger := d.run(t, podID, containerConfig(t, "logger", 0, chatty, shared), pod)
	d.waitLog(t, logger, "hello-from-container", 30*time.Second)
	checkPodRate(t, d, podID)
	d.removeCtr(t, logger)
	d.removeCtr(t, id)
	d.removePod(t, podID)
	d.removePod(t, otherID)
	d.stopClean(t)
}

// chatty logs 10,000 lines a second, in bursts, which keeps its conmon busy.
var chatty = []string{"sh", "-c", "echo hello-from-container; while :; do i=0; while [ $i -lt 10000 ]; do echo chatty-chatty-chatty-chatty; i=$((i+1)); done; sleep 1; done"}

// checkPodRate is issue 51's item 7 (pod stats) for a pod's CPU rate: over two
// PodSandboxStats 3 s apart (the first gives every cgroup counted a sample to rate from),
// the pod's usage_nano_cores is the rate of its usage_core_nano_seconds, which counts
// more than its containers (the kubelet reads the rate as the pod's: its summary API's
// pod cpu.usageNanoCores). What the pod ran beside its containers (its pause process,
// their conmons) must have used CPU meanwhile, or the check could not tell their rate
// left out.
func checkPodRate(t *testing.T, d *daemon, podID string) {
	t.Helper()
	rt := d.cri(t)
	sample := func() *runtimeapi.PodSandboxStats {
		t.Helper()
		resp, err := rt.PodSandboxStats(t.Context(), &runtimeapi.PodSandboxStatsRequest{PodSandboxId: podID})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStats()
	}
	ctrUsage := func(st *runtimeapi.PodSandboxStats) map[string]uint64 {
		m := map[string]uint64{}
		for _, c := range st.GetLinux().GetContainers() {
			m[c.GetAttributes().GetId()] = c.GetCpu().GetUsageCoreNanoSeconds().GetValue()
		}
		return m
	}
	a := sample()
	time.Sleep(3 * time.Second)
	b := sample()
	ca, cb := a.GetLinux().GetCpu(), b.GetLinux().GetCpu()
	secs := float64(cb.GetTimestamp()-ca.GetTimestamp()) / 1e9
	used := float64(cb.GetUsageCoreNanoSeconds().GetValue() - ca.GetUsageCoreNanoSeconds().GetValue())
	beside := used
	for id, u := range ctrUsage(b) {
		before, ok := ctrUsage(a)[id]
		if !ok {
			t.Fatalf("container %s in the second sample only", id)
		}
		beside -= float64(u - before)
	}
	rate, want := float64(cb.GetUsageNanoCores().GetValue()), used/secs
	tolerance := 0.02*want + 2e6 // the samples of its cgroups are read a little apart
	t.Logf("pod CPU over %.2f s: rate %.0f nano cores, its usage's %.0f, beside its containers %.0f", secs, rate, want, beside/secs)
	if beside/secs < 2*tolerance {
		t.Fatalf("the pause process and conmons used %.0f nano cores; the check needs %.0f or more", beside/secs, 2*tolerance)
	}
	if rate < want-tolerance || rate > want+tolerance {
		t.Errorf("the pod's usage_nano_cores %.0f, the rate of its usage_core_nano_seconds %.0f (of which %.0f beside its containers)", rate, want, beside/secs)
	}
}

// cgroupProcs counts the processes of a cgroup of the memory hierarchy (the unified one
// on cgroup v2).
func cgroupProcs(t *testing.T, cgroup string) int {
	t.Helper()
	root := "/sys/fs/cgroup/memory"
	if cgroupV2Node() {
		root = "/sys/fs/cgroup"
	}
	b, err := os.ReadFile(filepath.Join(root, cgroup, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(b)))
}
