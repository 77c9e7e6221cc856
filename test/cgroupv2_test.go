package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// The cgroup v2 node (issue 27): what a container's limits, stats and update look like
// in the unified hierarchy. This machine runs cgroup v1, so these tests run in the
// VM of `make test-vm` (test/vm), which boots a kernel with cgroup v2 only and AppArmor;
// there vmNodeEnv is set and a missing v2 hierarchy or AppArmor fails instead of skipping.

// vmNodeEnv is set by test/vm/inside.sh: the tests run on the cgroup v2 + AppArmor node
// they were written for, so that node's features are prerequisites, not options.
const vmNodeEnv = "CRIJOURNAL_E2E_VM_NODE"

// cgroupV2Node reports whether /sys/fs/cgroup is the unified (v2) hierarchy alone.
func cgroupV2Node() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// requireCgroupV2 stops a test of the unified hierarchy on a node without it: it skips
// (the host of `make test` runs cgroup v1), or fails where vmNodeEnv says the node has it.
func requireCgroupV2(t *testing.T) {
	t.Helper()
	if cgroupV2Node() {
		return
	}
	if os.Getenv(vmNodeEnv) != "" {
		t.Fatal("this node was to have cgroup v2 only (" + vmNodeEnv + " is set), but /sys/fs/cgroup is not a cgroup2 file system")
	}
	t.Skip("needs a cgroup v2 node: run it with `make test-vm`")
}

// memoryLimitFile is the file of a container's memory limit, for its memory cgroup as
// memoryCgroup gives it: memory.max on cgroup v2, memory.limit_in_bytes on v1.
func memoryLimitFile(cgroup string) string {
	if cgroupV2Node() {
		return filepath.Join("/sys/fs/cgroup", cgroup, "memory.max")
	}
	return filepath.Join("/sys/fs/cgroup/memory", cgroup, "memory.limit_in_bytes")
}

// readTrimmed returns the content of a file without its surrounding white space.
func readTrimmed(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestCgroupV2Limits runs a container with CPU, memory and pids limits on a cgroup v2
// node and checks them in its cgroup (cpu.max, memory.max, pids.max through the CRI's
// unified map, cpu.weight from the shares), changes them with UpdateContainerResources,
// reads its stats (CPU, memory and pressure from the v2 files), and removes it leaving
// no cgroup.
func TestCgroupV2Limits(t *testing.T) {
	requireCgroupV2(t)
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "v2-limits", false)
	podID := d.mustRunp(t, pod)
	busy := []string{"sh", "-c", "echo started; while :; do :; done"}
	id := d.run(t, podID, containerConfig(t, "limited", 0, busy, withResources(map[string]any{
		"cpu_period": 100000, "cpu_quota": 50000, "cpu_shares": 512,
		"memory_limit_in_bytes": 64 << 20,
		"unified":               map[string]string{"pids.max": "64", "memory.high": fmt.Sprint(48 << 20)},
	})), pod)
	d.waitLog(t, id, "started", 30*time.Second)
	cg := filepath.Join("/sys/fs/cgroup", d.memoryCgroup(t, id))
	// cpu.weight is the shares converted by the runtime: the project's runc (1.3.7) maps
	// them with opencontainers/cgroups' quadratic fit (1024 -> 100; 512 -> 59).
	for file, want := range map[string]string{
		"cpu.max":     "50000 100000",
		"cpu.weight":  fmt.Sprint(cgroups.ConvertCPUSharesToCgroupV2Value(512)),
		"memory.max":  fmt.Sprint(64 << 20),
		"memory.high": fmt.Sprint(48 << 20),
		"pids.max":    "64",
	} {
		if got := readTrimmed(t, filepath.Join(cg, file)); got != want {
			t.Errorf("%s of the container is %q, want %q", file, got, want)
		}
	}

	// UpdateContainerResources changes the v2 files while it runs.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.cri(t).UpdateContainerResources(ctx, &runtimeapi.UpdateContainerResourcesRequest{
		ContainerId: id,
		Linux: &runtimeapi.LinuxContainerResources{CpuPeriod: 100000, CpuQuota: 20000, CpuShares: 1024,
			MemoryLimitInBytes: 96 << 20, Unified: map[string]string{"pids.max": "32"}},
	}); err != nil {
		t.Fatalf("UpdateContainerResources: %v", err)
	}
	for file, want := range map[string]string{
		"cpu.max":    "20000 100000",
		"cpu.weight": fmt.Sprint(cgroups.ConvertCPUSharesToCgroupV2Value(1024)),
		"memory.max": fmt.Sprint(96 << 20),
		"pids.max":   "32",
	} {
		if got := readTrimmed(t, filepath.Join(cg, file)); got != want {
			t.Errorf("after UpdateContainerResources, %s is %q, want %q", file, got, want)
		}
	}
	if st, err := d.cri(t).ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: id}); err != nil {
		t.Fatal(err)
	} else if r := st.GetStatus().GetResources().GetLinux(); r.GetMemoryLimitInBytes() != 96<<20 || r.GetCpuQuota() != 20000 {
		t.Errorf("ContainerStatus resources after the update: %v, want memory 96 MiB and CPU quota 20000", r)
	}

	// Stats from the v2 files: the busy loop shows as CPU time and, held to half a
	// core, as CPU pressure; memory and I/O pressure are reported (zero or not).
	testenv.Eventually(t, 60*time.Second, 500*time.Millisecond, func() error {
		resp, err := d.cri(t).ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
		if err != nil {
			return err
		}
		s := resp.GetStats()
		switch {
		case s.GetCpu().GetUsageCoreNanoSeconds().GetValue() == 0:
			return fmt.Errorf("no CPU time in %v", s.GetCpu())
		case s.GetMemory().GetWorkingSetBytes().GetValue() == 0 || s.GetMemory().GetAvailableBytes() == nil:
			return fmt.Errorf("memory stats without a working set or available bytes: %v", s.GetMemory())
		case s.GetCpu().GetPsi().GetSome().GetTotal() == 0:
			return fmt.Errorf("no CPU pressure for a container held to half a core: %v", s.GetCpu().GetPsi())
		case s.GetMemory().GetPsi() == nil || s.GetIo().GetPsi() == nil:
			return fmt.Errorf("memory or I/O pressure missing: memory %v, io %v", s.GetMemory().GetPsi(), s.GetIo())
		}
		return nil
	})

	d.mustCrictl(t, "rm", "-f", id)
	if _, err := os.Stat(cg); !os.IsNotExist(err) {
		t.Errorf("the removed container's cgroup %s is still there (%v)", cg, err)
	}
	d.removePod(t, podID)
}

// TestCgroupV2OOMKilled: a container killed by the kernel for going over its memory.max
// is reported OOMKilled, from the v2 cgroup's memory.events.
func TestCgroupV2OOMKilled(t *testing.T) {
	requireCgroupV2(t)
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "v2-oom", false)
	podID := d.mustRunp(t, pod)
	oom := d.run(t, podID, containerConfig(t, "oom", 0, []string{"sh", "-c", "a=0123456789abcdef; while true; do a=$a$a; done"},
		withMemoryLimit(16<<20)), pod)
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, testenv.Until("the container to exit", func() bool {
		return d.inspect(t, oom).Status.State == "CONTAINER_EXITED"
	}))
	st := d.requireExited(t, oom, 137)
	if st.Status.Reason != "OOMKilled" {
		t.Errorf("a container killed for want of memory on cgroup v2: reason %q, want OOMKilled", st.Status.Reason)
	}
	d.mustCrictl(t, "rm", oom)
	d.removePod(t, podID)
}

// statErr is os.Stat's error alone.
func statErr(path string) error {
	_, err := os.Stat(path)
	return err
}
