package journal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// Rollback and removal: undos run last first, time out, fail and are retried.

// rollBackWithAFailedUndo leaves the record undoing: a done step whose undo fails (the
// test journals of TestIllegalTransitions register no undo).
func rollBackWithAFailedUndo(t *testing.T, j *Journal, id string) {
	t.Helper()
	step(t, j, id, kindA, "1")
	if err := j.Rollback(ctx, id); !errors.As(err, new(*UndoError)) {
		t.Fatalf("Rollback = %v, want an UndoError", err)
	}
}

func TestRollbackRunsUndosLIFOAndFreesName(t *testing.T) {
	var u undoLog
	j, _ := testJournal(t, Options{Registry: u.registry(kindA, kindB, kindC)})
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	step(t, j, rec.ID, kindB, "2")
	if _, err := j.Intent(rec.ID, "s", kindC, map[string]string{"n": "3"}); err != nil { // never done
		t.Fatal(err)
	}
	if err := j.Rollback(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	wantUndoneAndGone(t, j, rec.ID, &u, "a clean rollback")
	begin(t, j, "pod", time.Time{}) // the name is free
}

// TestRollbackOfAFinishedRecordIsDurableFirst: a rollback of a ready or cached record
// commits "undoing" before its first undo runs. A crash during the undos must not leave
// the record ready or cached on disk: recovery would cache it (or keep it) and hand the
// half-undone resource to the retry.
func TestRollbackOfAFinishedRecordIsDurableFirst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		settle func(j *Journal, id string)
	}{
		{"ready", func(j *Journal, id string) { j.ready(id, 1) }},
		{"cached", func(j *Journal, id string) { j.ready(id, 1); j.answer(id, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var path string
			var onDisk State
			reg := NewRegistry()
			reg.Register(kindA, func(ctx context.Context, rec Record, step Step) error {
				// What a crash now would leave: a copy of the file as committed.
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				cp := filepath.Join(t.TempDir(), "crash.db")
				os.WriteFile(cp, b, 0o600)
				j2, err := Open(cp, Options{ReadOnly: true})
				if err != nil {
					return err
				}
				defer j2.Close()
				r, err := j2.Get(rec.ID)
				onDisk = r.State
				return err
			})
			j, p := testJournal(t, Options{Registry: reg})
			path = p
			rec := begin(t, j, "pod", time.Time{})
			step(t, j, rec.ID, kindA, "1")
			tc.settle(j, rec.ID)
			if err := j.Rollback(ctx, rec.ID); err != nil {
				t.Fatal(err)
			}
			if onDisk != StateUndoing {
				t.Errorf("during the first undo the file says %q, want %q", onDisk, StateUndoing)
			}
		})
	}
}

// TestHangingUndoTimesOut: an undo that does not return is cancelled after UndoTimeout and
// counts as failed (retried later); the undos after it still run, in a rollback, a
// removal and UndoSteps alike.
func TestHangingUndoTimesOut(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(j *Journal, id string) error
		live bool // the record is created first
	}{
		{name: "rollback", run: func(j *Journal, id string) error { return j.Rollback(ctx, id) }},
		{name: "removal", live: true, run: func(j *Journal, id string) error { return j.Remove(ctx, id) }},
		{name: "UndoSteps", live: true, run: func(j *Journal, id string) error { return j.UndoSteps(ctx, id, nil, kindB) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u undoLog
			reg := u.registry(kindA)
			reg.Register(kindB, func(ctx context.Context, rec Record, step Step) error {
				<-ctx.Done() // hangs until cancelled
				return ctx.Err()
			})
			j, _ := testJournal(t, Options{Registry: reg, UndoTimeout: 50 * time.Millisecond})
			rec := begin(t, j, "pod", time.Time{})
			step(t, j, rec.ID, kindA, "1")
			step(t, j, rec.ID, kindB, "2")
			if tc.live {
				j.ready(rec.ID, 1)
				j.answer(rec.ID, true)
			}
			err := tc.run(j, rec.ID)
			if err == nil || !strings.Contains(err.Error(), "undo_timeout") || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("got %v, want a failure naming undo_timeout", err)
			}
			got, _ := j.Get(rec.ID)
			if got.Steps[1].Status == StepUndone {
				t.Errorf("the hung undo is marked undone: %+v", got.Steps[1])
			}
			if tc.name != "UndoSteps" {
				if got.State != StateUndoing || got.Steps[1].Status != StepUndoFailed || got.Steps[1].NextRetry.IsZero() {
					t.Errorf("after the timeout: %s, step %+v; want undoing with a retry of the hung undo", got.State, got.Steps[1])
				}
				if diff := cmp.Diff([]string{"test-a:1"}, u.order()); diff != "" {
					t.Errorf("the undo before the hung one did not run (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestFailedUndoReleasesNameAndIsRetried(t *testing.T) {
	clock := newFakeClock()
	var u undoLog
	j, path := testJournal(t, Options{Now: clock.Now, Registry: u.registry(kindA, kindB, kindC), UndoRetryMin: time.Second, UndoRetryMax: 4 * time.Second})
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	step(t, j, rec.ID, kindB, "2")
	step(t, j, rec.ID, kindC, "3")
	u.setFail(kindB, errors.New("plugin broken"))

	err := j.Rollback(ctx, rec.ID)
	var uerr *UndoError
	if !errors.As(err, &uerr) || len(uerr.Failures) != 1 || uerr.Failures[0].Step.Kind != kindB {
		t.Fatalf("Rollback = %v, want one UndoError for %s", err, kindB)
	}
	if diff := cmp.Diff([]string{"test-c:3", "test-b:2", "test-a:1"}, u.order()); diff != "" {
		t.Errorf("a failed undo stopped the others (-want +got):\n%s", diff)
	}
	got, _ := j.Get(rec.ID)
	if got.State != StateUndoing || got.HoldsName || got.Steps[1].Status != StepUndoFailed ||
		got.Steps[0].Status != StepUndone || !got.Steps[1].NextRetry.Equal(clock.Now().Add(time.Second)) {
		t.Fatalf("after a failed undo: %+v", got)
	}
	second := begin(t, j, "pod", time.Time{}) // the name is not pinned
	if second.ID == rec.ID {
		t.Fatal("same ID reused")
	}

	// Not due yet: nothing runs.
	if n, _ := j.retryUndos(ctx); n != 0 {
		t.Fatalf("RetryUndos before due ran %d", n)
	}
	// Due, still failing: the backoff doubles.
	clock.Advance(time.Second)
	if n, err := j.retryUndos(ctx); n != 1 || err == nil {
		t.Fatalf("RetryUndos = %d, %v", n, err)
	}
	got, _ = j.Get(rec.ID)
	if got.Steps[1].UndoAttempts != 2 || !got.Steps[1].NextRetry.Equal(clock.Now().Add(2*time.Second)) {
		t.Fatalf("after a second failure: attempts %d next %v", got.Steps[1].UndoAttempts, got.Steps[1].NextRetry)
	}
	// The retry survives a restart, then succeeds once the undo works.
	j.Close()
	j2, err := Open(path, Options{Now: clock.Now, Registry: u.registry(kindA, kindB, kindC)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j2.Close() })
	if got2, err := j2.Get(rec.ID); err != nil || got2.Steps[1].Status != StepUndoFailed {
		t.Fatalf("after reopen: %+v, %v", got2, err)
	}
	if h, _ := j2.getByName(KindSandbox, "pod"); h.ID != second.ID {
		t.Fatalf("after reopen the name is held by %s, want %s", h.ID, second.ID)
	}
	u.setFail(kindB, nil)
	clock.Advance(time.Hour)
	if n, err := j2.retryUndos(ctx); n != 1 || err != nil {
		t.Fatalf("RetryUndos after the fix = %d, %v", n, err)
	}
	if _, err := j2.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("record still there after a successful retry: %v", err)
	}
	if problems := j2.Check(); len(problems) > 0 {
		t.Fatal(problems)
	}
}

func TestBackoff(t *testing.T) {
	j := &Journal{opts: Options{UndoRetryMin: time.Second, UndoRetryMax: 10 * time.Second}}
	for attempts, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 50: 10 * time.Second} {
		if got := j.backoff(attempts); got != want {
			t.Errorf("backoff(%d) = %v, want %v", attempts, got, want)
		}
	}
}

func TestRemove(t *testing.T) {
	var u undoLog
	j, _ := testJournal(t, Options{Registry: u.registry(kindA, kindB)})
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	step(t, j, rec.ID, kindB, "2")
	j.ready(rec.ID, 1)
	j.answer(rec.ID, true)
	if err := j.UndoSteps(ctx, rec.ID, nil, kindB); err != nil {
		t.Fatal(err)
	}
	if err := j.Remove(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	// kindB was undone by UndoSteps, so Remove undoes only kindA.
	if diff := cmp.Diff([]string{"test-b:2", "test-a:1"}, u.order()); diff != "" {
		t.Errorf("undos (-want +got):\n%s", diff)
	}
	if err := j.Remove(ctx, rec.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Remove = %v, want ErrNotFound", err)
	}
}
