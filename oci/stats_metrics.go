package oci

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"golang.org/x/sys/unix"
)

// MetricParts chooses what Metrics reads of a cgroup beyond the figures of Stats, one
// bit per group of files, so that a node that collects fewer metric groups reads fewer
// files.
type MetricParts uint8

const (
	// MetricCPU reads the user and system CPU time and the CFS throttling
	// (v1 cpuacct.stat and cpu.stat, v2 cpu.stat).
	MetricCPU MetricParts = 1 << iota
	// MetricMemory reads the peak usage, the limit hits, the kernel memory, the swap
	// and the OOM kills (v1 memory.max_usage_in_bytes, memory.failcnt,
	// memory.kmem.usage_in_bytes, memory.oom_control; v2 memory.peak, memory.events,
	// memory.swap.current); cache and mapped files come from memory.stat, which
	// Stats reads anyway.
	MetricMemory
	// MetricProcess reads the processes of the cgroup (cgroup.procs), its thread
	// limit (pids.max) and counts their open files and sockets in /proc.
	MetricProcess
	// MetricIO reads the bytes and operations per block device (v1
	// blkio.throttle.io_service_bytes_recursive and io_serviced_recursive, v2 io.stat).
	MetricIO
)

// CgroupMetrics is what ListPodSandboxMetrics reports of a container's cgroup: the
// figures of Stats and those of the MetricParts asked for (zero for the others, and
// for a file the kernel does not have).
type CgroupMetrics struct {
	CgroupStats
	// CPU (MetricCPU): user and system time, in nanoseconds; CFS enforcement periods
	// elapsed and throttled, and the time throttled in nanoseconds.
	CPUUserNanos, CPUSystemNanos                       uint64
	CFSPeriods, CFSThrottledPeriods, CFSThrottledNanos uint64
	// Memory (MetricMemory): the page cache (v1 total_cache, v2 file), memory-mapped
	// files, kernel memory, swap used, the peak usage, the times the limit was hit
	// (v1 failcnt, v2 the max events) and the processes the OOM killer killed.
	MemoryCache, MemoryMappedFile, MemoryKernel, MemorySwap uint64
	MemoryMaxUsage, MemoryFailcnt, OOMKills                 uint64
	// Processes (MetricProcess): ProcessCount is the number of processes (the lines
	// of cgroup.procs; CgroupStats.Processes counts tasks, that is threads);
	// ThreadsMax the pids limit, 0 for none; FileDescriptors and Sockets the open
	// files and sockets of those processes.
	ProcessCount, ThreadsMax, FileDescriptors, Sockets uint64
	// IO (MetricIO) is the block I/O of the cgroup, per device.
	IO []DeviceIO
	// Shared says that the figures of CgroupStats (and those of MetricMemory that come
	// from memory.stat: the cache, the mapped files, v1's swap and v2's kernel memory)
	// are those Stats read less than a second before, at their Timestamp, rather than
	// read again (recentStats); the other figures were read by this call.
	Shared bool
}

// DeviceIO is a cgroup's I/O on one block device.
type DeviceIO struct {
	Major, Minor          uint64
	ReadBytes, WriteBytes uint64
	Reads, Writes         uint64
}

// userHZ is the unit of v1 cpuacct.stat (USER_HZ, 100 on every Linux architecture).
const userHZ = 100

// Metrics reads a container's cgroup as Stats does, and the parts asked for. It forks no
// process; the files are read through the directories Stats resolved once. The figures
// of Stats are those Stats read less than a second before, when it did (Shared), and
// are read afresh otherwise.
func (r *Runtime) Metrics(id string, parts MetricParts) (CgroupMetrics, error) {
	if err := validID(id); err != nil {
		return CgroupMetrics{}, err
	}
	e, err := r.cgroups.get(id, func() string { return cgroupsPathOf(r.readMeta(id)) })
	if err != nil {
		return CgroupMetrics{}, err
	}
	at := time.Now()
	m, err := readMetrics(e.dir, e.kept, parts, at, e.recent.take(at))
	if e.gone(err) {
		e.recent.clear()
		return CgroupMetrics{CgroupStats: CgroupStats{Timestamp: at}}, nil
	}
	if err != nil {
		return CgroupMetrics{}, fmt.Errorf("metrics of %s: %w", id, err)
	}
	return m, nil
}

// readMetrics reads the figures of readStats and the parts asked for from the cgroup
// directories d, through the files kept open in kept (nil: none), at at. The figures of
// readStats are prior's, when given, instead of read again.
func readMetrics(d statDirs, kept *keptFiles, parts MetricParts, at time.Time, prior *statsReading) (CgroupMetrics, error) {
	f := cgroupFilesPool.Get().(*cgroupFiles)
	defer cgroupFilesPool.Put(f)
	defer f.use(kept)()
	var m CgroupMetrics
	var cs *cgroups.Stats
	if prior != nil {
		cs, m.Shared = prior.cs, true
		m.CgroupStats = convertStats(cs, prior.at, d.v2)
	} else {
		var err error
		if cs, err = f.readStats(d); err != nil {
			return CgroupMetrics{}, err
		}
		m.CgroupStats = convertStats(cs, at, d.v2)
	}
	if parts&MetricMemory != 0 {
		memoryStat(&m, cs.MemoryStats.Stats, d.v2)
	}
	readers := []struct {
		part MetricParts
		dir  string
		read func(f *cgroupFiles, dir string, v2 bool, m *CgroupMetrics) error
	}{
		{MetricCPU, d.cpu, readCPUTimes},
		{MetricCPU, d.cpuCtl, readThrottling},
		{MetricMemory, d.memory, readMemoryEvents},
		{MetricProcess, d.pids, readProcesses},
		{MetricIO, d.blkio, readIO},
	}
	for _, rd := range readers {
		if parts&rd.part == 0 || rd.dir == "" {
			continue
		}
		if err := rd.read(f, rd.dir, d.v2, &m); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return CgroupMetrics{}, err
		}
	}
	return m, nil
}

// memoryStat picks the memory figures of memory.stat (which readStats read) that Stats
// does not report.
func memoryStat(m *CgroupMetrics, stat map[string]uint64, v2 bool) {
	if v2 {
		m.MemoryCache, m.MemoryMappedFile = stat["file"], stat["file_mapped"]
		m.MemoryKernel = stat["kernel"] // Linux 5.18 on; before, its main parts
		if _, ok := stat["kernel"]; !ok {
			m.MemoryKernel = stat["kernel_stack"] + stat["slab"] + stat["sock"] + stat["percpu"] + stat["pagetables"]
		}
		return
	}
	m.MemoryCache, m.MemoryMappedFile, m.MemorySwap = stat["total_cache"], stat["total_mapped_file"], stat["total_swap"]
}

// readCPUTimes reads the user and system CPU time: v1 cpuacct.stat (in USER_HZ), v2
// cpu.stat (in microseconds).
func readCPUTimes(f *cgroupFiles, dir string, v2 bool, m *CgroupMetrics) error {
	if v2 {
		kv, err := f.keyValues(dir, "cpu.stat")
		if err != nil {
			return err
		}
		m.CPUUserNanos, m.CPUSystemNanos = kv["user_usec"]*1000, kv["system_usec"]*1000
		return nil
	}
	kv, err := f.keyValues(dir, "cpuacct.stat")
	if err != nil {
		return err
	}
	m.CPUUserNanos, m.CPUSystemNanos = kv["user"]*(1e9/userHZ), kv["system"]*(1e9/userHZ)
	return nil
}

// readThrottling reads the CFS figures of cpu.stat (the cpu controller's on v1, whose
// throttled_time is in nanoseconds; v2's throttled_usec in microseconds).
func readThrottling(f *cgroupFiles, dir string, v2 bool, m *CgroupMetrics) error {
	kv, err := f.keyValues(dir, "cpu.stat")
	if err != nil {
		return err
	}
	m.CFSPeriods, m.CFSThrottledPeriods, m.CFSThrottledNanos = kv["nr_periods"], kv["nr_throttled"], kv["throttled_time"]
	if v2 {
		m.CFSThrottledNanos = kv["throttled_usec"] * 1000
	}
	return nil
}

// readMemoryEvents reads the memory files that memory.stat does not cover; each may be
// missing on an older kernel (or without swap accounting), which leaves its figure 0.
func readMemoryEvents(f *cgroupFiles, dir string, v2 bool, m *CgroupMetrics) error {
	param := func(file string, dst *uint64) error {
		v, err := f.uint(dir, file)
		if err == nil {
			*dst = v
		}
		return err
	}
	var errs []error
	if v2 {
		var swap uint64
		errs = append(errs, param("memory.peak", &m.MemoryMaxUsage), param("memory.swap.current", &swap))
		m.MemorySwap = swap
		events, err := f.keyValues(dir, "memory.events")
		m.MemoryFailcnt, m.OOMKills = events["max"], events["oom_kill"]
		errs = append(errs, err)
	} else {
		errs = append(errs, param("memory.max_usage_in_bytes", &m.MemoryMaxUsage), param("memory.failcnt", &m.MemoryFailcnt),
			param("memory.kmem.usage_in_bytes", &m.MemoryKernel))
		oom, err := f.keyValues(dir, "memory.oom_control")
		m.OOMKills = oom["oom_kill"]
		errs = append(errs, err)
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

// readProcesses reads the cgroup's processes and thread limit, and counts the files and
// sockets the processes hold open (/proc/<pid>/fd). A process that exits meanwhile is
// left out.
func readProcesses(f *cgroupFiles, dir string, _ bool, m *CgroupMetrics) error {
	if limit, err := f.uint(dir, "pids.max"); err == nil && limit != math.MaxUint64 {
		m.ThreadsMax = limit
	}
	procs, err := f.string(dir, "cgroup.procs")
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(procs) {
		m.ProcessCount++
		fds, sockets := f.openFiles("/proc/" + pid + "/fd")
		m.FileDescriptors += fds
		m.Sockets += sockets
	}
	return nil
}

// openFiles counts the entries of a /proc/<pid>/fd directory and those that are sockets;
// 0 and 0 when it cannot be read (the process is gone). Bare system calls, with f's
// buffers: an *os.File of a directory costs an epoll registration that fails, and
// os.Readlink a fresh buffer per link.
func (f *cgroupFiles) openFiles(dir string) (fds, sockets uint64) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, 0
	}
	defer unix.Close(fd)
	if cap(f.dents) == 0 {
		f.dents = make([]byte, 8192)
	}
	buf := f.dents[:cap(f.dents)]
	var link [64]byte // "socket:[inode]" fits; a longer target is no socket
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n <= 0 {
			return fds, sockets
		}
		f.names = f.names[:0]
		_, _, f.names = unix.ParseDirent(buf[:n], -1, f.names)
		for _, name := range f.names {
			fds++
			if l, err := unix.Readlink(dir+"/"+name, link[:]); err == nil && bytes.HasPrefix(link[:l], []byte("socket:")) {
				sockets++
			}
		}
	}
}

// readIO reads the block I/O per device: v1 the throttle files' Read and Write lines
// ("8:0 Read 4096"), v2 io.stat ("8:0 rbytes=4096 wbytes=0 rios=1 wios=0 ...").
func readIO(f *cgroupFiles, dir string, v2 bool, m *CgroupMetrics) error {
	byDev := map[[2]uint64]*DeviceIO{}
	var order [][2]uint64
	dev := func(field string) (*DeviceIO, error) {
		major, minor, ok := strings.Cut(field, ":")
		if !ok {
			return nil, fmt.Errorf("cgroup %s: bad device %q", dir, field)
		}
		var k [2]uint64
		var err1, err2 error
		k[0], err1 = strconv.ParseUint(major, 10, 64)
		k[1], err2 = strconv.ParseUint(minor, 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("cgroup %s: bad device %q: %w", dir, field, err)
		}
		if byDev[k] == nil {
			byDev[k] = &DeviceIO{Major: k[0], Minor: k[1]}
			order = append(order, k)
		}
		return byDev[k], nil
	}
	if err := parseIOFiles(f, dir, v2, dev); err != nil {
		return err
	}
	for _, k := range order {
		m.IO = append(m.IO, *byDev[k])
	}
	return nil
}

// parseIOFiles reads the I/O files of dir into the devices dev hands out.
func parseIOFiles(f *cgroupFiles, dir string, v2 bool, dev func(field string) (*DeviceIO, error)) error {
	if v2 {
		s, err := f.string(dir, "io.stat")
		if err != nil {
			return err
		}
		for line := range strings.Lines(s) {
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			d, err := dev(fields[0])
			if err != nil {
				return err
			}
			for _, f := range fields[1:] {
				k, v, _ := strings.Cut(f, "=")
				n, err := strconv.ParseUint(v, 10, 64)
				if err != nil {
					return fmt.Errorf("cgroup %s/io.stat: %q: %w", dir, f, err)
				}
				switch k {
				case "rbytes":
					d.ReadBytes = n
				case "wbytes":
					d.WriteBytes = n
				case "rios":
					d.Reads = n
				case "wios":
					d.Writes = n
				}
			}
		}
		return nil
	}
	for _, file := range []struct {
		name        string
		read, write func(d *DeviceIO) *uint64
	}{
		{"blkio.throttle.io_service_bytes_recursive", func(d *DeviceIO) *uint64 { return &d.ReadBytes }, func(d *DeviceIO) *uint64 { return &d.WriteBytes }},
		{"blkio.throttle.io_serviced_recursive", func(d *DeviceIO) *uint64 { return &d.Reads }, func(d *DeviceIO) *uint64 { return &d.Writes }},
	} {
		s, err := f.string(dir, file.name)
		if err != nil {
			return err
		}
		for line := range strings.Lines(s) {
			fields := strings.Fields(line)
			if len(fields) != 3 || (fields[1] != "Read" && fields[1] != "Write") {
				continue // "Total n", and the Sync, Async, Discard lines
			}
			d, err := dev(fields[0])
			if err != nil {
				return err
			}
			n, err := strconv.ParseUint(fields[2], 10, 64)
			if err != nil {
				return fmt.Errorf("cgroup %s/%s: %q: %w", dir, file.name, line, err)
			}
			if fields[1] == "Read" {
				*file.read(d) = n
			} else {
				*file.write(d) = n
			}
		}
	}
	return nil
}
