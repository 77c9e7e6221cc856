package oci

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"

	"github.com/crijournal/crijournal/internal/testenv"
)

// newTestCgroup makes an empty cgroup of the node's hierarchy, removed at the end of t
// (Destroy is idempotent: a test may remove it first).
func newTestCgroup(t testing.TB) (cgroups.Manager, statDirs) {
	t.Helper()
	testenv.RequireRoot(t, "the test makes a cgroup")
	m, err := manager.New(&cgroups.Cgroup{Path: "/crijournal-test-" + testenv.RandomHex(t, 4), Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Apply(-1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Destroy(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return m, statDirsOf(m, cgroups.IsCgroup2UnifiedMode())
}

// budgetOf returns a budget of max descriptors.
func budgetOf(max int) *fdBudget {
	b := &fdBudget{}
	b.once.Do(func() {})
	b.max = max
	return b
}

// testTime is the time the reads below give their figures.
var testTime = time.Unix(1700000000, 0)

// readThrough reads d as Stats does (readStats and the swap files), through k.
func readThrough(t *testing.T, k *keptFiles, d statDirs) CgroupStats {
	t.Helper()
	f := cgroupFilesPool.Get().(*cgroupFiles)
	defer cgroupFilesPool.Put(f)
	defer f.use(k)()
	cs, err := f.readStats(d)
	if err != nil {
		t.Fatalf("readStats: %v", err)
	}
	st := convertStats(cs, testTime, d.v2)
	swap, ok, err := f.readSwap(d, cs.MemoryStats.Usage)
	if err != nil {
		t.Fatalf("readSwap: %v", err)
	}
	if ok {
		st.Swap = &swap
	}
	return st
}

// TestKeptFiles: a cgroup's files read through kept descriptors give what opening them
// gives, afresh on every read (a limit changed between two reads is seen), through the
// same descriptors; once the cgroup is removed the reads give zero figures, as opening
// its files does, and the descriptors are closed; past the budget, files are opened and
// closed as before.
func TestKeptFiles(t *testing.T) {
	for _, tt := range []struct {
		name     string
		budget   int
		wantKept func(files int) int
	}{
		{"within the budget", 64, func(files int) int { return files }},
		{"budget of two", 2, func(int) int { return 2 }},
		{"no budget", 0, func(int) int { return 0 }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, d := newTestCgroup(t)
			k := &keptFiles{budget: budgetOf(tt.budget)}
			got := readThrough(t, k, d)
			want := readThrough(t, nil, d)
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b PSI) bool { return (a.CPU == nil) == (b.CPU == nil) })); diff != "" {
				t.Fatalf("read through kept files differs from opened ones (-opened +kept):\n%s", diff)
			}
			files := 5 // cpuacct.usage, memory.stat, usage, limit, pids.current
			if d.v2 {
				files = 8 // cpu.stat, ..., and the three pressure files
			}
			if n := len(k.fds); n < tt.wantKept(files) || (tt.budget < files && n != tt.budget) {
				t.Fatalf("%d files kept, want at least %d (budget %d): %v", n, tt.wantKept(files), tt.budget, k.fds)
			}
			before := map[string]int{}
			for p, fd := range k.fds {
				before[p] = fd
			}

			limit, file := "67108864", "memory.limit_in_bytes"
			if d.v2 {
				file = "memory.max"
			}
			if err := os.WriteFile(filepath.Join(d.memory, file), []byte(limit), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := readThrough(t, k, d); got.MemoryLimit != 64<<20 {
				t.Errorf("after the limit was set to %s: MemoryLimit %d, want it read afresh", limit, got.MemoryLimit)
			}
			if !maps.Equal(before, k.fds) {
				t.Errorf("kept descriptors changed between two reads: %v, then %v", before, k.fds)
			}

			if err := m.Destroy(); err != nil {
				t.Fatal(err)
			}
			if got := readThrough(t, k, d); got.MemoryUsage != 0 || got.MemoryLimit != 0 || got.CPUUsageNanos != 0 {
				t.Errorf("read of a removed cgroup = %+v, want zero figures", got)
			}
			if len(k.fds) != 0 || k.budget.used != 0 {
				t.Errorf("after the cgroup's removal %d descriptors kept (budget used %d), want none: %v", len(k.fds), k.budget.used, k.fds)
			}
			k.close()
		})
	}
}

// TestKeptFilesClose: close waits for the reads under way, closes every descriptor and
// keeps none after it; reads after it open and close their files.
func TestKeptFilesClose(t *testing.T) {
	_, d := newTestCgroup(t)
	budget := budgetOf(64)
	k := &keptFiles{budget: budget}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				readThrough(t, k, d)
			}
		}()
	}
	readThrough(t, k, d)
	k.close()
	wg.Wait()
	if len(k.fds) != 0 || !k.closed || budget.used != 0 {
		t.Errorf("after close: %d descriptors kept, closed %v, budget used %d; want none, true, 0", len(k.fds), k.closed, budget.used)
	}
	readThrough(t, k, d)
	if len(k.fds) != 0 || budget.used != 0 {
		t.Errorf("a read after close kept %d descriptors (budget used %d)", len(k.fds), budget.used)
	}
	var nilKept *keptFiles
	nilKept.close() // no panic
}

// existsCounter is a cgroup manager that counts the calls of Exists.
type existsCounter struct {
	cgroups.Manager
	calls int
}

func (e *existsCounter) Exists() bool { e.calls++; return e.Manager.Exists() }

// TestStatsOfARemovedCgroup: Stats and Metrics look at a cgroup's directory only when a
// read failed (cgroupEntry.gone): none while it is there. A cgroup removed under them,
// its files kept open (ENODEV) or not (ENOENT), still gives zero figures, not an error.
func TestStatsOfARemovedCgroup(t *testing.T) {
	for _, keptOpen := range []bool{true, false} {
		t.Run(fmt.Sprintf("files kept open %v", keptOpen), func(t *testing.T) {
			cg, d := newTestCgroup(t)
			m := &existsCounter{Manager: cg}
			r := &Runtime{}
			r.cgroups.m = map[string]cgroupEntry{"c1": {m: m, dir: d, kept: &keptFiles{budget: budgetOf(64)}}}
			const all = ^MetricParts(0)
			if keptOpen {
				if _, err := r.Stats("c1"); err != nil {
					t.Fatalf("Stats of the cgroup: %v", err)
				}
				if _, err := r.Metrics("c1", all); err != nil {
					t.Fatalf("Metrics of the cgroup: %v", err)
				}
				if len(r.cgroups.m["c1"].kept.fds) == 0 {
					t.Fatal("no file kept open after the reads")
				}
				if m.calls != 0 {
					t.Errorf("Stats and Metrics of a cgroup that is there looked at its directory %d times, want 0", m.calls)
				}
			}
			if err := m.Destroy(); err != nil {
				t.Fatal(err)
			}
			st, err := r.Stats("c1")
			if err != nil || st.Timestamp.IsZero() || st != (CgroupStats{Timestamp: st.Timestamp}) {
				t.Errorf("Stats of a removed cgroup = %+v, %v; want zero figures with a time, no error", st, err)
			}
			mt, err := r.Metrics("c1", all)
			if err != nil || mt.Timestamp.IsZero() || mt.CPUUsageNanos != 0 || mt.ProcessCount != 0 {
				t.Errorf("Metrics of a removed cgroup = %+v, %v; want zero figures with a time, no error", mt, err)
			}
		})
	}
}
