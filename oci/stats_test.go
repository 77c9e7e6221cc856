package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/cgroups"

	"github.com/crijournal/crijournal/internal/testenv"
)

func TestConvertStats(t *testing.T) {
	at := time.Unix(1700000000, 0)
	for _, tt := range []struct {
		name  string
		v2    bool
		stats map[string]uint64
		usage cgroups.MemoryData
		want  CgroupStats
	}{
		{
			name:  "v1",
			stats: map[string]uint64{"total_inactive_file": 300, "total_rss": 500, "total_pgfault": 70, "total_pgmajfault": 2, "inactive_file": 9999, "rss": 9999},
			usage: cgroups.MemoryData{Usage: 1000, Limit: 4096},
			want:  CgroupStats{MemoryUsage: 1000, MemoryWorkingSet: 700, MemoryLimit: 4096, RSS: 500, PageFaults: 70, MajorPageFaults: 2},
		},
		{
			name:  "v2",
			v2:    true,
			stats: map[string]uint64{"inactive_file": 100, "anon": 400, "pgfault": 30, "pgmajfault": 1},
			usage: cgroups.MemoryData{Usage: 1000, Limit: ^uint64(0)},
			want:  CgroupStats{MemoryUsage: 1000, MemoryWorkingSet: 900, RSS: 400, PageFaults: 30, MajorPageFaults: 1},
		},
		{
			name:  "more inactive file than usage",
			stats: map[string]uint64{"total_inactive_file": 2000},
			usage: cgroups.MemoryData{Usage: 1000, Limit: 9223372036854771712}, // v1's "no limit"
			want:  CgroupStats{MemoryUsage: 1000},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cs := cgroups.NewStats()
			cs.CpuStats.CpuUsage.TotalUsage = 12345
			cs.PidsStats.Current = 3
			cs.MemoryStats.Stats = tt.stats
			cs.MemoryStats.Usage = tt.usage
			got := convertStats(cs, at, tt.v2)
			want := tt.want
			want.Timestamp, want.CPUUsageNanos, want.Processes = at, 12345, 3
			if got != want {
				t.Errorf("convertStats = %+v, want %+v", got, want)
			}
		})
	}
}

func TestParseFeatures(t *testing.T) {
	for _, tt := range []struct {
		name string
		doc  string
		want Features
	}{
		{"runc 1.1 (no idmap)", `{"mountOptions":["ro","rro"],"linux":{"namespaces":["user","net"]}}`, Features{RecursiveReadOnlyMounts: true}},
		{"idmapped mounts", `{"mountOptions":["ro"],"linux":{"namespaces":["user"],"mountExtensions":{"idmap":{"enabled":true}}}}`, Features{UserNamespaces: true}},
		{"idmap without user namespaces", `{"linux":{"namespaces":["net"],"mountExtensions":{"idmap":{"enabled":true}}}}`, Features{}},
		{"empty", `{}`, Features{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseFeatures([]byte(tt.doc))
			if err != nil || got != tt.want {
				t.Errorf("parseFeatures = %+v, %v, want %+v", got, err, tt.want)
			}
		})
	}
	if _, err := parseFeatures([]byte("runc: unknown command")); err == nil {
		t.Error("parseFeatures of a non-JSON answer succeeded")
	}
}

func TestRuntimeStats(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; echo busy-done; sleep 30"}, nil)
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		b, _ := os.ReadFile(c.logPath)
		if !strings.Contains(string(b), "busy-done") {
			return fmt.Errorf("log %q", b)
		}
		return nil
	})
	// The shell execs sleep after its echo: until the new program has run, the cgroup may
	// hold no anonymous memory (RSS 0; seen under load), and its CPU figure moves.
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() error {
		return asleep(c.pid, "sleep")
	})
	st, err := r.Stats(c.id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Timestamp.IsZero() || st.CPUUsageNanos == 0 || st.MemoryUsage == 0 || st.MemoryWorkingSet == 0 ||
		st.RSS == 0 || st.PageFaults == 0 || st.Processes == 0 {
		t.Errorf("Stats of a running container = %+v, want CPU, memory, faults and processes", st)
	}
	again, err := r.Stats(c.id)
	if err != nil || again.CPUUsageNanos < st.CPUUsageNanos {
		t.Errorf("second Stats = %+v, %v; want CPU usage that does not go back", again, err)
	}
	// CPUUsage reads the same figure alone: at least Stats', and it stays put while the
	// container only sleeps.
	cpu, err := r.CPUUsage(c.id)
	if err != nil || cpu < again.CPUUsageNanos {
		t.Errorf("CPUUsage = %d, %v; want at least Stats' %d", cpu, err, again.CPUUsageNanos)
	}
	// sleep sleeps: the figure stays put.
	cpu, err = r.CPUUsage(c.id)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if later, err := r.CPUUsage(c.id); err != nil || later != cpu {
		t.Errorf("CPUUsage of a sleeping container moved from %d to %d (%v)", cpu, later, err)
	}
	// The cgroup's files are kept open between reads, and closed with the container.
	r.cgroups.mu.Lock()
	kept := r.cgroups.m[c.id].kept
	r.cgroups.mu.Unlock()
	if kept == nil || len(kept.fds) == 0 {
		t.Errorf("no cgroup file kept open after Stats: %+v", kept)
	}
	if err := r.Delete(context.Background(), c.id); err != nil {
		t.Fatal(err)
	}
	if kept != nil && (!kept.closed || len(kept.fds) != 0 || r.cgroups.budget.used != 0) {
		t.Errorf("after Delete: kept files closed %v, %d descriptors, budget used %d; want closed, none, 0", kept.closed, len(kept.fds), r.cgroups.budget.used)
	}
	if _, err := r.CPUUsage(c.id); !errors.Is(err, ErrNoCgroup) {
		t.Errorf("CPUUsage of a deleted container: %v, want ErrNoCgroup", err)
	}
	if _, err := r.Stats(c.id); !errors.Is(err, ErrNoCgroup) {
		t.Errorf("Stats of a deleted container: %v, want ErrNoCgroup", err)
	}
	if _, err := r.Stats("../x"); !errors.Is(err, ErrInvalidID) {
		t.Errorf("Stats of an invalid ID: %v, want ErrInvalidID", err)
	}
}

// TestFeaturesFailureIsNotKept: a failed `runc features` (a runtime failing for a
// moment) is answered from the cache only for featuresRetry; once the runtime answers,
// its answer is kept, and asked no more.
func TestFeaturesFailureIsNotKept(t *testing.T) {
	conmon, err := exec.LookPath("conmon")
	if err != nil {
		testenv.Need(t, "conmon: %v", err)
	}
	dir := shortTempDir(t)
	calls := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "fake-runc")
	if err := os.WriteFile(script, []byte(`#!/bin/sh
echo "$*" >> `+calls+`
[ -e `+filepath.Join(dir, "fail")+` ] && { echo "runtime unavailable" >&2; exit 1; }
echo '{"mountOptions":["rro"]}'
`), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFlag := func(on bool) {
		if on {
			if err := os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		} else if err := os.Remove(filepath.Join(dir, "fail")); err != nil {
			t.Fatal(err)
		}
	}
	r, err := New(Config{Handler: "fake", Path: script, ConmonPath: conmon, Root: filepath.Join(dir, "root"), StateDir: filepath.Join(dir, "s")})
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { featuresRetry = d }(featuresRetry)
	featuresRetry = 200 * time.Millisecond
	count := func() int {
		b, _ := os.ReadFile(calls)
		return strings.Count(string(b), "features")
	}

	writeFlag(true)
	if _, err := r.Features(ctxb); err == nil {
		t.Fatal("Features of a failing runtime succeeded")
	}
	if _, err := r.Features(ctxb); err == nil || count() != 1 {
		t.Fatalf("second call at once: %v after %d runs, want the failure from the cache (1 run)", err, count())
	}
	writeFlag(false)
	time.Sleep(featuresRetry)
	f, err := r.Features(ctxb)
	if err != nil || !f.RecursiveReadOnlyMounts {
		t.Fatalf("Features once the runtime answers = %+v, %v; want rro", f, err)
	}
	writeFlag(true)
	time.Sleep(featuresRetry)
	if f, err := r.Features(ctxb); err != nil || !f.RecursiveReadOnlyMounts || count() != 2 {
		t.Fatalf("after an answer = %+v, %v after %d runs; want the kept answer (2 runs)", f, err, count())
	}
}
