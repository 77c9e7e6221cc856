package oci

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"
)

// TestRecentStatsTake: a reading is taken while it is younger than statsShareAge, and
// not once older, nor one from the future (a clock that went back), nor once cleared,
// nor from a nil recentStats.
func TestRecentStatsTake(t *testing.T) {
	at := time.Unix(1700000000, 0)
	cs := cgroups.NewStats()
	for _, tt := range []struct {
		name  string
		r     *recentStats
		clear bool
		now   time.Time
		want  bool
	}{
		{name: "at once", r: &recentStats{}, now: at, want: true},
		{name: "just younger than the age", r: &recentStats{}, now: at.Add(statsShareAge - time.Nanosecond), want: true},
		{name: "as old as the age", r: &recentStats{}, now: at.Add(statsShareAge)},
		{name: "older", r: &recentStats{}, now: at.Add(10 * time.Second)},
		{name: "from the future", r: &recentStats{}, now: at.Add(-time.Millisecond)},
		{name: "cleared", r: &recentStats{}, clear: true, now: at},
		{name: "nil keeps nothing", now: at},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.store(at, cs)
			if tt.clear {
				tt.r.clear()
			}
			got := tt.r.take(tt.now)
			if (got != nil) != tt.want {
				t.Fatalf("take = %+v, want a reading %v", got, tt.want)
			}
			if got != nil && (got.cs != cs || !got.at.Equal(at)) {
				t.Errorf("take = %+v, want the reading stored at %v", got, at)
			}
		})
	}
}

// TestMetricsShareStats: Metrics takes the figures Stats read less than statsShareAge
// before, with their time (Shared), and reads the rest afresh; with an older reading, or
// none, it reads everything afresh. The fake cgroup's files change between the calls, so
// what was read when shows.
func TestMetricsShareStats(t *testing.T) {
	cgroups.TestMode = true
	t.Cleanup(func() { cgroups.TestMode = false })
	const parts = MetricCPU | MetricMemory
	changed := map[string]string{
		"cpuacct.usage": "999000000\n",
		"memory.stat": "total_cache 1\ntotal_rss 2\ntotal_inactive_file 3\ntotal_pgfault 4\ntotal_pgmajfault 5\n" +
			"total_mapped_file 6\ntotal_swap 7\n",
		"cpuacct.stat": "user 300\nsystem 50\n",
	}
	for _, tt := range []struct {
		name   string
		age    time.Duration // of Stats' reading when Metrics reads; < 0: no Stats call
		shared bool
	}{
		{name: "right after Stats", age: 0, shared: true},
		{name: "half a second after", age: statsShareAge / 2, shared: true},
		{name: "a reading too old", age: 2 * statsShareAge},
		{name: "no Stats before", age: -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			write := func(files map[string]string) {
				for name, content := range files {
					if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			write(with(fakeV1, fakeV1Metrics))
			d := statDirs{cpu: dir, cpuCtl: dir, memory: dir, pids: dir, blkio: dir}
			r := &Runtime{}
			e := cgroupEntry{dir: d, kept: &keptFiles{budget: budgetOf(64)}, recent: &recentStats{}}
			r.cgroups.m = map[string]cgroupEntry{"c1": e}
			t.Cleanup(e.kept.close)
			var st CgroupStats
			if tt.age >= 0 {
				var err error
				if st, err = r.Stats("c1"); err != nil {
					t.Fatal(err)
				}
				e.recent.last.at = e.recent.last.at.Add(-tt.age) // as if read tt.age ago
			}
			write(changed)
			got, err := r.Metrics("c1", parts)
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := readMetrics(d, nil, parts, got.Timestamp, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got.Shared != tt.shared {
				t.Fatalf("Metrics Shared = %v, want %v", got.Shared, tt.shared)
			}
			// Read afresh in any case: the figures of the files Stats does not read.
			if got.CPUUserNanos != fresh.CPUUserNanos || got.MemoryFailcnt != fresh.MemoryFailcnt {
				t.Errorf("Metrics CPU user %d, fail count %d; want the files' %d, %d", got.CPUUserNanos, got.MemoryFailcnt, fresh.CPUUserNanos, fresh.MemoryFailcnt)
			}
			if !tt.shared {
				if got.CgroupStats != fresh.CgroupStats || got.MemoryCache != fresh.MemoryCache {
					t.Errorf("Metrics = %+v, want the files' figures %+v", got, fresh)
				}
				return
			}
			want := st
			want.Swap, want.Timestamp = nil, e.recent.last.at
			if got.CgroupStats != want {
				t.Errorf("Metrics' stats figures = %+v, want Stats' reading %+v", got.CgroupStats, want)
			}
			if got.MemoryCache != 8192 || got.MemoryMappedFile != 4096 || got.MemorySwap != 512 {
				t.Errorf("Metrics' memory.stat figures cache %d, mapped %d, swap %d; want those of Stats' reading (8192, 4096, 512)",
					got.MemoryCache, got.MemoryMappedFile, got.MemorySwap)
			}
		})
	}
}
