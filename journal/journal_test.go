package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
		reg.Register(k, u.undo)
	}
	return reg
}

// undo logs step as "<kind>:<n>" and fails with u.fail[step.Kind]: every kind's undo.
func (u *undoLog) undo(_ context.Context, _ Record, step Step) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.ran = append(u.ran, fmt.Sprintf("%s:%s", step.Kind, step.Args["n"]))
	return u.fail[step.Kind]
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

// crashCopy copies the journal file at path as it is now, what a crash now would leave,
// and returns the copy's path.
func crashCopy(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "crashed.db")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return cp
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
	if err := j.ready(rec.ID, map[string]string{"ip": "10.0.0.2"}); err != nil {
		t.Fatal(err)
	}
	got, err := j.answer(rec.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != StateCreated || !got.Expiry.IsZero() || string(got.Object) != `{"ip":"10.0.0.2"}` || len(got.Steps) != 2 {
		t.Fatalf("after Answer(live) = %+v", got)
	}
	byName, err := j.getByName(KindSandbox, "pod")
	if err != nil || byName.ID != rec.ID {
		t.Fatalf("GetByName = %v, %v", byName.ID, err)
	}
}

func TestCreateAfterDeadlineBecomesCachedAndClaimable(t *testing.T) {
	clock := newFakeClock()
	j, _ := testJournal(t, Options{Now: clock.Now, CacheTTL: time.Minute})
	rec := begin(t, j, "pod", clock.Now())
	step(t, j, rec.ID, kindA, "1")
	if err := j.ready(rec.ID, "obj"); err != nil {
		t.Fatal(err)
	}
	got, err := j.answer(rec.ID, false)
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
			run:   func(j *Journal, id string) error { return j.ready(id, 1) }},
		{name: "Answer before Ready", want: ErrWrongState,
			run: func(j *Journal, id string) error { _, err := j.answer(id, true); return err }},
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
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1); j.answer(id, true) },
			run:   func(j *Journal, id string) error { return j.Rollback(ctx, id) }},
		{name: "Intent on a cached record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1); j.answer(id, false) },
			run:   func(j *Journal, id string) error { _, err := j.Intent(id, "s", kindA, nil); return err }},
		{name: "Intent on an unknown ID", want: ErrNotFound,
			run: func(j *Journal, id string) error { _, err := j.Intent(newID(), "s", kindA, nil); return err }},
		{name: "Remove of an unknown ID", want: ErrNotFound,
			run: func(j *Journal, id string) error { return j.Remove(ctx, newID()) }},
		{name: "Answer of a created record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1); j.answer(id, true) },
			run:   func(j *Journal, id string) error { _, err := j.answer(id, true); return err }},
		{name: "Answer of a cached record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1); j.answer(id, false) },
			run:   func(j *Journal, id string) error { _, err := j.answer(id, true); return err }},
		{name: "Ready twice", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1) },
			run:   func(j *Journal, id string) error { return j.ready(id, 2) }},
		{name: "Remove of a ready record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1) },
			run:   func(j *Journal, id string) error { return j.Remove(ctx, id) }},
		{name: "Remove of a cached record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1); j.answer(id, false) },
			run:   func(j *Journal, id string) error { return j.Remove(ctx, id) }},
		{name: "Remove of an undoing record", want: ErrWrongState,
			setup: rollBackWithAFailedUndo,
			run:   func(j *Journal, id string) error { return j.Remove(ctx, id) }},
		{name: "Intent on a ready record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1) },
			run:   func(j *Journal, id string) error { _, err := j.Intent(id, "s", kindA, nil); return err }},
		{name: "Intent on an undoing record", want: ErrWrongState,
			setup: rollBackWithAFailedUndo,
			run:   func(j *Journal, id string) error { _, err := j.Intent(id, "s", kindB, nil); return err }},
		{name: "Claim of a created record", want: ErrWrongState,
			setup: func(t *testing.T, j *Journal, id string) { j.ready(id, 1); j.answer(id, true) },
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
		"Ready":    func() error { return j.ready(rec.ID, 1) },
		"Rollback": func() error { return j.Rollback(ctx, rec.ID) },
	} {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
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
	j.ready(rec.ID, 1)
	j.answer(rec.ID, false)

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
	j.ready(ready.ID, "r")
	cached := mk("cached")
	j.ready(cached.ID, "c")
	j.answer(cached.ID, false)
	created := mk("created")
	j.ready(created.ID, "c")
	j.answer(created.ID, true)
	undoing := mk("undoing")
	step(t, j, undoing.ID, kindB, "2")
	j.Rollback(ctx, undoing.ID)
	removing := mk("removing")
	step(t, j, removing.ID, kindC, "3")
	j.ready(removing.ID, "r")
	j.answer(removing.ID, true)
	removed := make(chan error, 1)
	go func() { removed <- j.Remove(ctx, removing.ID) }()
	<-inUndo
	// The file as a crash now would leave it (the removal's mark is durable before
	// its first undo), reopened below.
	before := j.List(nil)
	crashed := crashCopy(t, path)
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
			if h, err := j2.getByName(r.Kind, r.Name); err != nil || h.ID != r.ID {
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

// TestChangedSeesEveryChange: the channel Changed returns is closed by the next published
// change of any record, including a deletion, and not before.
func TestChangedSeesEveryChange(t *testing.T) {
	j, _ := testJournal(t, Options{})
	changed := j.Changed()
	rec := begin(t, j, "pod", time.Time{})
	select {
	case <-changed:
	default:
		t.Fatal("a reservation after Changed did not close its channel")
	}
	changed = j.Changed()
	select {
	case <-changed:
		t.Fatal("closed with nothing changed")
	default:
	}
	if err := j.Rollback(ctx, rec.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("the record's deletion did not close the channel")
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
					j.ready(rec.ID, 1)
					if _, err := j.answer(rec.ID, true); err != nil {
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
	j.ready(rec.ID, 1)
	j.answer(rec.ID, false) // cached
	clock.Advance(2 * time.Minute)
	if n, _ := j.ExpireCached(ctx); n != 1 { // its undo fails
		t.Fatalf("ExpireCached expired %d, want 1", n)
	}
	u.setFail(kindA, nil)
	clock.Advance(2 * time.Second)
	if n, err := j.retryUndos(ctx); n != 1 || err != nil {
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
