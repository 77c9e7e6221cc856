package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/crijournal/crijournal/failpoint"
)

// UndoFunc reverses one step. It must be idempotent: "not found" is success, and it may be
// called for a step whose action never happened (status intent) or was already undone.
type UndoFunc func(ctx context.Context, rec Record, step Step) error

// Registry maps step kinds to their undo. Packages that own resources register their kinds
// at start-up; it is safe for concurrent use.
type Registry struct {
	mu    sync.RWMutex
	undos map[StepKind]UndoFunc
	// deferred are the kinds whose undo a removal leaves to Maintain (RegisterDeferred).
	deferred map[StepKind]bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{undos: map[StepKind]UndoFunc{}, deferred: map[StepKind]bool{}}
}

// Register sets the undo of kind. Registering a kind twice is a programming error and
// panics.
func (r *Registry) Register(kind StepKind, fn UndoFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.undos[kind]; dup {
		panic(fmt.Sprintf("journal: undo for step kind %q registered twice", kind))
	}
	r.undos[kind] = fn
}

// RegisterDeferred sets the undo of kind, as Register does, for a step whose undo nobody
// waits for once the record is removed: a removal (Remove) answers before it runs, and
// Maintain runs it at once (see Remove). For resources that only the daemon itself can
// reach and that are costly to delete, such as a container's root filesystem.
func (r *Registry) RegisterDeferred(kind StepKind, fn UndoFunc) {
	r.Register(kind, fn)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.deferred[kind] = true
}

func (r *Registry) isDeferred(kind StepKind) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.deferred[kind]
}

// ErrNoUndo is returned for a step whose kind has no registered undo.
var ErrNoUndo = errors.New("no undo registered for this step kind")

func (r *Registry) undo(ctx context.Context, rec Record, step Step) (err error) {
	r.mu.RLock()
	fn, ok := r.undos[step.Kind]
	r.mu.RUnlock()
	if !ok {
		return fmt.Errorf("step kind %q: %w", step.Kind, ErrNoUndo)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("undo %s panicked: %v", step.Kind, p)
		}
	}()
	return fn(ctx, rec, step)
}

// undoStep runs the undo of one step, bounded by UndoTimeout, and reports it to the hooks.
func (j *Journal) undoStep(ctx context.Context, rec Record, step Step) error {
	uctx, cancel := context.WithTimeout(ctx, j.opts.UndoTimeout)
	defer cancel()
	endSpan := j.startUndo(ctx, &rec, step)
	started := time.Now()
	err := j.opts.Registry.undo(uctx, rec, step)
	j.log.Debug("step undone", "kind", rec.Kind, "id", rec.ID, "name", rec.Name, "step", step.Kind, "took", time.Since(started), "err", err)
	if err != nil && ctx.Err() == nil && errors.Is(uctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("undo %s did not finish within %s (undo_timeout): %w", step.Kind, j.opts.UndoTimeout, err)
	}
	if j.opts.Hooks.Undone != nil {
		j.opts.Hooks.Undone(step.Kind, step.UndoAttempts > 0, err)
	}
	endSpan(err)
	return err
}

// Rollback undoes every step of a record that may still have an effect, last first, and
// runs all of them even when one fails. When all succeed the record is deleted and its name
// is free. When some fail the name is released anyway, the record stays (state undoing)
// with the failed steps marked and their next retry stored, and an *UndoError is returned.
// A record in state created must be removed with Remove instead.
func (j *Journal) Rollback(ctx context.Context, id string) error {
	return j.runUndo(ctx, id, false, false)
}

// Remove undoes a created record's steps (last first) and deletes it: the removal of a
// sandbox or container. The record is marked removing durably first, so a crash part way is
// finished at the next start; the delete rides on the next commit (readers no longer see
// the record when Remove returns), since a crash that loses it is finished the same way. A
// failed undo releases the name and is retried later, as in Rollback. Removing an unknown
// ID returns ErrNotFound.
//
// While Maintain runs, a removal answers before the undo of a kind registered with
// RegisterDeferred: walking the steps last first, it stops at the first such step; that
// step and those made before it are left, in the record (removing, its name released, so
// that a new record may take it), for Maintain, which undoes them once removals pause
// (deferredQuiet), in the same order, and deletes the record. Readers no longer see the
// record as named when Remove returns; a crash before Maintain is done leaves it
// removing, which the next start finishes. Without Maintain running (at recovery, in
// tests), Remove undoes every step.
func (j *Journal) Remove(ctx context.Context, id string) error {
	return j.runUndo(ctx, id, true, j.maintaining.Load() > 0)
}

// Undos a removal left to Maintain (RegisterDeferred) wait for a pause in removals: they
// are due once no removal has left any for deferredQuiet, or deferredMaxWait after their
// own removal, whichever comes first. A burst of removals (a node drained, a job's pods
// ended) is answered first, and what it left (root filesystems to delete, whose deletion
// takes the store's lock and a share of the processors) is done once it has passed,
// instead of slowing the rest of it.
const (
	deferredQuiet   = 100 * time.Millisecond
	deferredMaxWait = 5 * time.Second
)

// FinishRemovals finishes every removal still under way (state removing): the undos
// Remove left to Maintain, and removals a crash interrupted, waiting for those already
// running; and, now rather than at their next retry, records whose only failed undos are
// of deferred kinds (a deferred undo cut short, say by the daemon's stop). Other failed
// undos are left to their retries (one may hang until UndoTimeout). Callers that need
// the removed resources gone (an image's removal, which a root filesystem still made
// from it would refuse; the daemon's stop) call it. It returns the undos that failed.
func (j *Journal) FinishRemovals(ctx context.Context) error {
	j.mu.Lock()
	var ids []string
	for id, e := range j.byID {
		if e.rec.State == StateRemoving || (e.rec.State == StateUndoing && j.onlyDeferredFailed(e.rec)) {
			ids = append(ids, id)
		}
	}
	j.mu.Unlock()
	slices.Sort(ids)
	var errs []error
	for _, id := range ids {
		// An undo of it already running (Maintain's, cut short by the stop, say) is
		// waited for first, and the record looked at again: what that run left failed
		// is run once more here.
		if err := j.waitUndoRun(ctx, id); err != nil {
			errs = append(errs, err)
			continue
		}
		rec, err := j.current(id)
		if err != nil {
			continue
		}
		if rec.State != StateRemoving && (rec.State != StateUndoing || !j.onlyDeferredFailed(rec)) {
			continue
		}
		if err := j.runUndo(ctx, id, rec.State == StateRemoving, false); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrWrongState) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitUndoRun waits until no undo of record id is running, or ctx ends.
func (j *Journal) waitUndoRun(ctx context.Context, id string) error {
	for {
		j.mu.Lock()
		busy, ok := j.undoing[id]
		j.mu.Unlock()
		if !ok {
			return nil
		}
		select {
		case <-busy:
		case <-ctx.Done():
			return fmt.Errorf("record %s: waiting for its undo under way: %w", id, ctx.Err())
		}
	}
}

// onlyDeferredFailed reports whether rec has failed undos and all of them are of kinds
// registered deferred.
func (j *Journal) onlyDeferredFailed(rec Record) bool {
	failed := rec.FailedUndos()
	for _, s := range failed {
		if !j.opts.Registry.isDeferred(s.Kind) {
			return false
		}
	}
	return len(failed) > 0
}

// PendingRemovals counts the records being removed (state removing): those whose
// removal answered with undos left to Maintain (see Remove), and those being removed
// now.
func (j *Journal) PendingRemovals() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := 0
	for _, e := range j.byID {
		if e.rec.State == StateRemoving {
			n++
		}
	}
	return n
}

// runUndo undoes a record's steps, last first: a rollback, or with removal a removal
// (see Rollback and Remove); with deferring, a removal leaves the undos of deferred
// kinds, and of every step before the first of them, to Maintain.
func (j *Journal) runUndo(ctx context.Context, id string, removal, deferring bool) error {
	j.mu.Lock()
	e, err := j.lookup(id)
	if err != nil {
		j.mu.Unlock()
		return err
	}
	if busy, ok := j.undoing[id]; ok {
		// Someone is already undoing it: wait for them, then report what is left.
		j.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return fmt.Errorf("record %s: %w", id, ctx.Err())
		}
		if rec, err := j.current(id); err == nil && len(rec.FailedUndos()) > 0 {
			return &UndoError{ID: id, Failures: failuresOf(rec)}
		}
		return nil
	}
	switch {
	case removal && e.rec.State != StateCreated && e.rec.State != StateRemoving:
		err = fmt.Errorf("remove %s: state %s: %w", id, e.rec.State, ErrWrongState)
	case !removal && e.rec.State == StateCreated:
		err = fmt.Errorf("rollback %s: state created, use Remove: %w", id, ErrWrongState)
	}
	if err != nil {
		j.mu.Unlock()
		return err
	}
	finished := make(chan struct{})
	j.undoing[id] = finished
	defer func() {
		j.mu.Lock()
		delete(j.undoing, id)
		close(j.runEnded) // its next retry, if any, is now due for Maintain
		j.runEnded = make(chan struct{})
		j.mu.Unlock()
		close(finished)
	}()
	// The mark must be durable before anything is undone when the record on disk is one
	// recovery would keep, cache or hand out (created, ready, cached): a crash part way
	// must find "removing" or "undoing" there, not a record with half its resources
	// gone. A record already "creating", "undoing" or "removing" on disk is undone after
	// a crash all the same, so its mark rides on the next commit.
	durable := e.rec.State == StateCreated || e.rec.State == StateReady || e.rec.State == StateCached
	p, err := j.change(e, durable, func(r *Record) {
		if removal {
			r.State = StateRemoving
		} else {
			r.State = StateUndoing
		}
		r.Stage = "undo"
	})
	if err == nil {
		j.endOpenSteps(e)
	}
	rec := e.rec.Clone()
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if err := wait(p); err != nil {
		return err
	}
	var failures []StepFailure
	ctx, endRun := j.startUndoRun(ctx, &rec, removal)
	defer func() { endRun(len(failures)) }()

	flow := "journal/rollback/"
	if removal {
		flow = "journal/remove/"
	}
	left := false // undos left to Maintain (deferring)
	for i := len(rec.Steps) - 1; i >= 0; i-- {
		step := rec.Steps[i]
		if !step.needsUndo() {
			continue
		}
		if deferring && j.opts.Registry.isDeferred(step.Kind) {
			// This one and every earlier one: Maintain undoes them in this same
			// order, so that no step is undone before one made after it.
			left = true
			break
		}
		uerr := failpoint.Inject(flow + string(step.Kind) + "/before-undo")
		if uerr == nil {
			uerr = j.undoStep(ctx, rec, step)
		}
		if uerr == nil {
			uerr = failpoint.Inject(flow + string(step.Kind) + "/after-undo")
		}
		if uerr != nil {
			failures = append(failures, StepFailure{Step: step, Err: uerr})
		}
		if err := j.markUndo(id, step.Seq, uerr); err != nil {
			return err
		}
	}

	if err := failpoint.Inject(flow + "before-forget"); err != nil {
		failures = append(failures, StepFailure{Err: err})
	}
	j.mu.Lock()
	e, err = j.lookup(id)
	if err != nil {
		j.mu.Unlock()
		return err
	}
	switch {
	case len(failures) == 0 && left:
		// Nobody waits for the rest: the name is free now, and Maintain finishes the
		// removal once removals pause (deferredQuiet). Lazy: a crash that loses the
		// release leaves the record removing with its name, which the next start
		// finishes alike.
		j.lastDeferred = j.opts.Now()
		p, err = j.change(e, false, func(r *Record) { r.HoldsName = false })
	case len(failures) == 0:
		// A removal's delete rides on the next commit: a crash that loses it leaves the
		// record removing, with every step undone or to undo again (undos are
		// idempotent), which the next start finishes; so the removal's answer need not
		// wait for it (BenchmarkRemove: one commit per removal instead of two). A
		// rollback's delete stays durable, as it was: it is not on a pod's way down.
		p, err = j.forget(e, !removal)
	default:
		p, err = j.change(e, true, func(r *Record) {
			r.State = StateUndoing
			r.HoldsName = false
		})
	}
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if err := wait(p); err != nil {
		return err
	}
	if len(failures) > 0 {
		return &UndoError{ID: id, Failures: failures}
	}
	return nil
}

func failuresOf(rec Record) []StepFailure {
	var out []StepFailure
	for _, s := range rec.FailedUndos() {
		out = append(out, StepFailure{Step: s, Err: errors.New(s.LastError)})
	}
	return out
}

// markUndo records the outcome of one undo; the mark rides on the next commit.
func (j *Journal) markUndo(id string, seq int, uerr error) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, err := j.lookup(id)
	if err != nil {
		return err
	}
	now := j.opts.Now()
	_, err = j.change(e, false, func(r *Record) {
		s := &r.Steps[seq]
		s.Finished = now
		if uerr == nil {
			s.Status = StepUndone
			s.LastError = ""
			s.NextRetry = time.Time{}
			return
		}
		s.Status = StepUndoFailed
		s.UndoAttempts++
		s.LastError = uerr.Error()
		s.NextRetry = now.Add(j.backoff(s.UndoAttempts))
	})
	return err
}

// backoff is the wait before retry number attempts+1: UndoRetryMin doubled per failed
// attempt, capped at UndoRetryMax.
func (j *Journal) backoff(attempts int) time.Duration {
	d := j.opts.UndoRetryMin
	for i := 1; i < attempts && d < j.opts.UndoRetryMax; i++ {
		d *= 2
	}
	return min(d, j.opts.UndoRetryMax)
}

// UndoSteps undoes the completed steps of the given kinds in a live record, last first, and
// in one durable write marks them undone and sets the given markers (nil values clear):
// for example StopPodSandbox tears the network down while the sandbox stays, and records
// that it did. The first failure stops it and is returned; the step stays done and no
// marker is set, so the caller can try again.
func (j *Journal) UndoSteps(ctx context.Context, id string, markers map[string]*string, kinds ...StepKind) error {
	rec, err := j.current(id)
	if err != nil {
		return err
	}
	want := map[StepKind]bool{}
	for _, k := range kinds {
		want[k] = true
	}
	var done []int
	for i := len(rec.Steps) - 1; i >= 0; i-- {
		step := rec.Steps[i]
		if !want[step.Kind] || !step.needsUndo() {
			continue
		}
		err := j.undoStep(ctx, rec, step)
		if err != nil {
			return fmt.Errorf("undo %s of %s: %w", step.Kind, id, err)
		}
		done = append(done, step.Seq)
	}
	if len(done) == 0 && len(markers) == 0 {
		return nil
	}
	return j.update(id, func(r *Record) {
		now := j.opts.Now()
		for _, seq := range done {
			r.Steps[seq].Status = StepUndone
			r.Steps[seq].Finished = now
		}
		setMarkers(r, markers)
	})
}

// ExpireCached rolls back every cached record whose expiry has passed. It returns how many
// were rolled back, and the errors of those whose undo failed, one per record (they are
// retried later).
func (j *Journal) ExpireCached(ctx context.Context) (int, error) {
	expired, _, _ := j.dueWork(j.opts.Now(), nil)
	var errs []error
	for _, id := range expired {
		if err := j.expire(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return len(expired), errors.Join(errs...)
}

// expire rolls back one cached record whose expiry passed; a failed undo is returned
// (for the caller to report), and retried later.
func (j *Journal) expire(ctx context.Context, id string) error {
	rec, err := j.current(id)
	if err != nil {
		return nil
	}
	j.log.Info("cached record expired, rolling back", "id", rec.ID, "name", rec.Name, "kind", rec.Kind)
	if j.opts.Hooks.Expired != nil {
		j.opts.Hooks.Expired(rec)
	}
	err = j.Rollback(ctx, rec.ID)
	if errors.Is(err, ErrFailed) {
		return err // the daemon stops, saying why, once
	}
	if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrWrongState) {
		return fmt.Errorf("cache expiry of %s %q: %w", rec.Kind, rec.Name, err)
	}
	return nil
}

// retry runs the rollback (or removal) of one undoing (or removing) record again; a
// failure is returned (for the caller to report), and retried later.
func (j *Journal) retry(ctx context.Context, id string) error {
	rec, err := j.current(id)
	if err != nil {
		return nil
	}
	err = j.runUndo(ctx, id, rec.State == StateRemoving, false)
	switch {
	case err == nil && rec.leftToMaintain():
		j.log.Debug("removal finished after its answer", "id", id, "name", rec.Name, "kind", rec.Kind)
	case err == nil:
		j.log.Info("undo retry succeeded, record gone", "id", id, "name", rec.Name, "kind", rec.Kind)
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrWrongState):
	case errors.Is(err, ErrFailed):
		return err // the daemon stops, saying why, once
	default:
		return fmt.Errorf("undo retry of %s %q: %w", rec.Kind, rec.Name, err)
	}
	return nil
}

// dueWork looks at the records as queued and lists the cached ones whose expiry has
// passed, and the undoing or removing ones with a failed undo due or none failed yet (a
// crash interrupted them), leaving out records whose undo is running now and those in
// skip. next is the earliest expiry or retry time still to come among the others (zero if
// none): a record being undone has no due time, since its run sets the next one.
func (j *Journal) dueWork(now time.Time, skip map[string]job) (expire, retry []string, next time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	for id, e := range j.byID {
		if _, busy := j.undoing[id]; busy {
			continue
		}
		if _, busy := skip[id]; busy {
			continue
		}
		switch e.rec.State {
		case StateCached:
			if e.rec.Expiry.After(now) {
				later(e.rec.Expiry)
			} else {
				expire = append(expire, id)
			}
		case StateUndoing, StateRemoving:
			failed := e.rec.FailedUndos()
			due := len(failed) == 0 // interrupted by a crash: nothing failed yet
			if due && e.rec.leftToMaintain() {
				// Undos a removal left (see Remove): after the burst of removals.
				at := j.lastDeferred.Add(deferredQuiet)
				if capped := e.rec.Updated.Add(deferredMaxWait); capped.Before(at) {
					at = capped
				}
				if at.After(now) {
					later(at)
					due = false
				}
			}
			for _, s := range failed {
				if s.NextRetry.After(now) {
					later(s.NextRetry)
				} else {
					due = true
				}
			}
			if due {
				retry = append(retry, id)
			}
		}
	}
	slices.Sort(expire)
	slices.Sort(retry)
	return expire, retry, next
}

// job is one of Maintain's two kinds of work.
type job int

const (
	jobExpire job = iota // roll back a cached record whose expiry passed
	jobRetry             // retry the failed undos of an undoing or removing record
)

// maintainWorkers bounds how many rollbacks Maintain runs at once for each job. Each job
// has workers of its own, so a queue of undo retries that hang (each until undo_timeout)
// never holds up the expiry of a cached record, and one hanging undo holds up no more
// than its own worker.
const maintainWorkers = 4

// Maintain expires cached records and retries failed undos until ctx ends or the journal
// fails: each as soon as it falls due, in workers of its own (maintainWorkers per job),
// and it looks again at least every interval. It sleeps while nothing is due: a record
// whose undo is running has no due time until that run ends. It returns once its workers
// have returned; they are cancelled when it stops.
func (j *Journal) Maintain(ctx context.Context, interval time.Duration) {
	j.maintaining.Add(1)
	defer j.maintaining.Add(-1)
	ctx, cancel := context.WithCancel(ctx)
	var workers sync.WaitGroup
	defer workers.Wait()
	defer cancel()
	running := map[string]job{} // records Maintain's workers are rolling back
	busy := map[job]int{}
	ended := make(chan string, 2*maintainWorkers) // a worker's record, when it returns
	start := func(id string, what job) {
		if busy[what] >= maintainWorkers {
			return // ended wakes the loop when a worker is free
		}
		running[id] = what
		busy[what]++
		workers.Add(1)
		go func() {
			defer workers.Done()
			// Failures are logged per record, and retried at their next due time; a
			// failed journal is reported by the daemon, once.
			run := j.retry
			if what == jobExpire {
				run = j.expire
			}
			if err := run(ctx, id); err != nil && !errors.Is(err, ErrFailed) {
				j.log.Warn("undo failed, will retry", "id", id, "err", err)
			}
			ended <- id
		}()
	}
	nextPass := j.opts.Now().Add(interval)
	for {
		j.maintainPasses.Add(1)
		j.mu.Lock()
		wake, runEnded := j.wake, j.runEnded
		j.mu.Unlock()
		expire, retry, next := j.dueWork(j.opts.Now(), running)
		for _, id := range expire {
			start(id, jobExpire)
		}
		for _, id := range retry {
			start(id, jobRetry)
		}
		target := nextPass
		if !next.IsZero() && next.Before(target) {
			target = next
		}
		timer := time.NewTimer(target.Sub(j.opts.Now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-j.Failed():
			timer.Stop()
			return
		case id := <-ended:
			timer.Stop()
			busy[running[id]]--
			delete(running, id)
		case <-runEnded:
			timer.Stop()
		case <-wake:
			// A change may have moved a due time earlier: look again, but no more
			// often than every 10ms when changes come fast.
			timer.Stop()
			select {
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		case <-timer.C:
			if now := j.opts.Now(); !now.Before(nextPass) {
				nextPass = now.Add(interval)
			}
		}
	}
}
