package oci

import (
	"errors"
	"os/exec"
	"testing"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// TestPodStats: a pod's stats are its own cgroup's, which counts what runs in each of its
// child cgroups (containers, the pause process, conmons), with the pod's memory limit;
// a pod without a cgroup_parent has none of its own.
func TestPodStats(t *testing.T) {
	if _, err := PodStats("", false); !errors.Is(err, ErrNoPodCgroup) {
		t.Fatalf("PodStats without a parent: %v, want ErrNoPodCgroup", err)
	}
	pod, _ := newTestCgroup(t)
	const limit = 64 << 20
	if err := pod.Set(&cgroups.Resources{Memory: limit, SkipDevices: true}); err != nil {
		t.Fatal(err)
	}
	parent := pod.Path("memory")
	if cgroups.IsCgroup2UnifiedMode() {
		parent = pod.Path("")
	}
	rel := parent[len(cgroupRootOf()):]

	// Two processes in two child cgroups, as a container and a pause process are.
	for _, name := range []string{"ctr", "pause"} {
		child, err := manager.New(&cgroups.Cgroup{Path: rel + "/" + name, Resources: &cgroups.Resources{SkipDevices: true}})
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if err := child.Destroy(); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		})
		if err := child.Apply(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	st, err := PodStats(rel, false)
	if err != nil {
		t.Fatal(err)
	}
	if st.Processes != 2 || st.MemoryLimit != limit || st.MemoryUsage == 0 {
		t.Fatalf("PodStats = processes %d, memory limit %d, usage %d; want 2 processes, limit %d, some memory",
			st.Processes, st.MemoryLimit, st.MemoryUsage, limit)
	}
}

// cgroupRootOf returns the mount point of the hierarchy the test reads (memory's on v1).
func cgroupRootOf() string {
	if cgroups.IsCgroup2UnifiedMode() {
		return unifiedRoot
	}
	return "/sys/fs/cgroup/memory"
}

// TestConmonStats: a container's conmon is read from its own cgroup beside the
// container's (one process, some memory); a container this runtime never recorded has
// none.
func TestConmonStats(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sleep", "30"}, nil)
	st, err := r.ConmonStats(c.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Processes != 1 || st.MemoryUsage == 0 {
		t.Errorf("ConmonStats = %d processes, %d bytes; want conmon, 1 process using some memory", st.Processes, st.MemoryUsage)
	}
	if _, err := r.ConmonStats("unknown"); !errors.Is(err, ErrNoCgroup) {
		t.Errorf("ConmonStats of an unknown container: %v, want ErrNoCgroup", err)
	}
}
