package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/migrations"
)

// fakeClock is a settable clock for expiry and backoff tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// undoLog is a registry whose undos record the order they ran in and fail on demand.
type undoLog struct {
	mu   sync.Mutex
	ran  []string
	fail map[StepKind]error
}

func (u *undoLog) registry(kinds ...StepKind) *Registry {
	reg := NewRegistry()
	for _, k := range kinds {
		reg.Register(k, func(ctx context.Context, rec Record, step Step) error {
			u.mu.Lock()
			defer u.mu.Unlock()
			u.ran = append(u.ran, fmt.Sprintf("%s:%s", step.Kind, step.Args["n"]))
			return u.fail[step.Kind]
		})
	}
	return reg
}

func (u *undoLog) setFail(k StepKind, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fail == nil {
		u.fail = map[StepKind]error{}
	}
	if err == nil {
		delete(u.fail, k)
		return
	}
	u.fail[k] = err
}

func (u *undoLog) order() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.ran)
}

const (
	kindA StepKind = "test-a"
	kindB StepKind = "test-b"
	kindC StepKind = "test-c"
)

// testJournal opens a journal in a temp dir; at cleanup it closes it and checks the file
// with bbolt's Check and the journal's invariants.
func testJournal(t testing.TB, opts Options) (*Journal, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "journal.db")
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	j, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		j.Close()
		checkFile(t, path)
	})
	return j, path
}

var ctx = context.Background()

// checkFile runs bbolt's Check and the journal's invariants on a closed journal file.
func checkFile(t testing.TB, path string) {
	t.Helper()
	j, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Errorf("reopen for check: %v", err)
		return
	}
	defer j.Close()
	if problems := j.Check(); len(problems) > 0 {
		t.Errorf("journal check of %s: %v", path, problems)
	}
}

func begin(t testing.TB, j *Journal, name string, deadline time.Time) Record {
	t.Helper()
	rec, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: name, Fingerprint: "fp-" + name, Deadline: deadline, Stage: "start"})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func step(t testing.TB, j *Journal, id string, kind StepKind, n string) {
	t.Helper()
	seq, err := j.Intent(id, "stage "+n, kind, map[string]string{"n": n})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Done(id, seq); err != nil {
		t.Fatal(err)
	}
}

func TestCreateLiveBecomesCreated(t *testing.T) {
	j, _ := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Now().Add(time.Minute))
	if rec.State != StateCreating || !ValidID(rec.ID) {
		t.Fatalf("Begin = %+v", rec)
	}
	step(t, j, rec.ID, kindA, "1")
	step(t, j, rec.ID, kindB, "2")
	if err := j.Ready(rec.ID, map[string]string{"ip": "10.0.0.2"}); err != nil {
		t.Fatal(err)
	}
	got, err := j.Answer(rec.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateCreated || !got.Expiry.IsZero() || string(got.Object) != `{"ip":"10.0.0.2"}` || len(got.Steps) != 2 {
		t.Fatalf("after Answer(live) = %+v", got)
	}
	byName, err := j.GetByName(KindSandbox, "pod")
	if err != nil || byName.ID != rec.ID {
		t.Fatalf("GetByName = %v, %v", byName.ID, err)
	}
}

func TestCreateAfterDeadlineBecomesCachedAndClaimable(t *testing.T) {
	clock := newFakeClock()
	j, _ := testJournal(t, Options{Now: clock.Now, CacheTTL: time.Minute})
	rec := begin(t, j, "pod", clock.Now())
	step(t, j, rec.ID, kindA, "1")
	if err := j.Ready(rec.ID, "obj"); err != nil {
		t.Fatal(err)
	}
	got, err := j.Answer(rec.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateCached || !got.Expiry.Equal(clock.Now().Add(time.Minute)) {
		t.Fatalf("after Answer(not live) = state %s expiry %v", got.State, got.Expiry)
	}
	if _, err := j.Claim(ClaimRequest{Kind: KindSandbox, Name: "pod", Fingerprint: "other"}); !errors.Is(err, ErrFingerprint) {
		t.Fatalf("Claim with another fingerprint = %v, want ErrFingerprint", err)
	}
	claimed, err := j.Claim(ClaimRequest{Kind: KindSandbox, Name: "pod", Fingerprint: "fp-pod"})
	if err != nil {
		t.Fatal(err)
	}
	if claimed.ID != rec.ID || claimed.State != StateCreated || !claimed.Expiry.IsZero() {
		t.Fatalf("Claim = %+v", claimed)
	}
	if _, err := j.Claim(ClaimRequest{Kind: KindSandbox, Name: "pod", Fingerprint: "fp-pod"}); !errors.Is(err, ErrWrongState) {
		t.Fatalf("second Claim = %v, want ErrWrongState", err)
	}
}

func TestBeginReportsHolder(t *testing.T) {
	j, _ := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Time{})
	_, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: "pod", Fingerprint: "x"})
	var held *HeldError
	if !errors.As(err, &held) || !errors.Is(err, ErrNameHeld) {
		t.Fatalf("Begin on a held name = %v, want *HeldError", err)
	}
	if held.Holder.ID != rec.ID || held.Holder.State != StateCreating {
		t.Fatalf("holder = %+v", held.Holder)
	}
	// The same name of another kind is a different name.
	if _, err := j.Begin(BeginRequest{Kind: KindContainer, Name: "pod"}); err != nil {
		t.Fatalf("container with a sandbox's name: %v", err)
	}
}

func TestIllegalTransitions(t *testing.T) {
	tests := []struct {
		name string
		run  func(j *Journal, id string) error
		// setup brings the record to a state first.
		setup func(t *testing.T, j *Journal, id string)
		want  error
	}{
		{name: "Ready with a step in intent", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Intent(id, "s", kindA, nil) },
			run:   func(j *Journal, id string) error { return j.Ready(id, 1) }},
		{name: "Answer before Ready", want: ErrWrongState,
			run: func(j *Journal, id string) error { _, err := j.Answer(id, true); return err }},
		{name: "Done of a missing step", want: ErrWrongState,
			run: func(j *Journal, id string) error { return j.Done(id, 3) }},
		{name: "Done twice", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { step(t, j, id, kindA, "1") },
			run:   func(j *Journal, id string) error { return j.Done(id, 0) }},
		{name: "Remove while creating", want: ErrWrongState,
			run: func(j *Journal, id string) error { return j.Remove(ctx, id) }},
		{name: "Claim while creating", want: ErrWrongState,
			run: func(j *Journal, id string) error {
				_, err := j.Claim(ClaimRequest{Kind: KindSandbox, Name: "pod", Fingerprint: "fp-pod"})
				return err
			}},
		{name: "Rollback of a created record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1); j.Answer(id, true) },
			run:   func(j *Journal, id string) error { return j.Rollback(ctx, id) }},
		{name: "Intent on a cached record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1); j.Answer(id, false) },
			run:   func(j *Journal, id string) error { _, err := j.Intent(id, "s", kindA, nil); return err }},
		{name: "Intent on an unknown ID", want: ErrNotFound,
			run: func(j *Journal, id string) error { _, err := j.Intent(NewID(), "s", kindA, nil); return err }},
		{name: "Remove of an unknown ID", want: ErrNotFound,
			run: func(j *Journal, id string) error { return j.Remove(ctx, NewID()) }},
		{name: "Answer of a created record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1); j.Answer(id, true) },
			run:   func(j *Journal, id string) error { _, err := j.Answer(id, true); return err }},
		{name: "Answer of a cached record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1); j.Answer(id, false) },
			run:   func(j *Journal, id string) error { _, err := j.Answer(id, true); return err }},
		{name: "Ready twice", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1) },
			run:   func(j *Journal, id string) error { return j.Ready(id, 2) }},
		{name: "Remove of a ready record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1) },
			run:   func(j *Journal, id string) error { return j.Remove(ctx, id) }},
		{name: "Remove of a cached record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1); j.Answer(id, false) },
			run:   func(j *Journal, id string) error { return j.Remove(ctx, id) }},
		{name: "Remove of an undoing record", want: ErrWrongState,
			setup: rollBackWithAFailedUndo,
			run:   func(j *Journal, id string) error { return j.Remove(ctx, id) }},
		{name: "Intent on a ready record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1) },
			run:   func(j *Journal, id string) error { _, err := j.Intent(id, "s", kindA, nil); return err }},
		{name: "Intent on an undoing record", want: ErrWrongState,
			setup: rollBackWithAFailedUndo,
			run:   func(j *Journal, id string) error { _, err := j.Intent(id, "s", kindB, nil); return err }},
		{name: "Claim of a created record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.Ready(id, 1); j.Answer(id, true) },
			run: func(j *Journal, id string) error {
				_, err := j.Claim(ClaimRequest{Kind: KindSandbox, Name: "pod", Fingerprint: "fp-pod"})
				return err
			}},
		{name: "Begin of an unknown kind", want: ErrInvalid,
			run: func(j *Journal, id string) error {
				_, err := j.Begin(BeginRequest{Kind: "volume", Name: "v", Fingerprint: "f"})
				return err
			}},
		{name: "Begin with an empty name", want: ErrInvalid,
			run: func(j *Journal, id string) error {
				_, err := j.Begin(BeginRequest{Kind: KindContainer, Fingerprint: "f"})
				return err
			}},
		{name: "Begin with a malformed ID", want: ErrInvalid,
			run: func(j *Journal, id string) error {
				_, err := j.Begin(BeginRequest{Kind: KindContainer, Name: "c", ID: "../x", Fingerprint: "f"})
				return err
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j, _ := testJournal(t, Options{})
			rec := begin(t, j, "pod", time.Time{})
			if tt.setup != nil {
				tt.setup(t, j, rec.ID)
			}
			before, _ := j.Get(rec.ID)
			if err := tt.run(j, rec.ID); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			after, _ := j.Get(rec.ID)
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("a refused call changed the record (-before +after):\n%s", diff)
			}
		})
	}
}

// rollBackWithAFailedUndo leaves the record undoing: a done step whose undo fails (the
// test journals of TestIllegalTransitions register no undo).
func rollBackWithAFailedUndo(t *testing.T, j *Journal, id string) {
	t.Helper()
	step(t, j, id, kindA, "1")
	if err := j.Rollback(ctx, id); !errors.As(err, new(*UndoError)) {
		t.Fatalf("Rollback = %v, want an UndoError", err)
	}
}

// TestCallsAfterClose: every call on a closed journal fails with ErrClosed.
func TestCallsAfterClose(t *testing.T) {
	j, _ := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Time{})
	j.Close()
	for name, call := range map[string]func() error{
		"Begin": func() error {
			_, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: "other", Fingerprint: "f"})
			return err
		},
		"Intent":   func() error { _, err := j.Intent(rec.ID, "s", kindA, nil); return err },
		"Ready":    func() error { return j.Ready(rec.ID, 1) },
		"Rollback": func() error { return j.Rollback(ctx, rec.ID) },
	} {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
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
	if diff := cmp.Diff([]string{"test-c:3", "test-b:2", "test-a:1"}, u.order()); diff != "" {
		t.Errorf("undo order (-want +got):\n%s", diff)
	}
	if _, err := j.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("record still there after a clean rollback: %v", err)
	}
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
		{"ready", func(j *Journal, id string) { j.Ready(id, 1) }},
		{"cached", func(j *Journal, id string) { j.Ready(id, 1); j.Answer(id, false) }},
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
				j.Ready(rec.ID, 1)
				j.Answer(rec.ID, true)
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
	if n, _ := j.RetryUndos(ctx); n != 0 {
		t.Fatalf("RetryUndos before due ran %d", n)
	}
	// Due, still failing: the backoff doubles.
	clock.Advance(time.Second)
	if n, err := j.RetryUndos(ctx); n != 1 || err == nil {
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
	if h, _ := j2.GetByName(KindSandbox, "pod"); h.ID != second.ID {
		t.Fatalf("after reopen the name is held by %s, want %s", h.ID, second.ID)
	}
	u.setFail(kindB, nil)
	clock.Advance(time.Hour)
	if n, err := j2.RetryUndos(ctx); n != 1 || err != nil {
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
	j.Ready(rec.ID, 1)
	j.Answer(rec.ID, true)
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

func TestMarkersAndObject(t *testing.T) {
	j, path := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Time{})
	v := "2026-01-01"
	if err := j.SetMarker(rec.ID, "network-stopped", &v); err != nil {
		t.Fatal(err)
	}
	if err := j.SetObject(rec.ID, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j2, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	got, _ := j2.Get(rec.ID)
	if m, ok := got.Marker("network-stopped"); !ok || m != v || string(got.Object) != `{"a":1}` {
		t.Fatalf("after reopen: markers %v object %s", got.Markers, got.Object)
	}
	if err := j2.SetMarker(rec.ID, "network-stopped", nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := j2.Get(rec.ID); len(got.Markers) != 0 {
		t.Fatalf("marker not cleared: %v", got.Markers)
	}
}

func TestTouchAndExpiry(t *testing.T) {
	clock := newFakeClock()
	var u undoLog
	j, _ := testJournal(t, Options{Now: clock.Now, CacheTTL: time.Minute, Registry: u.registry(kindA)})
	rec := begin(t, j, "pod", clock.Now())
	step(t, j, rec.ID, kindA, "1")
	j.Ready(rec.ID, 1)
	j.Answer(rec.ID, false)

	clock.Advance(50 * time.Second)
	if !j.Touch(KindSandbox, "pod", clock.Now().Add(3*time.Second)) {
		t.Fatal("Touch found no cached record")
	}
	got, _ := j.Get(rec.ID)
	if want := clock.Now().Add(3 * time.Second).Add(time.Minute); !got.Expiry.Equal(want) {
		t.Fatalf("expiry after Touch = %v, want %v", got.Expiry, want)
	}
	clock.Advance(time.Minute)
	if n, err := j.ExpireCached(ctx); n != 0 || err != nil {
		t.Fatalf("ExpireCached before expiry = %d, %v", n, err)
	}
	clock.Advance(4 * time.Second)
	if n, err := j.ExpireCached(ctx); n != 1 || err != nil {
		t.Fatalf("ExpireCached after expiry = %d, %v", n, err)
	}
	if _, err := j.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Fatal("expired record not rolled back")
	}
	if diff := cmp.Diff([]string{"test-a:1"}, u.order()); diff != "" {
		t.Errorf("undos (-want +got):\n%s", diff)
	}
}

// TestReopenEveryState closes and reopens the file with a record in every state: nothing is
// lost and the index is identical.
func TestReopenEveryState(t *testing.T) {
	var u undoLog
	u.setFail(kindB, errors.New("broken"))
	reg := u.registry(kindA, kindB)
	// kindC's undo blocks until released: a removal caught in the middle.
	inUndo, release := make(chan struct{}), make(chan struct{})
	reg.Register(kindC, func(ctx context.Context, rec Record, step Step) error {
		close(inUndo)
		<-release
		return nil
	})
	j, path := testJournal(t, Options{Registry: reg})
	mk := func(name string) Record {
		rec := begin(t, j, name, time.Time{})
		step(t, j, rec.ID, kindA, "1")
		return rec
	}
	mk("creating")
	ready := mk("ready")
	j.Ready(ready.ID, "r")
	cached := mk("cached")
	j.Ready(cached.ID, "c")
	j.Answer(cached.ID, false)
	created := mk("created")
	j.Ready(created.ID, "c")
	j.Answer(created.ID, true)
	undoing := mk("undoing")
	step(t, j, undoing.ID, kindB, "2")
	j.Rollback(ctx, undoing.ID)
	removing := mk("removing")
	step(t, j, removing.ID, kindC, "3")
	j.Ready(removing.ID, "r")
	j.Answer(removing.ID, true)
	removed := make(chan error, 1)
	go func() { removed <- j.Remove(ctx, removing.ID) }()
	<-inUndo
	// The file as a crash now would leave it (the removal's mark is durable before
	// its first undo), reopened below.
	before := j.List(nil)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(t.TempDir(), "crashed.db")
	if err := os.WriteFile(crashed, b, 0o600); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-removed; err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j2, err := Open(crashed, Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	after := j2.List(nil)
	if diff := cmp.Diff(before, after); diff != "" {
		t.Fatalf("records changed across reopen (-before +after):\n%s", diff)
	}
	states := map[State]bool{}
	for _, r := range after {
		states[r.State] = true
		if r.HoldsName {
			if h, err := j2.GetByName(r.Kind, r.Name); err != nil || h.ID != r.ID {
				t.Errorf("name %q index after reopen: %v %v", r.Name, h.ID, err)
			}
		}
	}
	for _, s := range []State{StateCreating, StateReady, StateCached, StateCreated, StateUndoing, StateRemoving} {
		if !states[s] {
			t.Errorf("no record in state %s after reopen", s)
		}
	}
}

func TestWatchSeesEveryChange(t *testing.T) {
	j, _ := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Time{})
	got, found, changed := j.Watch(KindSandbox, "pod")
	if !found || got.ID != rec.ID {
		t.Fatal("Watch did not find the record")
	}
	step(t, j, rec.ID, kindA, "1")
	select {
	case <-changed:
	default:
		t.Fatal("a change after Watch did not close its channel")
	}
	_, found, changed = j.Watch(KindSandbox, "other")
	if found {
		t.Fatal("Watch found a free name")
	}
	begin(t, j, "other", time.Time{})
	select {
	case <-changed:
	default:
		t.Fatal("the name's reservation did not wake a watcher of the free name")
	}
}

// TestConcurrentWaiters races creators and waiters on a few names: each name has exactly
// one winner, every waiter sees the final state, and nobody waits forever.
func TestConcurrentWaiters(t *testing.T) {
	j, _ := testJournal(t, Options{})
	const names, contenders = 8, 16
	var wg sync.WaitGroup
	winners := make([]int, names)
	var mu sync.Mutex
	for n := range names {
		name := fmt.Sprintf("pod-%d", n)
		for range contenders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rec, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: name, Fingerprint: "fp"})
				if err == nil {
					mu.Lock()
					winners[n]++
					mu.Unlock()
					for i := range 3 {
						seq, err := j.Intent(rec.ID, "s", kindA, map[string]string{"i": fmt.Sprint(i)})
						if err != nil {
							t.Error(err)
							return
						}
						j.Done(rec.ID, seq)
					}
					j.Ready(rec.ID, 1)
					if _, err := j.Answer(rec.ID, true); err != nil {
						t.Error(err)
					}
					return
				}
				if !errors.Is(err, ErrNameHeld) {
					t.Error(err)
					return
				}
				wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				defer cancel()
				for {
					rec, found, changed := j.Watch(KindSandbox, name)
					if found && rec.State == StateCreated {
						return
					}
					select {
					case <-changed:
					case <-wctx.Done():
						t.Errorf("waiter on %s never saw created (state %s)", name, rec.State)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	for n, w := range winners {
		if w != 1 {
			t.Errorf("name %d had %d winners", n, w)
		}
	}
}

func TestGroupCommitSharesCommits(t *testing.T) {
	j, _ := testJournal(t, Options{})
	const creators, steps = 16, 10
	ids := make([]string, creators)
	for i := range ids {
		ids[i] = begin(t, j, fmt.Sprintf("pod-%d", i), time.Time{}).ID
	}
	// Begin rides on the next commit: flush the reservations with a durable write.
	if err := j.SetObject(ids[0], 1); err != nil {
		t.Fatal(err)
	}
	before := j.Stats()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range steps {
				if _, err := j.Intent(id, "s", kindA, nil); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	after := j.Stats()
	commits, writes := after.Commits-before.Commits, after.Writes-before.Writes
	if writes != creators*steps {
		t.Fatalf("%d writes, want %d", writes, creators*steps)
	}
	if commits >= writes {
		t.Errorf("%d commits for %d concurrent intents: no commit was shared", commits, writes)
	}
}

func TestOpenInUse(t *testing.T) {
	_, path := testJournal(t, Options{})
	start := time.Now()
	_, err := Open(path, Options{LockTimeout: 100 * time.Millisecond})
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("second Open = %v, want ErrInUse", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("second Open hung")
	}
	if _, err := Open(path, Options{ReadOnly: true, LockTimeout: 100 * time.Millisecond}); !errors.Is(err, ErrInUse) {
		t.Fatalf("read-only Open of a locked file = %v, want ErrInUse", err)
	}
}

func TestOpenReadOnly(t *testing.T) {
	j, path := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Time{})
	j.Close()
	ro, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if got, err := ro.Get(rec.ID); err != nil || got.Name != "pod" {
		t.Fatalf("read-only Get = %+v, %v", got, err)
	}
	if _, err := ro.Begin(BeginRequest{Kind: KindSandbox, Name: "x"}); err == nil {
		t.Fatal("Begin on a read-only journal succeeded")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.db"), Options{ReadOnly: true}); err == nil {
		t.Fatal("read-only Open of a missing file succeeded")
	}
}

// TestOpenRefusesDamagedFiles: a damaged or newer file is refused with a message naming the
// file, never a panic, and the file is left as it was.
func TestOpenRefusesDamagedFiles(t *testing.T) {
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		want   error
	}{
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, 4096+100); err != nil {
				t.Fatal(err)
			}
		}, ErrCorrupt},
		{"random bytes in the meta pages", func(t *testing.T, path string) { scribble(t, path, 16, 8000) }, ErrCorrupt},
		{"random bytes in the data pages", func(t *testing.T, path string) {
			info, _ := os.Stat(path)
			scribble(t, path, 2*4096, info.Size()-2*4096)
		}, ErrCorrupt},
		{"not a bbolt file", func(t *testing.T, path string) {
			os.WriteFile(path, []byte("hello, this is not a database\n"), 0o600)
		}, ErrCorrupt},
		{"newer schema", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			db.Update(func(tx *bolt.Tx) error { return migrations.SetVersionForTest(tx, migrations.Latest()+1) })
			db.Close()
		}, migrations.ErrNewerSchema},
		{"record that is not JSON", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(migrations.BucketRecords).Put([]byte(NewID()), []byte("{garbage"))
			})
			db.Close()
		}, ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			j, err := Open(path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 50 {
				begin(t, j, fmt.Sprintf("pod-%d", i), time.Time{})
			}
			j.Close()
			tt.damage(t, path)
			before, _ := os.ReadFile(path)
			_, err = Open(path, Options{})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Open = %v, want %v", err, tt.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
			// CheckFile lists the damage instead, without panicking or writing.
			if tt.want == ErrCorrupt {
				problems, err := CheckFile(path, time.Second)
				if err != nil || len(problems) == 0 {
					t.Errorf("CheckFile of the damaged file = %v, %v; want its problems", problems, err)
				}
			}
			after, _ := os.ReadFile(path)
			if string(before) != string(after) {
				t.Error("Open or CheckFile changed a file Open refused")
			}
		})
	}
}

// TestCheckFileListsEveryProblem: where Open stops at the first problem, CheckFile lists
// them all; it refuses a file a daemon holds, and passes a sound one.
func TestCheckFileListsEveryProblem(t *testing.T) {
	j, path := testJournal(t, Options{})
	begin(t, j, "pod", time.Time{})
	if _, err := CheckFile(path, 50*time.Millisecond); !errors.Is(err, ErrInUse) {
		t.Fatalf("CheckFile of a file held open = %v, want ErrInUse", err)
	}
	j.Close()
	if problems, err := CheckFile(path, time.Second); err != nil || len(problems) != 0 {
		t.Fatalf("CheckFile of a sound file = %v, %v", problems, err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	badID := NewID()
	db.Update(func(tx *bolt.Tx) error {
		tx.Bucket(migrations.BucketRecords).Put([]byte(badID), []byte("{garbage"))
		return tx.Bucket(migrations.BucketNames).Put(nameKey(KindSandbox, "ghost"), []byte(NewID()))
	})
	db.Close()
	problems, err := CheckFile(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprint(problems)
	for _, want := range []string{badID, "ghost"} {
		if !strings.Contains(text, want) {
			t.Errorf("CheckFile does not list the problem with %q: %v", want, problems)
		}
	}
	if _, err := CheckFile(filepath.Join(t.TempDir(), "none.db"), time.Second); err == nil {
		t.Error("CheckFile of a missing file succeeded")
	}
	// Sound again for testJournal's own check at cleanup.
	db, _ = bolt.Open(path, 0o600, nil)
	db.Update(func(tx *bolt.Tx) error {
		tx.Bucket(migrations.BucketRecords).Delete([]byte(badID))
		return tx.Bucket(migrations.BucketNames).Delete(nameKey(KindSandbox, "ghost"))
	})
	db.Close()
}

// TestDamageToAnySinglePage damages each page of a journal in turn (all but the two meta
// pages, which TestOpenRefusesDamagedFiles covers): Open must refuse the file with
// ErrCorrupt, or open it when the page was not in use, and never panic; CheckFile lists
// the damage whenever Open refuses it.
func TestDamageToAnySinglePage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		rec := begin(t, j, fmt.Sprintf("pod-%d", i), time.Time{})
		step(t, j, rec.ID, kindA, strings.Repeat("x", i)) // values of many sizes
	}
	j.Close()
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const pageSize = 4096
	refused := 0
	for page := int64(2); page*pageSize < int64(len(good)); page++ {
		damaged := filepath.Join(t.TempDir(), "journal.db")
		if err := os.WriteFile(damaged, good, 0o600); err != nil {
			t.Fatal(err)
		}
		scribble(t, damaged, page*pageSize, pageSize)
		j, err := Open(damaged, Options{})
		switch {
		case err == nil:
			j.Close()
		case errors.Is(err, ErrCorrupt):
			refused++
			if problems, cerr := CheckFile(damaged, time.Second); cerr != nil || len(problems) == 0 {
				t.Errorf("page %d: Open refused the file (%v) but CheckFile found %v, %v", page, err, problems, cerr)
			}
		default:
			t.Errorf("page %d: Open = %v, want success or ErrCorrupt", page, err)
		}
	}
	if refused == 0 {
		t.Error("no damaged page was noticed: the test damaged nothing in use")
	}
	t.Logf("%d of %d pages: the damage was refused with ErrCorrupt", refused, int64(len(good))/pageSize-2)
}

func scribble(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := make([]byte, n)
	for i := range junk {
		junk[i] = byte(i*131 + 7)
	}
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

func FuzzDecodeRecord(f *testing.F) {
	good, _ := encodeRecord(&Record{ID: NewID(), Kind: KindSandbox, Name: "n", State: StateCreating,
		Steps: []Step{{Seq: 0, Kind: kindA, Status: StepIntent, Args: map[string]string{"a": "b"}}}})
	f.Add(good)
	f.Add([]byte("{}"))
	f.Add([]byte(`{"id":"x","steps":[{"seq":5}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if err := rec.Validate(); err != nil {
			t.Fatalf("DecodeRecord accepted an invalid record: %v", err)
		}
		again, err := encodeRecord(&rec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeRecord(again); err != nil {
			t.Fatalf("a decoded record does not decode again: %v", err)
		}
	})
}

// TestCheckWhileCommitting is the regression test of a false "reachable freed page" report:
// bbolt's check is not safe alongside a writer, so Check must keep commits out.
func TestCheckWhileCommitting(t *testing.T) {
	j, _ := testJournal(t, Options{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			rec := begin(t, j, fmt.Sprintf("pod-%d", i), time.Time{})
			step(t, j, rec.ID, kindA, "1")
		}
	}()
	for range 50 {
		if problems := j.Check(); len(problems) > 0 {
			t.Errorf("Check during commits: %v", problems)
			break
		}
	}
	close(stop)
	wg.Wait()
}

// TestHooksReportEvents: the hooks that feed the metrics hear of commits, of every undo
// (first attempt or retry, and its result), and of cache expiries.
func TestHooksReportEvents(t *testing.T) {
	type undone struct {
		kind  StepKind
		retry bool
		ok    bool
	}
	var mu sync.Mutex
	var commits int
	var undos []undone
	var expired []string
	clock := newFakeClock()
	var u undoLog
	u.setFail(kindA, errors.New("broken"))
	j, _ := testJournal(t, Options{Now: clock.Now, Registry: u.registry(kindA), CacheTTL: time.Minute,
		UndoRetryMin: time.Second, UndoRetryMax: time.Second,
		Hooks: Hooks{
			Committed: func(d time.Duration, writes int) { mu.Lock(); commits++; mu.Unlock() },
			Undone: func(kind StepKind, retry bool, err error) {
				mu.Lock()
				undos = append(undos, undone{kind, retry, err == nil})
				mu.Unlock()
			},
			Expired: func(rec Record) { mu.Lock(); expired = append(expired, rec.ID); mu.Unlock() },
		}})
	rec := begin(t, j, "pod", time.Time{})
	step(t, j, rec.ID, kindA, "1")
	j.Ready(rec.ID, 1)
	j.Answer(rec.ID, false) // cached
	clock.Advance(2 * time.Minute)
	if n, _ := j.ExpireCached(ctx); n != 1 { // its undo fails
		t.Fatalf("ExpireCached expired %d, want 1", n)
	}
	u.setFail(kindA, nil)
	clock.Advance(2 * time.Second)
	if n, err := j.RetryUndos(ctx); n != 1 || err != nil {
		t.Fatalf("RetryUndos = %d, %v", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]undone{{kindA, false, false}, {kindA, true, true}}, undos, cmp.AllowUnexported(undone{})); diff != "" {
		t.Errorf("undo events (-want +got):\n%s", diff)
	}
	if !slices.Equal(expired, []string{rec.ID}) {
		t.Errorf("expired events %v, want %s", expired, rec.ID)
	}
	if commits == 0 {
		t.Error("no commit reported")
	}
}

// TestOpenMigratesSchema1: a journal written by schema 1 (records keyed by their ID) opens
// with its records and names intact, stored under their schema 2 keys.
func TestOpenMigratesSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	rec := Record{ID: NewID(), Kind: KindSandbox, Name: "pod", Fingerprint: "fp", State: StateCreated,
		Created: time.Now().UTC(), Updated: time.Now().UTC(), HoldsName: true}
	value, err := encodeRecord(&rec)
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		if err := migrations.Migrations[0].Apply(tx); err != nil {
			return err
		}
		if err := tx.Bucket(migrations.BucketRecords).Put([]byte(rec.ID), value); err != nil {
			return err
		}
		if err := tx.Bucket(migrations.BucketNames).Put(nameKey(KindSandbox, "pod"), []byte(rec.ID)); err != nil {
			return err
		}
		return migrations.SetVersionForTest(tx, 1)
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open of a schema 1 journal: %v", err)
	}
	defer j.Close()
	if got, err := j.GetByName(KindSandbox, "pod"); err != nil || got.ID != rec.ID || got.State != StateCreated {
		t.Fatalf("after the migration: %+v, %v", got, err)
	}
	if problems := j.Check(); len(problems) != 0 {
		t.Errorf("check after the migration: %v", problems)
	}
}

// TestSnapshotListsWhatListLists: Snapshot returns the records List returns, in the same
// order, without copying them.
func TestSnapshotListsWhatListLists(t *testing.T) {
	j, _ := testJournal(t, Options{})
	for i := range 5 {
		rec, err := j.Begin(BeginRequest{Kind: KindSandbox, Name: fmt.Sprintf("pod-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := j.Intent(rec.ID, "s", kindA, map[string]string{"i": fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	odd := func(r *Record) bool { return r.Steps[0].Args["i"] != "0" }
	if diff := cmp.Diff(j.List(odd), j.Snapshot(odd)); diff != "" {
		t.Fatalf("Snapshot differs from List (-List +Snapshot):\n%s", diff)
	}
	if got := j.Snapshot(func(*Record) bool { return false }); len(got) != 0 {
		t.Fatalf("Snapshot with a filter that keeps nothing: %d records", len(got))
	}
}
