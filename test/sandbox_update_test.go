package test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	sdcgroups "github.com/opencontainers/cgroups/systemd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// podCgroupFiles returns where the limits of a pod's cgroup (its cgroup_parent) are
// read, by file name: cgroup v1's per-controller files, or v2's unified ones, with the
// values the figures are written as.
func podCgroupFiles(t *testing.T, parent string, shares, quota, period, memory int64) map[string]string {
	t.Helper()
	dir := parent
	if e2eSystemd() {
		var err error
		if dir, err = sdcgroups.ExpandSlice(parent); err != nil {
			t.Fatal(err)
		}
	}
	if cgroupV2Node() {
		return map[string]string{
			filepath.Join("/sys/fs/cgroup", dir, "cpu.max"):    fmt.Sprintf("%d %d", quota, period),
			filepath.Join("/sys/fs/cgroup", dir, "cpu.weight"): fmt.Sprint(cgroups.ConvertCPUSharesToCgroupV2Value(uint64(shares))),
			filepath.Join("/sys/fs/cgroup", dir, "memory.max"): fmt.Sprint(memory),
		}
	}
	return map[string]string{
		filepath.Join("/sys/fs/cgroup/cpu", dir, "cpu.shares"):               fmt.Sprint(shares),
		filepath.Join("/sys/fs/cgroup/cpu", dir, "cpu.cfs_quota_us"):         fmt.Sprint(quota),
		filepath.Join("/sys/fs/cgroup/cpu", dir, "cpu.cfs_period_us"):        fmt.Sprint(period),
		filepath.Join("/sys/fs/cgroup/memory", dir, "memory.limit_in_bytes"): fmt.Sprint(memory),
	}
}

// podStatusResources returns the overhead and resources PodSandboxStatus's verbose info
// shows for a pod.
func podStatusResources(t *testing.T, ctx context.Context, rt runtimeapi.RuntimeServiceClient, id string) (overhead, resources *runtimeapi.LinuxContainerResources) {
	t.Helper()
	st, err := rt.PodSandboxStatus(ctx, &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Overhead  *runtimeapi.LinuxContainerResources `json:"overhead"`
		Resources *runtimeapi.LinuxContainerResources `json:"resources"`
	}
	mustDecode(t, "PodSandboxStatus info", []byte(st.GetInfo()["info"]), &info)
	return info.Overhead, info.Resources
}

// TestUpdatePodSandboxResources resizes a running pod as a kubelet with pod-level
// resources does (overhead and the sum of its containers' resources, in the kubelet's
// figures) and reads the pod's own cgroup back: CPU shares (weight on v2), the CFS
// quota and period, the memory limit, the two parts added up; again after a second,
// smaller resize. PodSandboxStatus shows the figures, also after a daemon restart.
// Refused: an unknown pod (NotFound), nonsense figures (InvalidArgument), and, with the
// cgroupfs driver, a pod whose cgroup nothing has made yet (FailedPrecondition).
func TestUpdatePodSandboxResources(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	rt := d.cri(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A pod with a cgroup of its own below the node's (the container tests' pods share
	// the node's), as the kubelet's pod<uid> cgroup.
	var parent string
	pod := d.editedPod(t, "resize", func(cfg map[string]any) {
		linux := cfg["linux"].(map[string]any)
		if !e2eSystemd() {
			uid := cfg["metadata"].(map[string]any)["uid"].(string)
			linux["cgroup_parent"] = d.cgroupParent + "/pod" + uid[:8]
		}
		parent = linux["cgroup_parent"].(string)
	})
	podID := d.mustRunp(t, pod)
	overhead := &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 25000, MemoryLimitInBytes: 64 << 20}
	resources := &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 256 << 20}
	update := func(id string, overhead, resources *runtimeapi.LinuxContainerResources) error {
		_, err := rt.UpdatePodSandboxResources(ctx, &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: id, Overhead: overhead, Resources: resources})
		return err
	}
	if !e2eSystemd() {
		err := update(podID, overhead, resources)
		if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("UpdatePodSandboxResources before the pod's cgroup exists: %v; want FailedPrecondition saying it does not exist", err)
		}
	}
	id := d.run(t, podID, containerConfig(t, "app", 0, sleeper), pod)

	if err := update(podID, overhead, resources); err != nil {
		t.Fatalf("UpdatePodSandboxResources: %v", err)
	}
	// 250m + 500m = 750m: 768 shares, 75000 of 100000 µs; 64 + 256 MiB.
	for file, want := range podCgroupFiles(t, parent, 768, 75000, 100000, 320<<20) {
		if got := readTrimmed(t, file); got != want {
			t.Errorf("after the resize %s is %q, want %q", file, got, want)
		}
	}
	o, r := podStatusResources(t, ctx, rt, podID)
	if r.GetMemoryLimitInBytes() != 256<<20 || o.GetCpuQuota() != 25000 {
		t.Errorf("PodSandboxStatus shows overhead %v and resources %v, want the update's", o, r)
	}

	// Smaller: 250m + 250m, 64 + 128 MiB.
	resources = &runtimeapi.LinuxContainerResources{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 25000, MemoryLimitInBytes: 128 << 20}
	if err := update(podID, overhead, resources); err != nil {
		t.Fatalf("UpdatePodSandboxResources, smaller: %v", err)
	}
	for file, want := range podCgroupFiles(t, parent, 512, 50000, 100000, 192<<20) {
		if got := readTrimmed(t, file); got != want {
			t.Errorf("after the smaller resize %s is %q, want %q", file, got, want)
		}
	}

	for _, tc := range []struct {
		name string
		id   string
		res  *runtimeapi.LinuxContainerResources
		code codes.Code
	}{
		{"unknown pod", strings.Repeat("ab", 32), resources, codes.NotFound},
		{"negative memory", podID, &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -1}, codes.InvalidArgument},
		{"quota under 1 ms", podID, &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 10}, codes.InvalidArgument},
	} {
		if err := update(tc.id, overhead, tc.res); status.Code(err) != tc.code {
			t.Errorf("UpdatePodSandboxResources, %s: %v; want %v", tc.name, err, tc.code)
		}
	}

	d.restart(t)
	o, r = podStatusResources(t, ctx, d.cri(t), podID)
	if r.GetMemoryLimitInBytes() != 128<<20 || r.GetCpuShares() != 256 || o.GetMemoryLimitInBytes() != 64<<20 {
		t.Errorf("after a restart PodSandboxStatus shows resources %v and overhead %v, want the last update's", r, o)
	}
	d.removeCtr(t, id)
	d.removePod(t, podID)
	if !e2eSystemd() {
		// The pod's cgroup is the kubelet's, which removes it with the pod; here the
		// test made it (through the container's runtime), and removes it.
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", parent))
		for _, dir := range dirs {
			if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("remove the pod's cgroup %s: %v", dir, err)
			}
		}
	}
	d.stopClean(t)
}
