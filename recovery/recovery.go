// Package recovery replays the journal at startup, before the socket is served, so that a
// crash never leaks and never loses: half-done creations are rolled back, finished but
// unanswered ones are cached for the kubelet's retry, interrupted removals are finished,
// and created resources are reconciled with the world. Failed undos are left to the
// journal's background retries: recovery never stops the daemon from starting.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/crijournal/crijournal/journal"
)

// Reconciler checks a created or cached record against the world and repairs what it can;
// it reports whether anything changed. A cached record that lost what it was made of
// (a sandbox whose pause process died while the daemon was down) is rolled back by it:
// nobody holds it yet, and its retry must not claim a broken resource.
type Reconciler func(ctx context.Context, rec journal.Record) (bool, error)

// Summary counts what recovery did.
type Summary struct {
	RolledBack int // creations interrupted part way, undone
	Cached     int // finished but never answered: kept for the retry
	Kept       int // cached records kept with their stored expiry
	Resumed    int // removals or undos interrupted, finished
	Reconciled int // created records repaired
	Retrying   int // records with an undo that failed and will be retried
}

// workers bounds how many records are replayed at once. Records are independent, and
// concurrent replays share the journal's commits (group commit), so recovery of many
// records costs a fraction of one fsync each.
const workers = 64

// Run replays every record of j once: containers first, then sandboxes (a container's
// undo may need its sandbox's namespaces). It logs per record at info level and returns
// the summary (also logged in one line).
func Run(ctx context.Context, j *journal.Journal, log *slog.Logger, reconcile Reconciler) Summary {
	var sum Summary
	var mu sync.Mutex
	all := j.List(nil)
	for _, kind := range []journal.Kind{journal.KindContainer, journal.KindSandbox} {
		work := make(chan journal.Record)
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for rec := range work {
					if j.Err() != nil {
						continue // the journal failed: the daemon stops, the next start recovers
					}
					var one Summary
					replay(ctx, j, log, reconcile, rec, &one)
					mu.Lock()
					sum.add(one)
					mu.Unlock()
				}
			}()
		}
		for _, rec := range all {
			if rec.Kind == kind {
				work <- rec
			}
		}
		close(work)
		wg.Wait()
	}
	if err := j.Err(); err != nil {
		return sum // the caller stops the daemon; the next start recovers again
	}
	// Undos that fail are retried in the background.
	n, err := j.ExpireCached(ctx)
	if n > 0 {
		sum.Kept -= n
		sum.RolledBack += n
	}
	if err != nil && !errors.Is(err, journal.ErrFailed) { // a failed journal: the daemon says so, once
		log.Warn("recovery: an expired cached record's undo failed, will retry", "err", err)
	}
	log.Info("recovery done", "rolled_back", sum.RolledBack, "cached", sum.Cached, "kept", sum.Kept,
		"resumed", sum.Resumed, "reconciled", sum.Reconciled, "retrying", sum.Retrying)
	return sum
}

func (s *Summary) add(o Summary) {
	s.RolledBack += o.RolledBack
	s.Cached += o.Cached
	s.Kept += o.Kept
	s.Resumed += o.Resumed
	s.Reconciled += o.Reconciled
	s.Retrying += o.Retrying
}

// replay recovers one record, counting what it did in sum.
func replay(ctx context.Context, j *journal.Journal, log *slog.Logger, reconcile Reconciler, rec journal.Record, sum *Summary) {
	log = log.With("kind", rec.Kind, "id", rec.ID, "name", rec.Name, "state", rec.State)
	var err error
	switch rec.State {
	case journal.StateCreating:
		err = j.Rollback(ctx, rec.ID)
		if err == nil {
			sum.RolledBack++
			log.Info("recovery: interrupted creation rolled back", "steps", len(rec.Steps))
		}
	case journal.StateReady:
		var cached journal.Record
		cached, err = j.Cache(rec.ID)
		if err == nil {
			if err = checkCached(ctx, j, reconcile, cached); errors.Is(err, errRolledBack) {
				sum.RolledBack++
				log.Info("recovery: finished but unanswered creation lost part of itself: rolled back")
				err = withoutRolledBack(err)
				break
			}
			sum.Cached++
			log.Info("recovery: finished but unanswered creation cached for the retry", "expiry", cached.Expiry)
		}
	case journal.StateCached:
		if err = checkCached(ctx, j, reconcile, rec); errors.Is(err, errRolledBack) {
			sum.RolledBack++
			log.Info("recovery: cached creation lost part of itself: rolled back")
			err = withoutRolledBack(err)
			break
		}
		sum.Kept++
		log.Info("recovery: cached creation kept", "expiry", rec.Expiry)
	case journal.StateRemoving:
		err = j.Remove(ctx, rec.ID)
		if err == nil {
			sum.Resumed++
			log.Info("recovery: interrupted removal finished")
		}
	case journal.StateUndoing:
		if len(rec.FailedUndos()) > 0 {
			sum.Retrying++
			log.Info("recovery: undo still failing, retried in the background", "failed", len(rec.FailedUndos()))
			return
		}
		err = j.Rollback(ctx, rec.ID)
		if err == nil {
			sum.Resumed++
			log.Info("recovery: interrupted rollback finished")
		}
	case journal.StateCreated:
		if reconcile == nil {
			return
		}
		var changed bool
		changed, err = reconcile(ctx, rec)
		if changed && err == nil {
			sum.Reconciled++
			log.Info("recovery: created record reconciled with the node")
		}
	}
	if err != nil {
		var uerr *journal.UndoError
		if errors.Is(err, journal.ErrFailed) {
			return // the journal failed: the daemon stops, saying why, once
		}
		if errors.As(err, &uerr) {
			sum.Retrying++
			log.Warn("recovery: undo failed, will be retried in the background", "err", err)
		} else {
			log.Error("recovery: could not recover record, continuing", "err", err)
		}
	}
}

// withoutRolledBack returns what went wrong in a rollback checkCached reports (an undo
// that failed), or nil.
func withoutRolledBack(err error) error {
	if err == errRolledBack {
		return nil
	}
	return err
}

// errRolledBack is checkCached's report of a cached record that reconcile rolled back.
var errRolledBack = errors.New("rolled back")

// checkCached reconciles a cached record like a created one and returns errRolledBack
// when that rolled it back (it is gone, or left undoing with failed undos to retry).
func checkCached(ctx context.Context, j *journal.Journal, reconcile Reconciler, rec journal.Record) error {
	if reconcile == nil {
		return nil
	}
	_, err := reconcile(ctx, rec)
	after, gerr := j.Get(rec.ID)
	if errors.Is(gerr, journal.ErrNotFound) || (gerr == nil && after.State == journal.StateUndoing) {
		if err != nil {
			return fmt.Errorf("%w: %w", errRolledBack, err)
		}
		return errRolledBack
	}
	return err
}
