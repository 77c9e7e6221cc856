package journal

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/crijournal/crijournal/internal/testenv"
)

// deferredRecord makes a created record "pod" with steps A(1), B(2), C(3), where B's undo
// is registered deferred, and returns it with the undo log.
func deferredRecord(t *testing.T) (*Journal, string, Record, *undoLog) {
	t.Helper()
	return deferredRecordAt(t, nil)
}

// deferredRecordAt is deferredRecord on a journal whose clock is now (nil: time.Now).
func deferredRecordAt(t *testing.T, now func() time.Time) (*Journal, string, Record, *undoLog) {
	t.Helper()
	u := &undoLog{}
	reg := u.registry(kindA, kindC)
	reg.RegisterDeferred(kindB, u.undo)
	j, path := testJournal(t, Options{Registry: reg, Now: now})
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	step(t, j, rec.ID, kindB, "2")
	step(t, j, rec.ID, kindC, "3")
	if err := j.ready(rec.ID, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := j.answer(rec.ID, true); err != nil {
		t.Fatal(err)
	}
	return j, path, rec, u
}

// wantUndoneAndGone checks that the steps A(1), B(2), C(3) of record id were undone
// last first, and that the record is gone, after what the test did (after).
func wantUndoneAndGone(t *testing.T, j *Journal, id string, u *undoLog, after string) {
	t.Helper()
	if diff := cmp.Diff([]string{"test-c:3", "test-b:2", "test-a:1"}, u.order()); diff != "" {
		t.Errorf("undos after %s (-want +got):\n%s", after, diff)
	}
	if _, err := j.Get(id); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after %s = %v, want ErrNotFound", after, err)
	}
}

// removeLeaving removes record id as while Maintain runs (without a Maintain to take
// what the removal leaves), so that the deferred undos stay for the test.
func removeLeaving(t *testing.T, j *Journal, id string) {
	t.Helper()
	j.maintaining.Add(1)
	defer j.maintaining.Add(-1)
	if err := j.Remove(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveDefers: while Maintain runs, Remove undoes the steps after the first
// deferred one (last first) and returns with the name free and the record removing;
// FinishRemovals undoes the rest, in the same order, and deletes the record.
func TestRemoveDefers(t *testing.T) {
	j, _, rec, u := deferredRecord(t)
	removeLeaving(t, j, rec.ID)
	if diff := cmp.Diff([]string{"test-c:3"}, u.order()); diff != "" {
		t.Errorf("undos when Remove returned (-want +got):\n%s", diff)
	}
	got, err := j.Get(rec.ID)
	if err != nil || got.State != StateRemoving || got.HoldsName {
		t.Fatalf("record after Remove = %+v, %v; want removing, its name released", got, err)
	}
	if n := j.PendingRemovals(); n != 1 {
		t.Errorf("PendingRemovals = %d, want 1", n)
	}
	// The name is free for a new record at once.
	again := begin(t, j, "pod", time.Time{})
	if err := j.FinishRemovals(ctx); err != nil {
		t.Fatal(err)
	}
	wantUndoneAndGone(t, j, rec.ID, u, "FinishRemovals")
	if n := j.PendingRemovals(); n != 0 {
		t.Errorf("PendingRemovals after FinishRemovals = %d, want 0", n)
	}
	if got, err := j.Get(again.ID); err != nil || !got.HoldsName {
		t.Errorf("the name's new holder = %+v, %v", got, err)
	}
}

// TestRemoveWithoutMaintainUndoesAll: with no Maintain to finish it (recovery, tests),
// Remove undoes every step, deferred ones too.
func TestRemoveWithoutMaintainUndoesAll(t *testing.T) {
	j, _, rec, u := deferredRecord(t)
	if err := j.Remove(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	wantUndoneAndGone(t, j, rec.ID, u, "Remove")
}

// TestMaintainFinishesDeferredRemoval: Maintain, woken as the removal ends, undoes what
// it left and deletes the record.
func TestMaintainFinishesDeferredRemoval(t *testing.T) {
	j, _, rec, u := deferredRecord(t)
	startMaintain(t, j, time.Hour)
	testenv.Eventually(t, 10*time.Second, time.Millisecond, testenv.Until("Maintain running", func() bool { return j.maintaining.Load() > 0 }))
	if err := j.Remove(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, time.Millisecond, testenv.Until("the removal finished by Maintain", func() bool {
		_, err := j.Get(rec.ID)
		return errors.Is(err, ErrNotFound)
	}))
	wantUndoneAndGone(t, j, rec.ID, u, "Maintain")
}

// TestDeferredRemovalAfterCrash: a crash after Remove answered leaves the record
// removing in the file, with or without its name; the next start's Remove (recovery's)
// undoes what was left, once.
func TestDeferredRemovalAfterCrash(t *testing.T) {
	j, path, rec, _ := deferredRecord(t)
	removeLeaving(t, j, rec.ID)
	crashed := crashCopy(t, path)
	u2 := &undoLog{}
	reg := u2.registry(kindA, kindB, kindC)
	j2, err := Open(crashed, Options{Registry: reg, Logger: j.log})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	got, err := j2.Get(rec.ID)
	if err != nil || got.State != StateRemoving {
		t.Fatalf("record after the crash = %+v, %v; want removing", got, err)
	}
	if err := j2.Remove(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	// C was undone before the crash; its mark may have been lost with it, and an undo
	// is idempotent, so it may run again; B and A run, in that order.
	order := u2.order()
	if len(order) > 0 && order[0] == "test-c:3" {
		order = order[1:]
	}
	if diff := cmp.Diff([]string{"test-b:2", "test-a:1"}, order); diff != "" {
		t.Errorf("undos after the crash (-want +got):\n%s", diff)
	}
	if _, err := j2.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after recovery's Remove = %v, want ErrNotFound", err)
	}
}

// TestDeferredUndosWaitForAPause: what a removal left is due once no removal has left
// anything for deferredQuiet, and at the latest deferredMaxWait after its own removal,
// so that a burst of removals is answered before the deletions it leaves begin.
func TestDeferredUndosWaitForAPause(t *testing.T) {
	clock := newFakeClock()
	j, _, rec, _ := deferredRecordAt(t, clock.Now)
	removeLeaving(t, j, rec.ID)
	removed := clock.Now()
	due := func(at time.Time) (bool, time.Time) {
		_, retry, next := j.dueWork(at, nil)
		return slices.Contains(retry, rec.ID), next
	}
	if ok, next := due(removed); ok || !next.Equal(removed.Add(deferredQuiet)) {
		t.Errorf("at the removal: due %v, next %v; want not due, next after the quiet time", ok, next.Sub(removed))
	}
	if ok, _ := due(removed.Add(deferredQuiet)); !ok {
		t.Errorf("not due after the quiet time")
	}
	// Removals that keep coming hold it back, but not beyond the longest wait.
	for at := removed; at.Before(removed.Add(deferredMaxWait)); at = at.Add(deferredQuiet / 2) {
		j.mu.Lock()
		j.lastDeferred = at
		j.mu.Unlock()
		if ok, _ := due(at); ok {
			t.Fatalf("due %v after its removal while removals kept coming", at.Sub(removed))
		}
	}
	if ok, _ := due(removed.Add(deferredMaxWait)); !ok {
		t.Errorf("not due %v after its removal", deferredMaxWait)
	}
}

// TestFinishRemovalsRetriesFailedDeferredUndos: a deferred undo that failed (cut short by
// the daemon's stop, say) is retried by FinishRemovals at once; a record whose other
// undos failed is left to its retries.
func TestFinishRemovalsRetriesFailedDeferredUndos(t *testing.T) {
	j, _, rec, u := deferredRecord(t)
	removeLeaving(t, j, rec.ID)
	u.setFail(kindB, errors.New("stopping"))
	var uerr *UndoError
	if err := j.retry(ctx, rec.ID); err == nil {
		t.Fatal("the deferred undo's retry succeeded; want it to fail")
	} else if !errors.As(err, &uerr) {
		t.Fatalf("retry = %v, want an UndoError", err)
	}
	if got, _ := j.Get(rec.ID); got.State != StateUndoing {
		t.Fatalf("after the failed deferred undo: state %s, want undoing", got.State)
	}
	u.setFail(kindB, nil)
	if err := j.FinishRemovals(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after FinishRemovals = %v, want ErrNotFound", err)
	}

	// A record whose failed undo is not deferred is left alone.
	other := begin(t, j, "other", time.Time{})
	step(t, j, other.ID, kindC, "9")
	u.setFail(kindC, errors.New("plugin hangs"))
	if err := j.Rollback(ctx, other.ID); err == nil {
		t.Fatal("rollback succeeded; want its undo to fail")
	}
	before := len(u.order())
	if err := j.FinishRemovals(ctx); err != nil {
		t.Fatal(err)
	}
	if after := len(u.order()); after != before {
		t.Errorf("FinishRemovals ran %d undos of a record whose failed undo is not deferred", after-before)
	}
}

// TestFinishRemovalsAfterARunCutShort: FinishRemovals called while Maintain's run of a
// deferred undo is under way (the daemon's stop) waits for that run, and when the stop
// cut it short (it failed), runs the undo again: the record is gone when it returns.
func TestFinishRemovalsAfterARunCutShort(t *testing.T) {
	u := &undoLog{}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	reg := u.registry(kindA, kindC)
	reg.RegisterDeferred(kindB, func(ctx context.Context, rec Record, s Step) error {
		first := false
		once.Do(func() { first = true })
		if first {
			close(entered)
			<-release
			return context.Canceled // cut short by the stop
		}
		return u.undo(ctx, rec, s)
	})
	j, _ := testJournal(t, Options{Registry: reg})
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	step(t, j, rec.ID, kindB, "2")
	step(t, j, rec.ID, kindC, "3")
	if err := j.ready(rec.ID, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := j.answer(rec.ID, true); err != nil {
		t.Fatal(err)
	}
	removeLeaving(t, j, rec.ID)

	retried := make(chan error, 1)
	go func() { retried <- j.retry(ctx, rec.ID) }() // Maintain's worker
	<-entered
	finished := make(chan error, 1)
	go func() { finished <- j.FinishRemovals(ctx) }()
	// Give FinishRemovals the time to list the record (removing) and wait for the
	// run; if it is slower, the test passes without testing the wait.
	time.Sleep(50 * time.Millisecond)
	select {
	case err := <-finished:
		t.Fatalf("FinishRemovals returned %v while the undo ran", err)
	default:
	}
	close(release)
	if err := <-retried; err == nil {
		t.Error("the cut-short run succeeded; want it to fail")
	}
	if err := <-finished; err != nil {
		t.Fatalf("FinishRemovals = %v, want nil", err)
	}
	// The cut-short run went on past its failure (as every undo run does); the one
	// FinishRemovals ran undid B.
	if diff := cmp.Diff([]string{"test-c:3", "test-a:1", "test-b:2"}, u.order()); diff != "" {
		t.Errorf("undos (-want +got):\n%s", diff)
	}
	if _, err := j.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after FinishRemovals = %v, want ErrNotFound", err)
	}
}
