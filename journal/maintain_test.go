package journal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// stepUndo is an undo whose first call for each record fails (leaving the record undoing
// with a retry due) and whose later calls block until release is closed or their context
// ends: a rollback that is still running.
type stepUndo struct {
	mu      sync.Mutex
	calls   map[string]int
	entered chan string // receives the record ID of each blocking call
	release chan struct{}
}

func newStepUndo() *stepUndo {
	return &stepUndo{calls: map[string]int{}, entered: make(chan string, 16), release: make(chan struct{})}
}

func (u *stepUndo) undo(ctx context.Context, rec Record, step Step) error {
	u.mu.Lock()
	u.calls[rec.ID]++
	first := u.calls[rec.ID] == 1
	u.mu.Unlock()
	if first {
		return errors.New("plugin broken")
	}
	u.entered <- rec.ID
	select {
	case <-u.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startMaintain runs Maintain until the test ends (or stop is called) and waits for it.
func startMaintain(t *testing.T, j *Journal, interval time.Duration) (stop func()) {
	t.Helper()
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		j.Maintain(mctx, interval)
	}()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Maintain did not return within 30s of its context's end")
		}
	}
	t.Cleanup(stop)
	return stop
}

func receive(t *testing.T, ch <-chan string, what string) string {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not happen within 30s", what)
		return ""
	}
}

// TestMaintainIdlesWhileABusyRecordIsDue guards against Maintain spinning: while a
// rollback runs for a record whose earlier undo failed (its retry time has passed),
// Maintain must sleep, not look for due work again and again. The test counts
// Maintain's passes while the rollback is held: the spinning loop made thousands in the
// window, an idle one none after its first.
func TestMaintainIdlesWhileABusyRecordIsDue(t *testing.T) {
	clock := newFakeClock()
	u := newStepUndo()
	reg := NewRegistry()
	reg.Register(kindA, u.undo)
	j, _ := testJournal(t, Options{Now: clock.Now, Registry: reg, UndoRetryMin: time.Second})
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	if err := j.Rollback(ctx, rec.ID); !errors.As(err, new(*UndoError)) {
		t.Fatalf("Rollback = %v, want an UndoError", err)
	}
	clock.Advance(time.Minute) // the failed undo's retry is due

	// A rollback of the record runs (a request's, or a retry) and is held in the undo.
	rolled := make(chan error, 1)
	go func() { rolled <- j.Rollback(ctx, rec.ID) }()
	receive(t, u.entered, "the second undo")

	stop := startMaintain(t, j, time.Hour)
	time.Sleep(300 * time.Millisecond) // time to spin, if it did
	if passes := j.Stats().MaintainPasses; passes > 3 {
		t.Errorf("Maintain made %d passes in 300ms while the only due record was busy; want it idle (at most 3)", passes)
	}

	close(u.release)
	if err := <-rolled; err != nil {
		t.Fatalf("the held rollback: %v", err)
	}
	if _, err := j.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("record still there after its rollback succeeded: %v", err)
	}
	stop()
}

// TestExpiryDoesNotWaitBehindHangingRetries: undo retries that hang (until undo_timeout)
// do not hold up the expiry of a cached record that falls due while they run.
func TestExpiryDoesNotWaitBehindHangingRetries(t *testing.T) {
	u := newStepUndo()
	reg := NewRegistry()
	reg.Register(kindA, u.undo)
	var u2 undoLog
	reg.Register(kindB, func(ctx context.Context, rec Record, step Step) error {
		u2.mu.Lock()
		defer u2.mu.Unlock()
		u2.ran = append(u2.ran, rec.Name)
		return nil
	})
	j, _ := testJournal(t, Options{Registry: reg, CacheTTL: 300 * time.Millisecond,
		UndoRetryMin: 10 * time.Millisecond, UndoRetryMax: 10 * time.Millisecond, UndoTimeout: time.Hour})
	const hanging = 3
	for _, name := range []string{"stuck-1", "stuck-2", "stuck-3"} {
		rec := begin(t, j, name, time.Time{})
		step(t, j, rec.ID, kindA, "1")
		if err := j.Rollback(ctx, rec.ID); !errors.As(err, new(*UndoError)) {
			t.Fatalf("Rollback = %v, want an UndoError", err)
		}
	}
	cached := begin(t, j, "cached", time.Now())
	step(t, j, cached.ID, kindB, "1")
	if err := j.ready(cached.ID, 1); err != nil {
		t.Fatal(err)
	}
	if rec, err := j.answer(cached.ID, false); err != nil || rec.State != StateCached {
		t.Fatalf("Answer = %v, %v; want cached", rec.State, err)
	}

	startMaintain(t, j, 50*time.Millisecond)
	receive(t, u.entered, "the first hanging retry") // the retries are running
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() error {
		if _, err := j.Get(cached.ID); errors.Is(err, ErrNotFound) {
			return nil
		}
		return fmt.Errorf("the cached record (expiry %s) was not expired within 20s while %d undo retries hung", 300*time.Millisecond, hanging)
	})
	u2.mu.Lock()
	defer u2.mu.Unlock()
	if len(u2.ran) != 1 {
		t.Errorf("undos of the expired record: %v, want one", u2.ran)
	}
}
