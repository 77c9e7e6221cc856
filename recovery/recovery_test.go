package recovery

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crijournal/crijournal/journal"
)

const (
	stepOK     journal.StepKind = "test-ok"
	stepBroken journal.StepKind = "test-broken"
)

type undos struct {
	mu  sync.Mutex
	ran map[string]int // record name -> undos run
}

func (u *undos) registry() *journal.Registry {
	reg := journal.NewRegistry()
	reg.Register(stepOK, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		u.mu.Lock()
		defer u.mu.Unlock()
		u.ran[rec.Name]++
		return nil
	})
	reg.Register(stepBroken, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		return errors.New("still broken")
	})
	return reg
}

// openTestJournal opens the journal at path with the test undos u and an hour's cache
// TTL, as the tests' daemon would, failing the test if it cannot.
func openTestJournal(t *testing.T, path string, log *slog.Logger, u *undos) *journal.Journal {
	t.Helper()
	j, err := journal.Open(path, journal.Options{Logger: log, Registry: u.registry(), CacheTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestRunReplaysEveryState builds a journal with a record in every state, as a crash
// would leave it, reopens it and runs recovery.
func TestRunReplaysEveryState(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	u := &undos{ran: map[string]int{}}
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openTestJournal(t, path, log, u)
	ids := map[string]string{}
	mk := func(name string, kinds ...journal.StepKind) string {
		rec, err := j.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: name, Fingerprint: "fp"})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kinds {
			seq, err := j.Intents(rec.ID, journal.Intended{Stage: "s", Kind: k})
			if err != nil {
				t.Fatal(err)
			}
			j.Done(rec.ID, seq)
		}
		ids[name] = rec.ID
		return rec.ID
	}
	mk("creating", stepOK, stepOK)
	id := mk("ready", stepOK)
	j.Settle(id, 1, false) // rewritten ready below, as an earlier version left it
	id = mk("cached", stepOK)
	j.Settle(id, 1, false)
	id = mk("created", stepOK)
	j.Settle(id, 1, true)
	id = mk("broken", stepOK, stepBroken)
	j.Rollback(ctx, id) // leaves it undoing with a failed undo
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	markReady(t, path, []string{ids["ready"]})
	u.ran = map[string]int{}

	j = openTestJournal(t, path, log, u)
	defer j.Close()
	var reconciled atomic.Int32
	sum := Run(ctx, j, log, func(ctx context.Context, rec journal.Record) (bool, error) {
		reconciled.Add(1)
		return rec.State == journal.StateCreated, nil
	})
	want := Summary{RolledBack: 1, Cached: 1, Kept: 1, Reconciled: 1, Retrying: 1}
	if sum != want {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}
	if u.ran["creating"] != 2 {
		t.Errorf("creating: %d undos run, want 2", u.ran["creating"])
	}
	if _, err := j.Get(ids["creating"]); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("interrupted creation still in the journal: %v", err)
	}
	for name, state := range map[string]journal.State{"ready": journal.StateCached, "cached": journal.StateCached, "created": journal.StateCreated, "broken": journal.StateUndoing} {
		rec, err := j.Get(ids[name])
		if err != nil || rec.State != state {
			t.Errorf("%s after recovery: %s, %v; want %s", name, rec.State, err, state)
		}
	}
	if rec, _ := j.Get(ids["ready"]); rec.Expiry.IsZero() {
		t.Error("the ready record was cached without an expiry")
	}
	// created, and ready-then-cached and cached: every kept record is checked.
	if n := reconciled.Load(); n != 3 {
		t.Errorf("reconciler called %d times, want 3", n)
	}
}
