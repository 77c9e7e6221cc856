package oci

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"golang.org/x/sys/unix"
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
	// PSI is the cgroup's pressure stall information (cgroup v2 only).
	PSI PSI
	// Swap is the cgroup's swap; nil where the cgroup has no swap accounting (cgroup
	// v1 without swapaccount=1).
	Swap *Swap
}

// ErrNoCgroup is returned by Stats for a container whose cgroup is not known: it was
// not created by this runtime, or its state directory is gone.
var ErrNoCgroup = errors.New("container cgroup not known")

// cgroupManagers keeps, per container ID, the cgroup manager and the directories Stats
// reads, made from the cgroupsPath that Create recorded in the container's meta: the
// kubelet asks for every container's stats every few seconds, and the library finds
// the per-controller paths once.
type cgroupManagers struct {
	mu sync.Mutex
	m  map[string]cgroupEntry
	// budget bounds the files the entries keep open, together.
	budget fdBudget
}

// cgroupEntry is a container's cgroup manager, the directories of its cgroup that
// Stats reads, the files of those that Stats, CPUUsage and Metrics keep open, and Stats'
// last reading, which Metrics may take (recentStats).
type cgroupEntry struct {
	m      cgroups.Manager
	dir    statDirs
	kept   *keptFiles
	recent *recentStats
}

// statDirs are the directories of one cgroup that readStats and readMetrics read: on
// cgroup v1 one per controller, as the library resolved them ("" for a controller that
// is not mounted; cpu is cpuacct's, cpuCtl the cpu controller's); on cgroup v2 the one
// unified directory in all of them.
type statDirs struct {
	v2                               bool
	cpu, cpuCtl, memory, pids, blkio string
}

// statDirsOf returns the directories of m's cgroup, from the library's path resolution.
func statDirsOf(m cgroups.Manager, v2 bool) statDirs {
	if v2 {
		p := m.Path("")
		return statDirs{v2: true, cpu: p, cpuCtl: p, memory: p, pids: p, blkio: p}
	}
	paths := m.GetPaths()
	return statDirs{cpu: paths["cpuacct"], cpuCtl: paths["cpu"], memory: paths["memory"], pids: paths["pids"], blkio: paths["blkio"]}
}

// psi returns the directory whose pressure files readStats reads: the unified one on
// cgroup v2, "" (none) on v1.
func (d statDirs) psi() string {
	if d.v2 {
		return d.cpu
	}
	return ""
}

// get returns the cgroup of the container whose cgroupsPath is read by path.
func (c *cgroupManagers) get(id string, path func() string) (cgroupEntry, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[id]; ok {
		return e, nil
	}
	p := path()
	if p == "" {
		return cgroupEntry{}, fmt.Errorf("stats of %s: %w", id, ErrNoCgroup)
	}
	// Read only, through the cgroupfs manager whatever the driver (a systemd scope is
	// read at its directory: no D-Bus call per poll). The devices controller is not
	// needed (and may be absent).
	dir, err := cgroupDir(p)
	if err != nil {
		return cgroupEntry{}, fmt.Errorf("stats of %s: cgroup %s: %w", id, p, err)
	}
	m, err := manager.New(&cgroups.Cgroup{Path: dir, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return cgroupEntry{}, fmt.Errorf("stats of %s: cgroup %s: %w", id, p, err)
	}
	if c.m == nil {
		c.m = map[string]cgroupEntry{}
	}
	e := cgroupEntry{m: m, dir: statDirsOf(m, cgroups.IsCgroup2UnifiedMode()), kept: &keptFiles{budget: &c.budget}, recent: &recentStats{}}
	c.m[id] = e
	return e, nil
}

// gone says whether err, from a read of the entry's cgroup, says that the cgroup is not
// there: a file of it missing or removed (cgroupGone), and the manager's directory gone.
// The stats calls read first and look at the directory only when a read failed, so that
// the read of a cgroup that is there stats no directory (one a container a call; with 100
// pods a twentieth of an idle node's CPU went to it). readStats reads a missing file as
// no figure, so a cgroup removed before the read gives zero figures either way.
func (e cgroupEntry) gone(err error) bool {
	return err != nil && cgroupGone(err) && !e.m.Exists()
}

// forget drops the manager of a deleted container, and closes the files it kept open.
func (c *cgroupManagers) forget(id string) {
	c.mu.Lock()
	e, ok := c.m[id]
	delete(c.m, id)
	c.mu.Unlock()
	if ok {
		e.kept.close()
	}
}

// Stats reads a container's cgroup. It forks no process: the cgroup path comes from
// what Create recorded, and the figures from the cgroup file system. A container whose
// cgroup is gone (the runtime removed it) gives zero figures, not an error; one whose
// cgroup this runtime never recorded gives ErrNoCgroup.
func (r *Runtime) Stats(id string) (CgroupStats, error) {
	if err := validID(id); err != nil {
		return CgroupStats{}, err
	}
	e, err := r.cgroups.get(id, func() string { return cgroupsPathOf(r.readMeta(id)) })
	if err != nil {
		return CgroupStats{}, err
	}
	st := CgroupStats{Timestamp: time.Now()}
	f := cgroupFilesPool.Get().(*cgroupFiles)
	defer cgroupFilesPool.Put(f)
	defer f.use(e.kept)()
	cs, err := f.readStats(e.dir)
	if e.gone(err) {
		e.recent.clear()
		return st, nil
	}
	if err != nil {
		return CgroupStats{}, fmt.Errorf("stats of %s: %w", id, err)
	}
	st = convertStats(cs, st.Timestamp, e.dir.v2)
	swap, ok, err := f.readSwap(e.dir, cs.MemoryStats.Usage)
	if e.gone(err) {
		e.recent.clear()
		return CgroupStats{Timestamp: st.Timestamp}, nil
	}
	if err != nil {
		return CgroupStats{}, fmt.Errorf("stats of %s: swap: %w", id, err)
	}
	if ok {
		st.Swap = &swap
	}
	e.recent.store(st.Timestamp, cs)
	return st, nil
}

// CPUUsage reads a container's CPU time in nanoseconds, and nothing else: one file
// (cpuacct.usage on v1, cpu.stat on v2), for a caller that wants to know whether the
// container's processes ran since it last looked (the writable layers' collector). A
// container whose cgroup is gone reads 0; one whose cgroup this runtime never recorded
// gives ErrNoCgroup.
func (r *Runtime) CPUUsage(id string) (uint64, error) {
	if err := validID(id); err != nil {
		return 0, err
	}
	e, err := r.cgroups.get(id, func() string { return cgroupsPathOf(r.readMeta(id)) })
	if err != nil {
		return 0, err
	}
	if e.dir.cpu == "" {
		return 0, nil
	}
	read := readCPUv1
	if e.dir.v2 {
		read = readCPUv2
	}
	f := cgroupFilesPool.Get().(*cgroupFiles)
	defer cgroupFilesPool.Put(f)
	defer f.use(e.kept)()
	var cs cgroups.Stats
	if err := read(f, e.dir.cpu, &cs); errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	} else if err != nil {
		return 0, fmt.Errorf("CPU time of %s: %w", id, err)
	}
	return cs.CpuStats.CpuUsage.TotalUsage, nil
}

// readStats reads the part of the library's Stats that convertStats uses, five files
// (eight on v2, with the pressure files) instead of the library's ~25 on cgroup v1 (see
// docs/BENCHMARKS.md, "Container stats"), through the library's file helpers:
//
//	           v1 (cpuacct, memory, pids dirs)     v2 (one dir)
//	CPU        cpuacct.usage (ns)                  cpu.stat usage_usec (x 1000)
//	memory     memory.stat, memory.usage_in_bytes, memory.stat, memory.current,
//	           memory.limit_in_bytes               memory.max
//	processes  pids.current                        pids.current (or the lines of
//	                                               cgroup.procs without the pids controller)
//	pressure   (none)                              cpu.pressure, memory.pressure, io.pressure
//
// As in the library, a controller that is not mounted (v1) or whose files are missing
// gives zero figures; a missing file of a controller that was read in part (its cgroup
// was removed meanwhile) zeroes that controller's figures rather than failing.
func readStats(d statDirs) (*cgroups.Stats, error) {
	f := cgroupFilesPool.Get().(*cgroupFiles)
	defer cgroupFilesPool.Put(f)
	return f.readStats(d)
}

// readStats is readStats through f.
func (f *cgroupFiles) readStats(d statDirs) (*cgroups.Stats, error) {
	cs := cgroups.NewStats()
	cpu, memory, pids := readCPUv1, readMemory("memory.usage_in_bytes", "memory.limit_in_bytes"), readPidsV1
	if d.v2 {
		cpu, memory, pids = readCPUv2, readMemory("memory.current", "memory.max"), readPidsV2
	}
	for _, c := range []struct {
		dir  string
		read func(f *cgroupFiles, dir string, cs *cgroups.Stats) error
	}{{d.cpu, cpu}, {d.memory, memory}, {d.pids, pids}, {d.psi(), readPSI}} {
		if c.dir == "" {
			continue
		}
		if err := c.read(f, c.dir, cs); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return cs, nil
}

// The readers below set their figures in cs only once every file of theirs was read.

// readCPUv1 reads cpuacct.usage, the cgroup's CPU time in nanoseconds.
func readCPUv1(f *cgroupFiles, dir string, cs *cgroups.Stats) error {
	v, err := f.uint(dir, "cpuacct.usage")
	if err != nil {
		return err
	}
	cs.CpuStats.CpuUsage.TotalUsage = v
	return nil
}

// readCPUv2 reads usage_usec of cpu.stat, in nanoseconds as the library gives it.
func readCPUv2(f *cgroupFiles, dir string, cs *cgroups.Stats) error {
	kv, err := f.keyValues(dir, "cpu.stat")
	if err != nil {
		return err
	}
	cs.CpuStats.CpuUsage.TotalUsage = kv["usage_usec"] * 1000
	return nil
}

// readMemory returns a reader of memory.stat (every key) and of the usage and limit
// files named.
func readMemory(usage, limit string) func(f *cgroupFiles, dir string, cs *cgroups.Stats) error {
	return func(f *cgroupFiles, dir string, cs *cgroups.Stats) error {
		stats, err := f.keyValues(dir, "memory.stat")
		if err != nil {
			return err
		}
		var m cgroups.MemoryData
		if m.Usage, err = f.uint(dir, usage); err != nil {
			return err
		}
		if m.Limit, err = f.uint(dir, limit); err != nil {
			return err
		}
		cs.MemoryStats.Stats, cs.MemoryStats.Usage = stats, m
		return nil
	}
}

// readPidsV1 reads pids.current.
func readPidsV1(f *cgroupFiles, dir string, cs *cgroups.Stats) error {
	v, err := f.uint(dir, "pids.current")
	if err != nil {
		return err
	}
	cs.PidsStats.Current = v
	return nil
}

// readPidsV2 reads pids.current or, without the pids controller, counts the lines of
// cgroup.procs (cgroup.threads in a threaded cgroup), as the library does.
func readPidsV2(f *cgroupFiles, dir string, cs *cgroups.Stats) error {
	err := readPidsV1(f, dir, cs)
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	n, err := f.lines(dir, "cgroup.procs")
	if errors.Is(err, unix.ENOTSUP) {
		n, err = f.lines(dir, "cgroup.threads")
	}
	if err != nil {
		return err
	}
	cs.PidsStats.Current = n
	return nil
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
		PSI:           PSI{CPU: cs.CpuStats.PSI, Memory: cs.MemoryStats.PSI, IO: cs.BlkioStats.PSI},
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
