package server

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/crijournal/crijournal/storage"
)

// layerCollector keeps the disk usage of every created container's writable layer,
// measured in the background, so that a stats call costs a map lookup however many files
// a layer holds. Measuring a layer walks all of its files (storage.DirUsage); the kubelet
// asks for the stats of every container every ~10 s, and a walk per call per container
// had no bound. containerd's CRI plugin does the same with its snapshotsSyncer
// (stats_collect_period, 10 s by default); so does this, with the choices below.
//
//   - Owner and stop. The Server owns the one collecting goroutine: StartStatsCollection
//     starts it under the server's lifetime context, and Close cancels that context and
//     waits for the goroutine. A pass checks the context between two containers, so
//     Close waits for at most one container's walk.
//   - Period and bound. A pass walks the layers one after another, never two at once,
//     and the next pass starts one full period (config stats_collect_period) after the
//     previous one ended, not on a fixed tick: however slow the walks, they take at most
//     one core, and never back to back.
//   - New containers. StartContainer queues the container (measureSoon), and the same
//     goroutine measures the queued ones as soon as it is free, without waiting for the
//     next pass nor moving it: a started container's layer, nearly empty then, has a
//     figure within moments, and the metrics and stats that need one (container_fs_usage_bytes)
//     have it. Until then, and for a container the daemon found at start until the first
//     pass, its stats leave the writable layer out, which the kubelet reads as unknown. A
//     stats call never walks a layer itself, so a burst of new containers (or a daemon
//     restart) cannot make the calls walk every layer at once; a burst of starts makes the
//     goroutine walk each new layer once, one after another. containerd reports zeros in
//     that case; none is more honest than a zero that looks measured.
//   - Idle containers. A pass skips the walk of a layer whose container's processes have
//     not run since it was measured (busy, its cgroup's CPU time, is what it was then),
//     for up to idleRewalk: a layer changes through the system calls of the container's
//     processes (an exec session's too: it runs in the container's cgroup), so an idle
//     container's layer is what was measured, at the time reported. One read of one
//     cgroup file instead of a walk: with 100 idle containers a pass cost about 15 ms of
//     CPU (docs/BENCHMARKS.md). What writes into a layer from outside the container
//     (root on the node, through its merged directory) is seen by the walk idleRewalk
//     brings at the latest. A container just started (measureSoon) is always walked.
//   - Forgetting. Each pass measures the containers list names (the created ones) and
//     drops the figures of every other: a removed container's figure stays until the
//     next pass that does not list it, and is never served meanwhile, as stats are only
//     asked of created containers and IDs are not reused.
//
// A figure carries the time it was measured, which stats report as the writable layer's
// timestamp. When a walk fails, the previous figure (with its older time) is kept.
type layerCollector struct {
	// list returns the IDs of the containers to measure.
	list func() []string
	// find returns a container's writable layer directory; it is asked once per
	// container, as the directory does not change while the container exists.
	find func(id string) (string, error)
	// measure walks a directory: storage.DirUsage, or a fake in tests.
	measure func(dir string) (storage.FsUsage, error)
	// now is the clock that stamps the figures: time.Now, or a fake in tests.
	now func() time.Time
	// busy returns a figure that grows whenever container id's processes run (its
	// cgroup's CPU time); ok is false when it cannot tell. Nil: every pass walks every
	// layer.
	busy func(id string) (cpu uint64, ok bool)
	// idleRewalk is how long a pass may keep the figure of an idle container's layer
	// (see "Idle containers").
	idleRewalk time.Duration
	log        *slog.Logger

	soon *idQueue // containers to measure before the next pass (measureSoon)

	mu     sync.Mutex
	layers map[string]layerFigure // by container ID
}

// layerFigure is what the collector knows of one container's writable layer.
type layerFigure struct {
	dir   string
	usage storage.FsUsage
	at    time.Time // when usage was measured; zero while it has not been
	// busy is the container's busy figure read just before that walk; busyOK whether
	// there was one.
	busy   uint64
	busyOK bool
}

// usage returns the last figure measured for container id and the time it was measured;
// ok is false when none has been yet.
func (lc *layerCollector) usage(id string) (u storage.FsUsage, at time.Time, ok bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	f, found := lc.layers[id]
	if !found || f.at.IsZero() {
		return storage.FsUsage{}, time.Time{}, false
	}
	return f.usage, f.at, true
}

// byDir returns the figures measured so far by writable layer directory (for ImageFsInfo).
func (lc *layerCollector) byDir() map[string]storage.FsUsage {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	out := make(map[string]storage.FsUsage, len(lc.layers))
	for _, f := range lc.layers {
		if !f.at.IsZero() {
			out[f.dir] = f.usage
		}
	}
	return out
}

// run collects once at once, then once every period after the previous pass ended,
// until ctx ends; between passes, it measures the containers measureSoon queued.
func (lc *layerCollector) run(ctx context.Context, period time.Duration) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-lc.soon.wake:
			lc.measureQueued(ctx)
			continue
		case <-timer.C:
		}
		lc.collect(ctx)
		timer.Reset(period)
	}
}

// measureSoon queues container id for the collecting goroutine to measure as soon as it
// is free (see "New containers" above).
func (lc *layerCollector) measureSoon(id string) { lc.soon.add(id) }

// measureQueued measures the containers measureSoon queued, one after another.
func (lc *layerCollector) measureQueued(ctx context.Context) {
	for _, id := range lc.soon.take() {
		if ctx.Err() != nil {
			return
		}
		lc.measureOne(id, false)
	}
}

// collect is one pass: it measures the layer of every container list names, one after
// another, and forgets every other container. It stops early, keeping what it measured,
// when ctx ends.
func (lc *layerCollector) collect(ctx context.Context) {
	ids := lc.list()
	live := make(map[string]bool, len(ids))
	for _, id := range ids {
		live[id] = true
	}
	lc.forget(live)
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		lc.measureOne(id, true)
	}
}

// measureOne walks the writable layer of container id and records the figure; with
// skipIdle, not when the container has been idle since its figure was measured, less
// than idleRewalk ago (see "Idle containers").
func (lc *layerCollector) measureOne(id string, skipIdle bool) {
	lc.mu.Lock()
	prev := lc.layers[id]
	lc.mu.Unlock()
	dir := prev.dir
	if dir == "" {
		found, err := lc.find(id)
		if err != nil {
			lc.log.Debug("writable layer not found", "id", id, "err", err)
			return
		}
		dir = found
	}
	var busy uint64
	busyOK := false
	if lc.busy != nil {
		busy, busyOK = lc.busy(id) // before the walk: what runs during it shows next time
	}
	if skipIdle && busyOK && prev.busyOK && busy == prev.busy && !prev.at.IsZero() && lc.now().Sub(prev.at) < lc.idleRewalk {
		return
	}
	u, err := lc.measure(dir) // without the lock: this is the long part
	at := lc.now()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.layers == nil {
		lc.layers = map[string]layerFigure{}
	}
	f := lc.layers[id]
	f.dir = dir
	if err != nil {
		lc.log.Debug("writable layer not measured", "id", id, "dir", dir, "err", err)
	} else {
		f.usage, f.at, f.busy, f.busyOK = u, at, busy, busyOK
	}
	lc.layers[id] = f
}

// forget drops the figures of the containers that are not in live.
func (lc *layerCollector) forget(live map[string]bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for id := range lc.layers {
		if !live[id] {
			delete(lc.layers, id)
		}
	}
}
