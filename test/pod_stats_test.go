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
	d.removeCtr(t, id)
	d.removePod(t, podID)
	d.removePod(t, otherID)
	d.stopClean(t)
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
