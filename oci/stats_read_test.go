package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/opencontainers/cgroups"
	cgroupfs "github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"

	"github.com/crijournal/crijournal/internal/testenv"
)

// libraryControllers are the controllers Stats read through the library's full
// Manager.Stats before readStats, which the tests compare against, and IO, whose
// pressure file (io.pressure, cgroup v2) readStats reads too.
const libraryControllers = cgroups.CPU | cgroups.Memory | cgroups.Pids | cgroups.IO

// libraryStats is what Stats gave before readStats: the library's full read of the
// three controllers, converted.
func libraryStats(m cgroups.Manager, at time.Time, v2 bool) (CgroupStats, error) {
	cs, err := m.Stats(&cgroups.StatsOptions{Controllers: libraryControllers})
	if err != nil {
		return CgroupStats{}, err
	}
	return convertStats(cs, at, v2), nil
}

// minimalStats is what Stats gives now from the same cgroup.
func minimalStats(m cgroups.Manager, at time.Time, v2 bool) (CgroupStats, error) {
	cs, err := readStats(statDirsOf(m, v2))
	if err != nil {
		return CgroupStats{}, err
	}
	return convertStats(cs, at, v2), nil
}

// Files of a fake cgroup v1 directory (cpuacct, memory and pids in one), with every
// file the library's full read needs.
var fakeV1 = map[string]string{
	"cpuacct.usage":             "123456789\n",
	"cpuacct.stat":              "user 10\nsystem 5\n",
	"cpuacct.usage_percpu":      "100000000 23456789 \n",
	"memory.stat":               "cache 4096\nrss 9999\ninactive_file 9999\ntotal_cache 8192\ntotal_rss 1048576\ntotal_inactive_file 200000\ntotal_pgfault 70\ntotal_pgmajfault 2\n",
	"memory.usage_in_bytes":     "2000000\n",
	"memory.max_usage_in_bytes": "3000000\n",
	"memory.failcnt":            "0\n",
	"memory.limit_in_bytes":     "67108864\n",
	"memory.use_hierarchy":      "1\n",
	"pids.current":              "3\n",
	"pids.max":                  "max\n",
}

// Files of a fake cgroup v2 directory.
var fakeV2 = map[string]string{
	"cpu.stat":       "usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\nnr_periods 0\n",
	"memory.stat":    "anon 1048576\nfile 8192\ninactive_file 200000\npgfault 70\npgmajfault 2\n",
	"memory.current": "2000000\n",
	"memory.max":     "67108864\n",
	"pids.current":   "3\n",
	"pids.max":       "max\n",
	"cgroup.procs":   "1\n2\n",
}

// Pressure files of a fake cgroup v2 directory, and what they say.
var (
	fakePressure = map[string]string{
		"cpu.pressure":    "some avg10=1.50 avg60=0.25 avg300=0.00 total=4321\nfull avg10=0.50 avg60=0.00 avg300=0.00 total=1234\n",
		"memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"io.pressure":     "some avg10=12.34 avg60=5.00 avg300=1.00 total=987654321\nfull avg10=10.00 avg60=4.00 avg300=0.50 total=87654321\n",
	}
	fakePSI = PSI{
		CPU: &cgroups.PSIStats{Some: cgroups.PSIData{Avg10: 1.5, Avg60: 0.25, Total: 4321},
			Full: cgroups.PSIData{Avg10: 0.5, Total: 1234}},
		Memory: &cgroups.PSIStats{},
		IO: &cgroups.PSIStats{Some: cgroups.PSIData{Avg10: 12.34, Avg60: 5, Avg300: 1, Total: 987654321},
			Full: cgroups.PSIData{Avg10: 10, Avg60: 4, Avg300: 0.5, Total: 87654321}},
	}
)

// with returns files with the changes applied: an empty value removes the file.
func with(files map[string]string, changes map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range files {
		out[k] = v
	}
	for k, v := range changes {
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
	}
	return out
}

func TestReadStatsFake(t *testing.T) {
	// The library reads only files on cgroupfs unless in its test mode (this test is not
	// parallel: no other test reads cgroups meanwhile).
	cgroups.TestMode = true
	t.Cleanup(func() { cgroups.TestMode = false })
	at := time.Unix(1700000000, 0)
	base := CgroupStats{Timestamp: at, CPUUsageNanos: 123456789, MemoryUsage: 2000000, MemoryWorkingSet: 1800000,
		MemoryLimit: 67108864, RSS: 1048576, PageFaults: 70, MajorPageFaults: 2, Processes: 3}
	v2base := base
	v2base.CPUUsageNanos = 123456000
	for _, tt := range []struct {
		name  string
		v2    bool
		files map[string]string
		// noMemory leaves the memory controller out of the v1 paths (not mounted).
		noMemory bool
		// gone removes the directory after the managers are made.
		gone bool
		// library is whether the library's full read is expected to agree (it fails
		// on a gone v2 cgroup).
		library bool
		want    CgroupStats
		wantErr bool
	}{
		{name: "v1", files: fakeV1, library: true, want: base},
		{name: "v1 no limit", files: with(fakeV1, map[string]string{"memory.limit_in_bytes": "9223372036854771712\n"}), library: true,
			want: func() CgroupStats { s := base; s.MemoryLimit = 0; return s }()},
		{name: "v1 more inactive file than usage", files: with(fakeV1, map[string]string{"memory.usage_in_bytes": "100000\n"}), library: true,
			want: func() CgroupStats { s := base; s.MemoryUsage, s.MemoryWorkingSet = 100000, 0; return s }()},
		{name: "v1 memory not mounted", files: fakeV1, noMemory: true, library: true,
			want: CgroupStats{Timestamp: at, CPUUsageNanos: 123456789, Processes: 3}},
		{name: "v1 gone", files: fakeV1, gone: true, library: true, want: CgroupStats{Timestamp: at}},
		{name: "v1 bad memory.stat", files: with(fakeV1, map[string]string{"memory.stat": "total_rss x\n"}), wantErr: true},
		{name: "v2", v2: true, files: fakeV2, library: true, want: v2base},
		{name: "v2 no limit", v2: true, files: with(fakeV2, map[string]string{"memory.max": "max\n"}), library: true,
			want: func() CgroupStats { s := v2base; s.MemoryLimit = 0; return s }()},
		{name: "v2 no pids controller", v2: true, files: with(fakeV2, map[string]string{"pids.current": "", "pids.max": ""}), library: true,
			want: func() CgroupStats { s := v2base; s.Processes = 2; return s }()},
		{name: "v2 no memory controller", v2: true, files: with(fakeV2, map[string]string{"memory.stat": "", "memory.current": "", "memory.max": ""}), library: true,
			want: CgroupStats{Timestamp: at, CPUUsageNanos: 123456000, Processes: 3}},
		{name: "v2 gone", v2: true, files: fakeV2, gone: true, want: CgroupStats{Timestamp: at}},
		{name: "v2 bad cpu.stat", v2: true, files: with(fakeV2, map[string]string{"cpu.stat": "usage_usec 1\nnr_periods\n"}), wantErr: true},
		{name: "v2 pressure", v2: true, files: with(fakeV2, fakePressure), library: true,
			want: func() CgroupStats { s := v2base; s.PSI = fakePSI; return s }()},
		// cpu.pressure before Linux 5.13 has no full line.
		{name: "v2 cpu pressure without full", v2: true, files: with(fakeV2, with(fakePressure, map[string]string{"cpu.pressure": "some avg10=1.50 avg60=0.25 avg300=0.00 total=4321\n"})),
			library: true, want: func() CgroupStats {
				s := v2base
				s.PSI = fakePSI
				s.PSI.CPU = &cgroups.PSIStats{Some: cgroups.PSIData{Avg10: 1.5, Avg60: 0.25, Total: 4321}}
				return s
			}()},
		{name: "v2 bad io.pressure", v2: true, files: with(fakeV2, with(fakePressure, map[string]string{"io.pressure": "some avg10=x\n"})), wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cg")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, content := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			var m cgroups.Manager
			var err error
			if tt.v2 {
				m, err = fs2.NewManager(&cgroups.Cgroup{Resources: &cgroups.Resources{}}, dir)
			} else {
				paths := map[string]string{"cpuacct": dir, "memory": dir, "pids": dir}
				if tt.noMemory {
					delete(paths, "memory")
				}
				m, err = cgroupfs.NewManager(&cgroups.Cgroup{Resources: &cgroups.Resources{}}, paths)
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.gone {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			}
			got, err := minimalStats(m, at, tt.v2)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("readStats = %+v, want an error", got)
				}
				if _, err := libraryStats(m, at, tt.v2); err == nil {
					t.Error("the library read the bad file without an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("readStats (-want +got):\n%s", diff)
			}
			if !tt.library {
				return
			}
			lib, err := libraryStats(m, at, tt.v2)
			if err != nil {
				t.Fatalf("library: %v", err)
			}
			if diff := cmp.Diff(lib, got); diff != "" {
				t.Errorf("readStats differs from the library's full read (-library +readStats):\n%s", diff)
			}
		})
	}
}

// TestReadStatsRealCgroup compares readStats with the library's full read on the
// cgroup of a running container (sleeping, so that its figures hold still between
// the two reads; a few attempts allow for the odd change). The pressure figures'
// running averages decay between any two reads: on cgroup v2 they must be there,
// and are compared apart from them.
func TestReadStatsRealCgroup(t *testing.T) {
	r := newRuntime(t)
	// It sleeps for longer than the test waits, also where the loop before takes many
	// seconds (the emulated VM of make test-vm).
	c := startContainer(t, r, []string{"sh", "-c", "i=0; while [ $i -lt 5000 ]; do i=$((i+1)); done; exec sleep 3600"}, nil)
	e, err := r.cgroups.get(c.id, func() string { return cgroupsPathOf(r.readMeta(c.id)) })
	if err != nil {
		t.Fatal(err)
	}
	v2 := cgroups.IsCgroup2UnifiedMode()
	at := time.Now()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() error {
		got, err := minimalStats(e.m, at, v2)
		if err != nil {
			return err
		}
		lib, err := libraryStats(e.m, at, v2)
		if err != nil {
			return err
		}
		if got.CPUUsageNanos == 0 || got.MemoryUsage == 0 || got.Processes == 0 {
			return fmt.Errorf("readStats = %+v, want CPU, memory and processes", got)
		}
		if v2 && (got.PSI.CPU == nil || got.PSI.Memory == nil || got.PSI.IO == nil) {
			return fmt.Errorf("readStats on cgroup v2 = %+v, want pressure for CPU, memory and I/O", got)
		}
		if diff := cmp.Diff(lib, got, cmpopts.IgnoreFields(CgroupStats{}, "PSI")); diff != "" {
			return fmt.Errorf("readStats differs from the library's full read (-library +readStats):\n%s", diff)
		}
		return nil
	})
}

// BenchmarkCgroupStats reads one (empty) cgroup as Stats does now (readStats and the
// swap files, through files kept open), with its files opened each time as before, and
// as it did first (the library's Manager.Stats of the CPU, memory and pids controllers).
func BenchmarkCgroupStats(b *testing.B) {
	m, dirs := newTestCgroup(b)
	v2 := dirs.v2
	kept := &keptFiles{budget: budgetOf(64)}
	b.Cleanup(kept.close)
	for _, bb := range []struct {
		name string
		read func() (*cgroups.Stats, error)
	}{
		{"library", func() (*cgroups.Stats, error) {
			return m.Stats(&cgroups.StatsOptions{Controllers: libraryControllers})
		}},
		{"minimal", func() (*cgroups.Stats, error) { return readStats(dirs) }},
		{"minimal+swap", func() (*cgroups.Stats, error) { // as Stats reads since swap is reported
			f := cgroupFilesPool.Get().(*cgroupFiles)
			defer cgroupFilesPool.Put(f)
			cs, err := f.readStats(dirs)
			if err != nil {
				return nil, err
			}
			_, _, err = f.readSwap(dirs, cs.MemoryStats.Usage)
			return cs, err
		}},
		{"minimal+swap kept", func() (*cgroups.Stats, error) { // as Stats reads now, its files kept open
			f := cgroupFilesPool.Get().(*cgroupFiles)
			defer cgroupFilesPool.Put(f)
			defer f.use(kept)()
			cs, err := f.readStats(dirs)
			if err != nil {
				return nil, err
			}
			_, _, err = f.readSwap(dirs, cs.MemoryStats.Usage)
			return cs, err
		}},
	} {
		b.Run(bb.name, func(b *testing.B) {
			for b.Loop() {
				// As Stats does first (m.Exists, which looks at the devices
				// controller's directory, not made here).
				if !cgroups.PathExists(dirs.memory) {
					b.Fatal("cgroup gone")
				}
				cs, err := bb.read()
				if err != nil {
					b.Fatal(err)
				}
				_ = convertStats(cs, time.Now(), v2)
			}
		})
	}
}
