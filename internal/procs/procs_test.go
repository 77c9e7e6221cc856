package procs

import (
	"runtime"
	"testing"
)

// fakeRuntime stands in for the Go runtime's processor count.
type fakeRuntime struct {
	procs, defaultProcs int
}

func (f *fakeRuntime) governor() *governor {
	return &governor{
		set: func(n int) int {
			prev := f.procs
			if n > 0 {
				f.procs = n
			}
			return prev
		},
		setDefault: func() { f.procs = f.defaultProcs },
	}
}

func TestGovernor(t *testing.T) {
	tests := []struct {
		name    string
		cores   int  // the runtime's default processors
		fromEnv bool // GOMAXPROCS set in the environment
		// the processors after Serving, with one Busy call running, with two, after
		// the first done, after the second
		serving, oneBusy, twoBusy, oneDone, allDone int
	}{
		{name: "four cores", cores: 4, serving: 1, oneBusy: 4, twoBusy: 4, oneDone: 4, allDone: 1},
		{name: "two cores", cores: 2, serving: 1, oneBusy: 2, twoBusy: 2, oneDone: 2, allDone: 1},
		{name: "one core", cores: 1, serving: 1, oneBusy: 1, twoBusy: 1, oneDone: 1, allDone: 1},
		{name: "GOMAXPROCS set by the operator", cores: 4, fromEnv: true, serving: 4, oneBusy: 4, twoBusy: 4, oneDone: 4, allDone: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := &fakeRuntime{procs: tt.cores, defaultProcs: tt.cores}
			g := rt.governor()
			check := func(when string, want int) {
				t.Helper()
				if rt.procs != want {
					t.Errorf("%s: %d processors, want %d", when, rt.procs, want)
				}
			}
			g.serving(tt.fromEnv)
			check("serving", tt.serving)
			first := g.startBusy()
			check("one busy", tt.oneBusy)
			second := g.startBusy()
			check("two busy", tt.twoBusy)
			first()
			first() // a second call of the same done changes nothing
			check("first done", tt.oneDone)
			second()
			check("all done", tt.allDone)
			g.serving(tt.fromEnv) // a second Serving changes nothing
			check("serving again", tt.allDone)
		})
	}
}

// TestBusyBeforeServing: work that started before Serving keeps the default processors
// until it ends, and then the daemon serves on one.
func TestBusyBeforeServing(t *testing.T) {
	rt := &fakeRuntime{procs: 4, defaultProcs: 4}
	g := rt.governor()
	done := g.startBusy()
	g.serving(false)
	if rt.procs != 4 {
		t.Fatalf("%d processors while busy, want 4", rt.procs)
	}
	done()
	if rt.procs != servingProcs {
		t.Fatalf("%d processors after the work, want %d", rt.procs, servingProcs)
	}
}

// TestBusyOnTheRuntime runs Serving and Busy on the real runtime and puts the
// processors back as they were.
func TestBusyOnTheRuntime(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: Serving changes nothing here")
	}
	prev := runtime.GOMAXPROCS(0) // what go test set (-cpu), put back after
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	runtime.SetDefaultGOMAXPROCS()
	want := runtime.GOMAXPROCS(0)
	g := &governor{set: runtime.GOMAXPROCS, setDefault: runtime.SetDefaultGOMAXPROCS}
	g.serving(false)
	if got := runtime.GOMAXPROCS(0); got != servingProcs {
		t.Fatalf("GOMAXPROCS %d when serving, want %d", got, servingProcs)
	}
	done := g.startBusy()
	if got := runtime.GOMAXPROCS(0); got != want {
		t.Errorf("GOMAXPROCS %d while busy, want the default %d", got, want)
	}
	done()
	if got := runtime.GOMAXPROCS(0); got != servingProcs {
		t.Errorf("GOMAXPROCS %d after the work, want %d", got, servingProcs)
	}
}
