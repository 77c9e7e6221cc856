package journal

import (
	"errors"
	"syscall"
	"testing"
	"time"
)

// failCommits makes every later commit of j fail as a full disk would.
func failCommits(j *Journal) {
	j.commits.txMu.Lock()
	defer j.commits.txMu.Unlock()
	j.commits.beforeCommit = func() error { return syscall.ENOSPC }
}

// TestFailedCommitPublishesNothing guards fail-stop: when the commit of a durable change
// fails, readers and watchers still see what the file holds (memory never runs ahead of
// the file), the journal fails (Failed, Err) and refuses every later change, and the
// file, reopened, holds the state from before.
func TestFailedCommitPublishesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup brings a record "pod" to the state before the change.
		setup func(t testing.TB, j *Journal) Record
		// change is the durable call whose commit fails.
		change func(j *Journal, rec Record) error
	}{
		{
			name: "Answer (ready to created)",
			setup: func(t testing.TB, j *Journal) Record {
				rec := begin(t, j, "pod", time.Time{})
				step(t, j, rec.ID, kindA, "1")
				if err := j.ready(rec.ID, 1); err != nil {
					t.Fatal(err)
				}
				return rec
			},
			change: func(j *Journal, rec Record) error { _, err := j.answer(rec.ID, true); return err },
		},
		{
			name:  "Claim (cached to created)",
			setup: cachedRecord,
			change: func(j *Journal, rec Record) error {
				_, err := j.Claim(ClaimRequest{Kind: KindSandbox, Name: "pod", Fingerprint: "fp-pod"})
				return err
			},
		},
		{
			name:   "Remove (created to removing)",
			setup:  createdRecord,
			change: func(j *Journal, rec Record) error { return j.Remove(ctx, rec.ID) },
		},
		{
			name:   "Rollback (cached to undoing)",
			setup:  cachedRecord,
			change: func(j *Journal, rec Record) error { return j.Rollback(ctx, rec.ID) },
		},
		{
			name: "Intent",
			setup: func(t testing.TB, j *Journal) Record {
				rec := begin(t, j, "pod", time.Time{})
				step(t, j, rec.ID, kindA, "1")
				return rec
			},
			change: func(j *Journal, rec Record) error { _, err := j.Intent(rec.ID, "s", kindB, nil); return err },
		},
		{
			name:   "SetMarker",
			setup:  createdRecord,
			change: func(j *Journal, rec Record) error { v := "x"; return j.SetMarker(rec.ID, "stopped", &v) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var u undoLog
			j, path := testJournal(t, Options{Registry: u.registry(kindA, kindB)})
			rec := tc.setup(t, j)
			if err := j.Close(); err != nil { // settle everything lazy on disk, then reopen
				t.Fatal(err)
			}
			j, err := Open(path, Options{Registry: u.registry(kindA, kindB)})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			before, err := j.Get(rec.ID)
			if err != nil {
				t.Fatal(err)
			}
			_, _, changed := j.Watch(KindSandbox, "pod")
			_, anyChange := j.WatchAll(nil)

			failCommits(j)
			if err := tc.change(j, rec); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("the change whose commit failed returned %v, want ErrFailed wrapping ENOSPC", err)
			}
			select {
			case <-j.Failed():
			default:
				t.Error("Failed() is not closed after a failed commit")
			}
			if err := j.Err(); !errors.Is(err, ErrFailed) {
				t.Errorf("Err() = %v, want ErrFailed", err)
			}
			for what, ch := range map[string]<-chan struct{}{"the record's watcher": changed, "WatchAll's channel": anyChange} {
				select {
				case <-ch:
					t.Errorf("%s was woken by a change the file does not hold", what)
				default:
				}
			}
			requireSame := func(when string) {
				t.Helper()
				got, err := j.Get(rec.ID)
				if err != nil || got.State != before.State || len(got.Steps) != len(before.Steps) || len(got.Markers) != len(before.Markers) {
					t.Errorf("%s: Get = %s, %d steps, markers %v (%v); want what the file holds: %s, %d steps, markers %v",
						when, got.State, len(got.Steps), got.Markers, err, before.State, len(before.Steps), before.Markers)
				}
				held, found, _ := j.Watch(KindSandbox, "pod")
				if !found || held.State != before.State {
					t.Errorf("%s: Watch = %s (found %v), want %s", when, held.State, found, before.State)
				}
				if listed := j.List(nil); len(listed) != 1 || listed[0].State != before.State {
					t.Errorf("%s: List = %v, want the record as %s", when, listed, before.State)
				}
			}
			requireSame("after the failed commit")

			// Every later change is refused, and no background work acts on the
			// unpublished change: a removal whose mark failed is not finished by a retry.
			if _, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: "other", Fingerprint: "f"}); !errors.Is(err, ErrFailed) {
				t.Errorf("Begin after the failure = %v, want ErrFailed", err)
			}
			v := "y"
			if err := j.SetMarker(rec.ID, "other", &v); !errors.Is(err, ErrFailed) {
				t.Errorf("SetMarker after the failure = %v, want ErrFailed", err)
			}
			j.retryUndos(ctx)
			j.ExpireCached(ctx)
			if ran := u.order(); len(ran) > 0 {
				t.Errorf("undos ran after the failed commit: %v", ran)
			}
			requireSame("after later calls")

			j.Close()
			again, err := Open(path, Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if got, err := again.Get(rec.ID); err != nil || got.State != before.State {
				t.Errorf("the file holds %s (%v), want %s", got.State, err, before.State)
			}
		})
	}
}

// createdRecord begins a record named pod with one done step of kindA and settles it
// created.
func createdRecord(t testing.TB, j *Journal) Record {
	t.Helper()
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	if err := j.ready(rec.ID, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := j.answer(rec.ID, true); err != nil {
		t.Fatal(err)
	}
	return rec
}

func cachedRecord(t testing.TB, j *Journal) Record {
	t.Helper()
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	if err := j.ready(rec.ID, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := j.answer(rec.ID, false); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestWaiterIsNotAnsweredFromAFailedCommit: a retry waiting on a record that is being
// answered is not woken by an answer whose commit fails.
func TestWaiterIsNotAnsweredFromAFailedCommit(t *testing.T) {
	j, _ := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	if err := j.ready(rec.ID, 1); err != nil {
		t.Fatal(err)
	}
	woken := make(chan State, 1)
	go func() {
		held, _, changed := j.Watch(KindSandbox, "pod")
		if held.State != StateReady {
			woken <- held.State
			return
		}
		<-changed
		now, _, _ := j.Watch(KindSandbox, "pod")
		woken <- now.State
	}()
	time.Sleep(20 * time.Millisecond) // let it wait
	failCommits(j)
	if _, err := j.answer(rec.ID, true); !errors.Is(err, ErrFailed) {
		t.Errorf("Answer = %v, want ErrFailed", err)
	}
	select {
	case state := <-woken:
		t.Fatalf("the waiter saw %s from an answer that never reached the file", state)
	case <-time.After(200 * time.Millisecond):
	}
}
