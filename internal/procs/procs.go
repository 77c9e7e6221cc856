// Package procs owns how many processors the daemon's Go code runs on (GOMAXPROCS).
//
// A CRI runtime's own work is small next to that of the processes it starts: a pod's
// start is mostly runc, conmon and the CNI plugins, and an idle node's is the kubelet's
// polling, a few hundred short calls a minute. With a processor per core, each call
// that wakes a goroutine on another processor also wakes an idle thread to look for
// work, finds none and sleeps again; that search was a quarter of an idle daemon's CPU.
// So while serving, the daemon runs its Go code on one processor (Serving), and the
// runtime processes it starts have the other cores. Measured on the project's 2-core
// machine (docs/BENCHMARKS.md): an idle node's polling costs a fifth to a third less, and
// pods start no slower, a little faster four at a time.
//
// The exception is CPU-bound work of the daemon's own: an image pull decompresses and
// hashes its layers in Go, on as many cores as it gets. For as long as such work runs
// (Busy), the daemon has the runtime's default number of processors again (one per core,
// or the cgroup's CPU limit); when the last of it ends, one again.
//
// GOMAXPROCS set in the daemon's environment is the operator's choice, and this package
// then changes nothing; nor on a machine with one core.
package procs

import (
	"os"
	"runtime"
	"sync"
)

// servingProcs is the number of processors the daemon serves with while no Busy work
// runs.
const servingProcs = 1

// governor holds the process's processor count; one per process (the package's).
type governor struct {
	// set and setDefault change the processors: runtime.GOMAXPROCS and
	// runtime.SetDefaultGOMAXPROCS, or fakes in tests.
	set        func(n int) int
	setDefault func()

	mu       sync.Mutex
	governed bool // Serving lowered the processors: Busy may raise them
	busy     int  // Busy work in flight
}

var process = &governor{set: runtime.GOMAXPROCS, setDefault: runtime.SetDefaultGOMAXPROCS}

// Serving lowers the daemon's processors to one, for serving (see the package comment),
// unless GOMAXPROCS is set in the environment or there is only one already. Call it once,
// when start-up work (recovery) is done.
func Serving() { process.serving(os.Getenv("GOMAXPROCS") != "") }

// Busy gives the daemon the runtime's default processors until done is called, for
// CPU-bound work of its own (an image pull). Calls may overlap: the processors go back
// to one when the last done is called. Calling done more than once is a no-op.
func Busy() (done func()) { return process.startBusy() }

func (g *governor) serving(fromEnv bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if fromEnv || g.governed {
		return
	}
	if g.set(0) <= servingProcs {
		return
	}
	g.governed = true
	if g.busy == 0 {
		g.set(servingProcs)
	}
}

func (g *governor) startBusy() (done func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy++
	if g.governed && g.busy == 1 {
		g.setDefault()
	}
	var once sync.Once
	return func() { once.Do(g.endBusy) }
}

func (g *governor) endBusy() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.busy--
	if g.governed && g.busy == 0 {
		g.set(servingProcs)
	}
}
