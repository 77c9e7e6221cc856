package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/storage"
)

// fakeLayers is the outside world of a layerCollector: which containers exist, their
// layer directories, what a walk of each finds, and a clock.
type fakeLayers struct {
	mu      sync.Mutex
	live    []string                     // the created containers, in list order
	bytes   map[string]uint64            // what a walk of each directory finds
	broken  map[string]bool              // directories whose walk fails
	walks   []string                     // the directories walked, in order
	finds   map[string]int               // how often each container's directory was asked for
	now     time.Time                    // the clock; each walk advances it one second
	onWalk  func(dir string)             // called during each walk, when set
	inWalk  int                          // walks running now
	maxWalk int                          // most walks that ran at once
	found   func(string) (string, error) // overrides the directory lookup, when set
}

func newFakeLayers() *fakeLayers {
	return &fakeLayers{bytes: map[string]uint64{}, broken: map[string]bool{}, finds: map[string]int{},
		now: time.Unix(1000, 0)}
}

func (f *fakeLayers) collector() *layerCollector {
	return &layerCollector{
		list: func() []string {
			f.mu.Lock()
			defer f.mu.Unlock()
			return slices.Clone(f.live)
		},
		find: func(id string) (string, error) {
			f.mu.Lock()
			f.finds[id]++
			found := f.found
			f.mu.Unlock()
			if found != nil {
				return found(id)
			}
			return "/layers/" + id, nil
		},
		measure: f.measure,
		now: func() time.Time {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.now
		},
		log:  slog.New(slog.DiscardHandler),
		soon: newIDQueue(),
	}
}

func (f *fakeLayers) measure(dir string) (storage.FsUsage, error) {
	f.mu.Lock()
	f.walks = append(f.walks, dir)
	f.inWalk++
	f.maxWalk = max(f.maxWalk, f.inWalk)
	f.now = f.now.Add(time.Second)
	onWalk := f.onWalk
	f.mu.Unlock()
	if onWalk != nil {
		onWalk(dir)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inWalk--
	if f.broken[dir] {
		return storage.FsUsage{}, fmt.Errorf("walk %s: input/output error", dir)
	}
	return storage.FsUsage{Mountpoint: dir, UsedBytes: f.bytes[dir], InodesUsed: f.bytes[dir] / 100}, nil
}

// TestLayerCollector runs passes of a collector over a changing set of containers and
// checks, after each, what it serves: the last figure and when it was measured, nothing
// for a container not measured yet, and nothing for one that is gone.
func TestLayerCollector(t *testing.T) {
	type want struct {
		bytes uint64
		at    int64 // Unix seconds of the measurement
	}
	for _, tc := range []struct {
		name string
		// before changes the world before a pass; passes is how many passes then run.
		steps []func(f *fakeLayers)
		// asked are the containers asked for after the last pass, with what they
		// should report (absent: no figure).
		want map[string]want
		// walks are the directories walked, in order, over all passes.
		walks []string
	}{
		{
			name:  "nothing before the first pass",
			steps: nil,
			want:  map[string]want{},
			walks: nil,
		},
		{
			name: "one pass measures each container once, in list order",
			steps: []func(f *fakeLayers){func(f *fakeLayers) {
				f.live = []string{"b", "a"}
				f.bytes["/layers/a"], f.bytes["/layers/b"] = 100, 200
			}},
			want:  map[string]want{"a": {100, 1002}, "b": {200, 1001}},
			walks: []string{"/layers/b", "/layers/a"},
		},
		{
			name: "a container created after a pass is measured by the next",
			steps: []func(f *fakeLayers){
				func(f *fakeLayers) { f.live = []string{"a"} },
				func(f *fakeLayers) { f.live = []string{"a", "new"}; f.bytes["/layers/new"] = 700 },
			},
			want:  map[string]want{"a": {0, 1002}, "new": {700, 1003}},
			walks: []string{"/layers/a", "/layers/a", "/layers/new"},
		},
		{
			name: "a container that grew reports its new size at the new time",
			steps: []func(f *fakeLayers){
				func(f *fakeLayers) { f.live = []string{"a"}; f.bytes["/layers/a"] = 100 },
				func(f *fakeLayers) { f.bytes["/layers/a"] = 5000 },
			},
			want:  map[string]want{"a": {5000, 1002}},
			walks: []string{"/layers/a", "/layers/a"},
		},
		{
			name: "a removed container is forgotten by the next pass",
			steps: []func(f *fakeLayers){
				func(f *fakeLayers) { f.live = []string{"a", "gone"} },
				func(f *fakeLayers) { f.live = []string{"a"} },
			},
			want:  map[string]want{"a": {0, 1003}},
			walks: []string{"/layers/a", "/layers/gone", "/layers/a"},
		},
		{
			name: "a failed walk keeps the previous figure and its time",
			steps: []func(f *fakeLayers){
				func(f *fakeLayers) { f.live = []string{"a"}; f.bytes["/layers/a"] = 100 },
				func(f *fakeLayers) { f.bytes["/layers/a"] = 900; f.broken["/layers/a"] = true },
			},
			want:  map[string]want{"a": {100, 1001}},
			walks: []string{"/layers/a", "/layers/a"},
		},
		{
			name: "a first walk that fails leaves no figure",
			steps: []func(f *fakeLayers){
				func(f *fakeLayers) { f.live = []string{"a"}; f.broken["/layers/a"] = true },
			},
			want:  map[string]want{},
			walks: []string{"/layers/a"},
		},
		{
			name: "a container whose directory is not found is not walked",
			steps: []func(f *fakeLayers){func(f *fakeLayers) {
				f.live = []string{"a", "lost"}
				f.found = func(id string) (string, error) {
					if id == "lost" {
						return "", storage.ErrContainerNotFound
					}
					return "/layers/" + id, nil
				}
			}},
			want:  map[string]want{"a": {0, 1001}},
			walks: []string{"/layers/a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeLayers()
			lc := f.collector()
			for _, step := range tc.steps {
				f.mu.Lock()
				step(f)
				f.mu.Unlock()
				lc.collect(context.Background())
			}
			for _, id := range []string{"a", "b", "new", "gone", "lost"} {
				u, at, ok := lc.usage(id)
				w, measured := tc.want[id]
				switch {
				case ok != measured:
					t.Errorf("usage(%s) = %+v at %v, ok %v; want ok %v", id, u, at, ok, measured)
				case ok && (u.UsedBytes != w.bytes || at.Unix() != w.at):
					t.Errorf("usage(%s) = %d bytes at %d, want %d bytes at %d", id, u.UsedBytes, at.Unix(), w.bytes, w.at)
				}
			}
			if !slices.Equal(f.walks, tc.walks) {
				t.Errorf("walked %v, want %v", f.walks, tc.walks)
			}
			if len(lc.layers) > len(f.live) {
				t.Errorf("the collector keeps %d containers, more than the %d live", len(lc.layers), len(f.live))
			}
		})
	}
}

// TestLayerCollectorFindsADirectoryOnce: a container's layer directory does not change
// while it exists, so it is looked up (in the store) once, not on every pass.
func TestLayerCollectorFindsADirectoryOnce(t *testing.T) {
	f := newFakeLayers()
	f.live = []string{"a"}
	lc := f.collector()
	for range 3 {
		lc.collect(context.Background())
	}
	if f.finds["a"] != 1 || len(f.walks) != 3 {
		t.Errorf("3 passes looked the directory up %d times and walked %d times, want 1 and 3", f.finds["a"], len(f.walks))
	}
}

// TestLayerCollectorRun: run measures at once, again after the period, one walk at a
// time, and returns when its context ends, in the middle of a pass, without walking the
// containers left.
func TestLayerCollectorRun(t *testing.T) {
	f := newFakeLayers()
	f.live = []string{"a", "b", "c"}
	passes := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.onWalk = func(dir string) {
		if dir == "/layers/c" {
			passes <- struct{}{}
		}
	}
	lc := f.collector()
	done := make(chan struct{})
	go func() {
		defer close(done)
		lc.run(ctx, 10*time.Millisecond)
	}()
	for range 2 {
		select {
		case <-passes:
		case <-time.After(10 * time.Second):
			t.Fatal("no pass within 10 s")
		}
	}
	// End the context during the next walk of b: c is then not walked.
	stopped := make(chan struct{})
	f.mu.Lock()
	f.onWalk = func(dir string) {
		if dir == "/layers/b" {
			cancel()
			close(stopped)
		}
	}
	f.mu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return within 10 s of its context's end")
	}
	<-stopped
	f.mu.Lock()
	defer f.mu.Unlock()
	if last := f.walks[len(f.walks)-1]; last != "/layers/b" {
		t.Errorf("the last walk was of %s, want b's (c's comes after the context ended)", last)
	}
	if f.maxWalk != 1 {
		t.Errorf("%d walks ran at once, want one at a time", f.maxWalk)
	}
}

// TestWritableLayerBeforeAPass: until the collector has measured a container, its
// stats have no writable layer (and no stats call walks it). BenchmarkWritableLayerStats
// covers the figure served after a pass, over a real store.
func TestWritableLayerBeforeAPass(t *testing.T) {
	f := newFakeLayers()
	f.live = []string{"a"}
	s := &Server{layers: f.collector()}
	if _, err := s.writableLayer("a"); !errors.Is(err, errNotMeasured) {
		t.Fatalf("writableLayer before a pass: %v, want errNotMeasured", err)
	}
	if len(f.walks) != 0 {
		t.Errorf("writableLayer walked %v, want nothing", f.walks)
	}
}

// TestLayerCollectorMeasureSoon: a started container (measureSoon) is measured before
// the next pass, which an hour's period would otherwise make it wait for, and alone.
func TestLayerCollectorMeasureSoon(t *testing.T) {
	f := newFakeLayers()
	f.live = []string{"a"}
	f.bytes["/layers/new"] = 42
	lc := f.collector()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		lc.run(ctx, time.Hour)
	}()
	defer func() {
		cancel()
		<-done
	}()
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if _, _, ok := lc.usage("a"); !ok {
			return errors.New("the first pass has not measured a")
		}
		return nil
	})
	f.mu.Lock()
	f.live = append(f.live, "new")
	f.mu.Unlock()
	lc.measureSoon("new")
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		u, _, ok := lc.usage("new")
		if !ok || u.UsedBytes != 42 {
			return fmt.Errorf("usage of new = %+v, %v; want 42 bytes", u, ok)
		}
		return nil
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"/layers/a", "/layers/new"}; !slices.Equal(f.walks, want) {
		t.Errorf("walks = %v, want %v (the queued container alone, no new pass)", f.walks, want)
	}
}

// TestLayerCollectorByDir: ImageFsInfo's view of the figures is by directory, and has
// only the layers measured so far (a broken walk's, never measured, is absent).
func TestLayerCollectorByDir(t *testing.T) {
	f := newFakeLayers()
	lc := f.collector()
	if got := lc.byDir(); len(got) != 0 {
		t.Fatalf("before any pass: %v, want none", got)
	}
	f.live = []string{"a", "b", "broken"}
	f.bytes["/layers/a"], f.bytes["/layers/b"] = 100, 200
	f.broken["/layers/broken"] = true
	lc.collect(context.Background())
	got := lc.byDir()
	want := map[string]uint64{"/layers/a": 100, "/layers/b": 200}
	if len(got) != len(want) {
		t.Fatalf("byDir = %v, want the figures of %v", got, want)
	}
	for dir, bytes := range want {
		if got[dir].UsedBytes != bytes {
			t.Errorf("byDir[%s] = %+v, want %d bytes", dir, got[dir], bytes)
		}
	}
}

// TestLayerCollectorSkipsIdle: a pass walks again the layer of a container whose
// processes ran since its last walk (its busy figure moved), or whose busy figure is
// unknown, and keeps the figure of an idle one, with its time, until idleRewalk has
// passed; a container queued by measureSoon is walked whatever its busy figure says.
func TestLayerCollectorSkipsIdle(t *testing.T) {
	f := newFakeLayers()
	lc := f.collector()
	lc.idleRewalk = 10 * time.Second // the fake clock moves a second a walk
	busy := map[string]uint64{"idle": 7, "working": 1}
	var busyMu sync.Mutex
	lc.busy = func(id string) (uint64, bool) {
		busyMu.Lock()
		defer busyMu.Unlock()
		v, ok := busy[id]
		return v, ok
	}
	f.live = []string{"idle", "working", "unknown"}
	f.bytes["/layers/idle"], f.bytes["/layers/working"], f.bytes["/layers/unknown"] = 100, 200, 300
	ctx := context.Background()
	walksOf := func() []string {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := slices.Clone(f.walks)
		f.walks = nil
		return out
	}

	lc.collect(ctx) // the first pass walks all three
	if got := walksOf(); !slices.Equal(got, []string{"/layers/idle", "/layers/working", "/layers/unknown"}) {
		t.Fatalf("first pass walked %v", got)
	}
	_, idleAt, _ := lc.usage("idle")

	busyMu.Lock()
	busy["working"] = 2
	busyMu.Unlock()
	f.bytes["/layers/idle"] = 999 // not seen while it stays idle
	lc.collect(ctx)
	if got := walksOf(); !slices.Equal(got, []string{"/layers/working", "/layers/unknown"}) {
		t.Fatalf("second pass walked %v, want the busy and the unknown container only", got)
	}
	if u, at, ok := lc.usage("idle"); !ok || u.UsedBytes != 100 || !at.Equal(idleAt) {
		t.Errorf("idle container's figure = %+v at %v (%v), want 100 bytes at %v, its walk's time", u, at, ok, idleAt)
	}

	lc.measureSoon("idle")
	lc.measureQueued(ctx)
	if got := walksOf(); !slices.Equal(got, []string{"/layers/idle"}) {
		t.Fatalf("measureQueued walked %v, want the idle container", got)
	}
	if u, _, _ := lc.usage("idle"); u.UsedBytes != 999 {
		t.Errorf("after measureSoon: %d bytes, want 999", u.UsedBytes)
	}

	// Once idleRewalk has passed since its walk, an idle container is walked again.
	f.mu.Lock()
	f.now = f.now.Add(lc.idleRewalk)
	f.mu.Unlock()
	lc.collect(ctx)
	if got := walksOf(); !slices.Contains(got, "/layers/idle") {
		t.Errorf("a pass idleRewalk after the last walk walked %v, want the idle container too", got)
	}
}
