package oci

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
)

// CgroupStats is what a container's cgroup says about its use of CPU and memory, read
// through github.com/opencontainers/cgroups (cgroup v1 or v2, whichever the node runs).
type CgroupStats struct {
	// Timestamp is when the figures were read.
	Timestamp time.Time
	// CPUUsageNanos is the CPU time used by every process of the cgroup so far,
	// in core nanoseconds (cumulative).
	CPUUsageNanos uint64
	// MemoryUsage is the memory charged to the cgroup, page cache included.
	MemoryUsage uint64
	// MemoryWorkingSet is MemoryUsage less the inactive file cache, what the
	// kubelet evicts on (cAdvisor's and containerd's definition).
	MemoryWorkingSet uint64
	// MemoryLimit is the cgroup's memory limit; 0 when it has none.
	MemoryLimit uint64
	// RSS is the anonymous memory (v1 total_rss, v2 anon).
	RSS uint64
	// PageFaults and MajorPageFaults count page faults (v1 total_pgfault and
	// total_pgmajfault, v2 pgfault and pgmajfault).
	PageFaults, MajorPageFaults uint64
	// Processes is the number of processes (tasks) in the cgroup.
	Processes uint64
}

// ErrNoCgroup is returned by Stats for a container whose cgroup is not known: it was
// not created by this runtime, or its state directory is gone.
var ErrNoCgroup = errors.New("container cgroup not known")

// statControllers are the controllers Stats reads; the others (blkio, hugetlb, rdma,
// ...) cost file reads the CRI does not report.
const statControllers = cgroups.CPU | cgroups.Memory | cgroups.Pids

// cgroupManagers keeps one cgroup manager per container ID, made from the cgroupsPath
// that Create recorded in the container's meta: the kubelet asks for every container's
// stats every few seconds, and a manager finds its per-controller paths once.
type cgroupManagers struct {
	mu sync.Mutex
	m  map[string]cgroups.Manager
}

// get returns the manager of the container whose cgroupsPath is read by path.
func (c *cgroupManagers) get(id string, path func() string) (cgroups.Manager, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.m[id]; ok {
		return m, nil
	}
	p := path()
	if p == "" {
		return nil, fmt.Errorf("stats of %s: %w", id, ErrNoCgroup)
	}
	// Read only: the devices controller is not needed (and may be absent).
	m, err := manager.New(&cgroups.Cgroup{Path: p, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return nil, fmt.Errorf("stats of %s: cgroup %s: %w", id, p, err)
	}
	if c.m == nil {
		c.m = map[string]cgroups.Manager{}
	}
	c.m[id] = m
	return m, nil
}

// forget drops the manager of a deleted container.
func (c *cgroupManagers) forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.mu.Unlock()
}

// Stats reads a container's cgroup. It forks no process: the cgroup path comes from
// what Create recorded, and the figures from the cgroup file system. A container whose
// cgroup is gone (the runtime removed it) gives zero figures, not an error; one whose
// cgroup this runtime never recorded gives ErrNoCgroup.
func (r *Runtime) Stats(id string) (CgroupStats, error) {
	if err := validID(id); err != nil {
		return CgroupStats{}, err
	}
	m, err := r.cgroups.get(id, func() string { return cgroupsPathOf(r.readMeta(id)) })
	if err != nil {
		return CgroupStats{}, err
	}
	st := CgroupStats{Timestamp: time.Now()}
	if !m.Exists() {
		return st, nil
	}
	cs, err := m.Stats(&cgroups.StatsOptions{Controllers: statControllers})
	if err != nil {
		return CgroupStats{}, fmt.Errorf("stats of %s: %w", id, err)
	}
	return convertStats(cs, st.Timestamp, cgroups.IsCgroup2UnifiedMode()), nil
}

// convertStats picks the CRI's figures out of the library's, whose memory keys differ
// between cgroup v1 and v2.
func convertStats(cs *cgroups.Stats, at time.Time, v2 bool) CgroupStats {
	mem := cs.MemoryStats
	st := CgroupStats{
		Timestamp:     at,
		CPUUsageNanos: cs.CpuStats.CpuUsage.TotalUsage,
		MemoryUsage:   mem.Usage.Usage,
		Processes:     cs.PidsStats.Current,
	}
	inactiveFile, rss, faults, major := "total_inactive_file", "total_rss", "total_pgfault", "total_pgmajfault"
	if v2 {
		inactiveFile, rss, faults, major = "inactive_file", "anon", "pgfault", "pgmajfault"
	}
	st.MemoryWorkingSet = st.MemoryUsage
	if inactive := mem.Stats[inactiveFile]; inactive < st.MemoryWorkingSet {
		st.MemoryWorkingSet -= inactive
	} else {
		st.MemoryWorkingSet = 0
	}
	st.RSS = mem.Stats[rss]
	st.PageFaults = mem.Stats[faults]
	st.MajorPageFaults = mem.Stats[major]
	// No limit reads as the largest page-aligned value (v1) or max (v2).
	if l := mem.Usage.Limit; l != 0 && l < 1<<62 {
		st.MemoryLimit = l
	}
	return st
}
