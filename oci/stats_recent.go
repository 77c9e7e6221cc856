package oci

import (
	"sync"
	"time"

	"github.com/opencontainers/cgroups"
)

// recentStats is the last reading of a container's stats files (readStats: CPU time,
// memory.stat, memory usage and limit, processes, and the pressure files on v2) that
// Stats made, which Metrics takes instead of reading those files again when it comes
// less than statsShareAge after: the kubelet's ListContainerStats and
// ListPodSandboxMetrics ask for every container's cgroup one after the other, and the
// five files (memory.stat the dearest: about 40 lines, which the kernel sums over the
// hierarchy on v1) are a third of the files Metrics reads with every metric group.
// The figures keep the time they were read (CgroupStats.Timestamp, and
// CgroupMetrics.Shared says so), as the figures of CRI-O's stats cache do
// (stats_collection_period). Only Stats stores a reading: Metrics makes none that Stats
// could take, as Stats computes the swap from the memory usage it read with it.
//
// A nil *recentStats keeps nothing.
type recentStats struct {
	mu   sync.Mutex
	last *statsReading
}

// statsReading is one reading of readStats' files, and when it was made.
type statsReading struct {
	at time.Time
	cs *cgroups.Stats // read only once kept
}

// statsShareAge is how old a reading of Stats may be for Metrics to take it.
const statsShareAge = time.Second

// store keeps cs, read at at, for Metrics. cs must not change afterwards.
func (r *recentStats) store(at time.Time, cs *cgroups.Stats) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.last = &statsReading{at: at, cs: cs}
	r.mu.Unlock()
}

// clear forgets the reading (the cgroup was found gone).
func (r *recentStats) clear() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.last = nil
	r.mu.Unlock()
}

// take returns the reading kept if it was made less than statsShareAge before now (and
// not after it); nil when there is none that young.
func (r *recentStats) take(now time.Time) *statsReading {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	last := r.last
	r.mu.Unlock()
	if last == nil {
		return nil
	}
	if age := now.Sub(last.at); age < 0 || age >= statsShareAge {
		return nil
	}
	return last
}
