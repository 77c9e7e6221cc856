package test

import (
	"context"
	"os"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestSwapStats checks swap in ContainerStats and ListContainerStats: a container with
// a memory limit of 64 MiB and a memory+swap limit of 96 MiB has 32 MiB of swap, which
// swap_available_bytes reports less what it uses (swap_usage_bytes), read from
// memory.memsw.* (v1, with swap accounting) or memory.swap.* (v2).
func TestSwapStats(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err != nil && !cgroupV2Node() {
		testenv.Need(t, "TestSwapStats needs swap accounting (memory.memsw.*, swapaccount=1): %v", err)
	}
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "swap", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "swapper", 0, sleeper, withResources(map[string]any{
		"memory_limit_in_bytes": 64 << 20, "memory_swap_limit_in_bytes": 96 << 20,
	})), pod)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt := d.cri(t)
	one, err := rt.ContainerStats(ctx, &runtimeapi.ContainerStatsRequest{ContainerId: id})
	if err != nil {
		t.Fatal(err)
	}
	list, err := rt.ListContainerStats(ctx, &runtimeapi.ListContainerStatsRequest{Filter: &runtimeapi.ContainerStatsFilter{Id: id}})
	if err != nil || len(list.GetStats()) != 1 {
		t.Fatalf("ListContainerStats of %s: %v, %v", id, list, err)
	}
	for what, st := range map[string]*runtimeapi.ContainerStats{"ContainerStats": one.GetStats(), "ListContainerStats": list.GetStats()[0]} {
		sw := st.GetSwap()
		if sw == nil || sw.GetTimestamp() == 0 || sw.GetSwapUsageBytes() == nil || sw.GetSwapAvailableBytes() == nil {
			t.Fatalf("%s swap %v: want usage, available and a timestamp", what, sw)
		}
		if used, avail := sw.GetSwapUsageBytes().GetValue(), sw.GetSwapAvailableBytes().GetValue(); used+avail != 32<<20 && used < 32<<20 {
			t.Errorf("%s swap: %d used + %d available, want the 32 MiB limit", what, used, avail)
		}
	}
	d.removeCtr(t, id)
	d.assertNoLeaks(t, podID)
	d.removePod(t, podID)
	d.stopClean(t)
}
