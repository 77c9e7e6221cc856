package oci

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
)

// Files that readMetrics reads beyond readStats', in a fake cgroup v1 directory.
var fakeV1Metrics = map[string]string{
	"cpuacct.stat":               "user 150\nsystem 25\n",
	"cpu.stat":                   "nr_periods 40\nnr_throttled 3\nthrottled_time 5000000\n",
	"memory.failcnt":             "2\n",
	"memory.oom_control":         "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
	"memory.kmem.usage_in_bytes": "65536\n",
	"memory.stat": "total_cache 8192\ntotal_rss 1048576\ntotal_inactive_file 200000\ntotal_pgfault 70\ntotal_pgmajfault 2\n" +
		"total_mapped_file 4096\ntotal_swap 512\n",
	"pids.max": "100\n",
	"blkio.throttle.io_service_bytes_recursive": "8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Async 12288\n8:0 Total 12288\n" +
		"253:1 Read 0\n253:1 Write 512\nTotal 12800\n",
	"blkio.throttle.io_serviced_recursive": "8:0 Read 1\n8:0 Write 2\n8:0 Total 3\n253:1 Read 0\n253:1 Write 1\nTotal 4\n",
}

// Files that readMetrics reads beyond readStats', in a fake cgroup v2 directory.
var fakeV2Metrics = map[string]string{
	"cpu.stat":            "usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\nnr_periods 40\nnr_throttled 3\nthrottled_usec 5000\n",
	"memory.stat":         "anon 1048576\nfile 8192\nfile_mapped 4096\nkernel 65536\ninactive_file 200000\npgfault 70\npgmajfault 2\n",
	"memory.peak":         "3000000\n",
	"memory.swap.current": "512\n",
	"memory.events":       "low 0\nhigh 0\nmax 2\noom 1\noom_kill 1\n",
	"pids.max":            "max\n",
	"io.stat":             "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n253:1 rbytes=0 wbytes=512 rios=0 wios=1 dbytes=0 dios=0\n",
}

// TestReadMetricsFake reads fake cgroup directories, v1 and v2, asking for each part
// (not parallel: the library's test mode lets it read files outside cgroupfs).
func TestReadMetricsFake(t *testing.T) {
	cgroups.TestMode = true
	t.Cleanup(func() { cgroups.TestMode = false })
	at := time.Unix(1700000000, 0)
	// The fake cgroup's process: a child of the test's own, whose open files stay as they
	// are once it waits on its stdin (PID 1 of the host, read before, opens and closes files
	// of its own between the test's two counts). It is counted only after it said it is
	// ready: a `sleep` counted at once was still loading its libraries and locale, and the
	// two counts could differ by the file it had open.
	child := exec.Command("sh", "-c", "echo ready; read line")
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = stdin.Close(); _ = child.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("the child process said %q (%v), want ready", line, err)
	}
	pid := strconv.Itoa(child.Process.Pid)
	fds, sockets := (&cgroupFiles{}).openFiles("/proc/" + pid + "/fd")
	io := []DeviceIO{
		{Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 8192, Reads: 1, Writes: 2},
		{Major: 253, Minor: 1, WriteBytes: 512, Writes: 1},
	}
	all := MetricCPU | MetricMemory | MetricProcess | MetricIO
	v1 := with(with(fakeV1, fakeV1Metrics), map[string]string{"cgroup.procs": pid + "\n"})
	v2 := with(fakeV2, fakeV2Metrics)
	for _, tt := range []struct {
		name  string
		v2    bool
		files map[string]string
		parts MetricParts
		want  CgroupMetrics // its CgroupStats is checked apart (TestReadStatsFake)
	}{
		{name: "v1 all", files: v1, parts: all, want: CgroupMetrics{
			CPUUserNanos: 1500000000, CPUSystemNanos: 250000000, CFSPeriods: 40, CFSThrottledPeriods: 3, CFSThrottledNanos: 5000000,
			MemoryCache: 8192, MemoryMappedFile: 4096, MemoryKernel: 65536, MemorySwap: 512, MemoryMaxUsage: 3000000, MemoryFailcnt: 2, OOMKills: 1,
			ProcessCount: 1, ThreadsMax: 100, FileDescriptors: fds, Sockets: sockets, IO: io}},
		{name: "v1 none", files: v1},
		{name: "v1 cpu only", files: v1, parts: MetricCPU, want: CgroupMetrics{
			CPUUserNanos: 1500000000, CPUSystemNanos: 250000000, CFSPeriods: 40, CFSThrottledPeriods: 3, CFSThrottledNanos: 5000000}},
		{name: "v1 old kernel", files: with(v1, map[string]string{"memory.oom_control": "", "memory.kmem.usage_in_bytes": "", "cpu.stat": ""}),
			parts: MetricMemory | MetricCPU, want: CgroupMetrics{CPUUserNanos: 1500000000, CPUSystemNanos: 250000000,
				MemoryCache: 8192, MemoryMappedFile: 4096, MemorySwap: 512, MemoryMaxUsage: 3000000, MemoryFailcnt: 2}},
		{name: "v2 all", v2: true, files: v2, parts: all, want: CgroupMetrics{
			CPUUserNanos: 100000000, CPUSystemNanos: 23456000, CFSPeriods: 40, CFSThrottledPeriods: 3, CFSThrottledNanos: 5000000,
			MemoryCache: 8192, MemoryMappedFile: 4096, MemoryKernel: 65536, MemorySwap: 512, MemoryMaxUsage: 3000000, MemoryFailcnt: 2, OOMKills: 1,
			ProcessCount: 2, FileDescriptors: 2 * fds, Sockets: 2 * sockets, IO: io}},
		{name: "v2 before 5.18 (no kernel key, no memory.peak)", v2: true,
			files: with(v2, map[string]string{"memory.peak": "",
				"memory.stat": "anon 1048576\nfile 8192\nkernel_stack 16384\nslab 32768\nsock 0\npercpu 8192\npagetables 8192\ninactive_file 200000\n"}),
			parts: MetricMemory, want: CgroupMetrics{MemoryCache: 8192, MemoryKernel: 65536, MemorySwap: 512, MemoryFailcnt: 2, OOMKills: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			files := tt.files
			if tt.v2 {
				files = with(files, map[string]string{"cgroup.procs": pid + "\n" + pid + "\n"})
			}
			dir := t.TempDir()
			for name, content := range files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			d := statDirs{v2: tt.v2, cpu: dir, cpuCtl: dir, memory: dir, pids: dir, blkio: dir}
			got, err := readMetrics(d, nil, tt.parts, at, nil)
			if err != nil {
				t.Fatal(err)
			}
			base, err := minimalStatsOf(d, at)
			if err != nil {
				t.Fatal(err)
			}
			if got.CgroupStats != base {
				t.Errorf("CgroupStats = %+v, want readStats' %+v", got.CgroupStats, base)
			}
			got.CgroupStats = CgroupStats{}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("readMetrics =\n%+v, want\n%+v", got, tt.want)
			}
		})
	}
}

func TestReadMetricsBadFile(t *testing.T) {
	cgroups.TestMode = true
	t.Cleanup(func() { cgroups.TestMode = false })
	for _, tt := range []struct {
		v2    bool
		file  string
		value string
	}{
		{false, "cpuacct.stat", "user x\n"},
		{false, "blkio.throttle.io_serviced_recursive", "8:0 Read x\n"},
		{false, "blkio.throttle.io_serviced_recursive", "8 Read 1\n"},
		{true, "io.stat", "8:0 rbytes=x\n"},
		{true, "memory.events", "max\n"},
	} {
		t.Run(tt.file+" "+strconv.Quote(tt.value), func(t *testing.T) {
			files := with(fakeV1, fakeV1Metrics)
			if tt.v2 {
				files = with(fakeV2, fakeV2Metrics)
			}
			dir := t.TempDir()
			for name, content := range with(files, map[string]string{tt.file: tt.value}) {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			d := statDirs{v2: tt.v2, cpu: dir, cpuCtl: dir, memory: dir, pids: dir, blkio: dir}
			if got, err := readMetrics(d, nil, MetricCPU|MetricMemory|MetricProcess|MetricIO, time.Now(), nil); err == nil {
				t.Errorf("readMetrics = %+v, want an error", got)
			}
		})
	}
}

// minimalStatsOf is what Stats gives from the directories d.
func minimalStatsOf(d statDirs, at time.Time) (CgroupStats, error) {
	cs, err := readStats(d)
	if err != nil {
		return CgroupStats{}, err
	}
	return convertStats(cs, at, d.v2), nil
}

// TestOpenFilesCountsAsReaddir: openFiles counts what os.ReadDir and os.Readlink see in
// a /proc/<pid>/fd directory (with a socket and more files than one getdents buffer
// holds), and nothing for a process that is gone.
func TestOpenFilesCountsAsReaddir(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for range 400 {
		f, err := os.Open("/dev/null")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
	}
	dir := fmt.Sprintf("/proc/%d/fd", os.Getpid())
	// What this test's files are when the counts are made: the test itself opens no
	// file meanwhile.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var wantFds, wantSockets uint64
	for _, e := range entries {
		wantFds++
		if target, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(target, "socket:") {
			wantSockets++
		}
	}
	f := &cgroupFiles{}
	// Each holds the directory open while it reads it: both count that fd.
	fds, sockets := f.openFiles(dir)
	if fds != wantFds || sockets != wantSockets || sockets == 0 || fds < 400 {
		t.Errorf("openFiles = %d fds, %d sockets; os.ReadDir saw %d, %d", fds, sockets, wantFds, wantSockets)
	}
	if fds, sockets := f.openFiles("/proc/0/fd"); fds != 0 || sockets != 0 {
		t.Errorf("openFiles of a process that does not exist = %d, %d", fds, sockets)
	}
}
