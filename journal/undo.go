package journal

import (
	"context"
	"errors"
	"fmt"
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
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{undos: map[StepKind]UndoFunc{}} }

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
	err := j.opts.Registry.undo(uctx, rec, step)
	if err != nil && ctx.Err() == nil && errors.Is(uctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("undo %s did not finish within %s (undo_timeout): %w", step.Kind, j.opts.UndoTimeout, err)
	}
	if j.opts.Hooks.Undone != nil {
		j.opts.Hooks.Undone(step.Kind, step.UndoAttempts > 0, err)
	}
	return err
}

// Rollback undoes every step of a record that may still have an effect, last first, and
// runs all of them even when one fails. When all succeed the record is deleted and its name
// is free. When some fail the name is released anyway, the record stays (state undoing)
// with the failed steps marked and their next retry stored, and an *UndoError is returned.
// A record in state created must be removed with Remove instead.
func (j *Journal) Rollback(ctx context.Context, id string) error {
	return j.runUndo(ctx, id, false)
}

// Remove undoes a created record's steps (last first) and deletes it: the removal of a
// sandbox or container. The record is marked removing durably first, so a crash part way is
// finished at the next start. A failed undo releases the name and is retried later, as in
// Rollback. Removing an unknown ID returns ErrNotFound.
func (j *Journal) Remove(ctx context.Context, id string) error {
	return j.runUndo(ctx, id, true)
}

func (j *Journal) runUndo(ctx context.Context, id string, removal bool) error {
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
		if rec, err := j.Get(id); err == nil && len(rec.FailedUndos()) > 0 {
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
	rec := e.rec.Clone()
	j.mu.Unlock()
	if err != nil {
		return err
	}
	if err := wait(p); err != nil {
		return err
	}

	flow := "journal/rollback/"
	if removal {
		flow = "journal/remove/"
	}
	var failures []StepFailure
	for i := len(rec.Steps) - 1; i >= 0; i-- {
		step := rec.Steps[i]
		if !step.needsUndo() {
			continue
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
	if len(failures) == 0 {
		p, err = j.forget(e)
	} else {
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
	rec, err := j.Get(id)
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
// were rolled back, and the errors of those whose undo failed (they are retried later).
func (j *Journal) ExpireCached(ctx context.Context) (int, error) {
	now := j.opts.Now()
	expired := j.List(func(r *Record) bool { return r.State == StateCached && !r.Expiry.After(now) })
	var errs []error
	for _, rec := range expired {
		j.log.Info("cached record expired, rolling back", "id", rec.ID, "name", rec.Name, "kind", rec.Kind)
		if j.opts.Hooks.Expired != nil {
			j.opts.Hooks.Expired(rec)
		}
		if err := j.Rollback(ctx, rec.ID); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrWrongState) {
			j.log.Warn("cache expiry: undo failed, will retry", "id", rec.ID, "name", rec.Name, "kind", rec.Kind, "err", err)
			errs = append(errs, err)
		}
	}
	return len(expired), errors.Join(errs...)
}

// RetryUndos runs again the rollback of every undoing record that has a failed undo due,
// and of records left undoing or removing by a crash (none in progress in this process).
func (j *Journal) RetryUndos(ctx context.Context) (int, error) {
	now := j.opts.Now()
	j.mu.Lock()
	var due []string
	for id, e := range j.byID {
		if _, busy := j.undoing[id]; busy {
			continue
		}
		if e.rec.State != StateUndoing && e.rec.State != StateRemoving {
			continue
		}
		failed := e.rec.FailedUndos()
		isDue := len(failed) == 0 // interrupted by a crash: nothing failed yet
		for _, s := range failed {
			if !s.NextRetry.After(now) {
				isDue = true
			}
		}
		if isDue {
			due = append(due, id)
		}
	}
	j.mu.Unlock()
	var errs []error
	for _, id := range due {
		rec, err := j.Get(id)
		if err != nil {
			continue
		}
		err = j.runUndo(ctx, id, rec.State == StateRemoving)
		switch {
		case err == nil:
			j.log.Info("undo retry succeeded, record gone", "id", id, "name", rec.Name, "kind", rec.Kind)
		case errors.Is(err, ErrNotFound), errors.Is(err, ErrWrongState):
		default:
			j.log.Warn("undo retry failed, will retry", "id", id, "name", rec.Name, "kind", rec.Kind, "err", err)
			errs = append(errs, err)
		}
	}
	return len(due), errors.Join(errs...)
}

// nextDue returns when the next cached expiry or undo retry falls due (zero if none).
func (j *Journal) nextDue() time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	var next time.Time
	consider := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, e := range j.byID {
		if e.rec.State == StateCached {
			consider(e.rec.Expiry)
		}
		for _, s := range e.rec.Steps {
			if s.Status == StepUndoFailed {
				consider(s.NextRetry)
			}
		}
	}
	return next
}

// Maintain expires cached records and retries failed undos until ctx ends: as soon as
// one falls due, and at least every interval.
func (j *Journal) Maintain(ctx context.Context, interval time.Duration) {
	nextPass := time.Now().Add(interval)
	for {
		j.mu.Lock()
		wake := j.wake
		j.mu.Unlock()
		target := nextPass
		if due := j.nextDue(); !due.IsZero() && due.Before(target) {
			target = due
		}
		if wait := time.Until(target); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-wake:
				// A change may have moved a due time earlier: look again, but
				// no more often than every 10ms when changes come fast.
				timer.Stop()
				select {
				case <-ctx.Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
				continue
			case <-timer.C:
			}
		}
		// Failures are logged per record by both, and retried on a later pass.
		_, _ = j.ExpireCached(ctx)
		_, _ = j.RetryUndos(ctx)
		nextPass = time.Now().Add(interval)
	}
}
