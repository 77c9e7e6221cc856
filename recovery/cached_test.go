package recovery

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/journal"
)

// TestRunChecksCachedRecords: ready and cached records go through the reconciler like
// created ones, so a retry is never handed one that lost its parts; those it rolls back
// (they lost what they were made of while the daemon was down) are counted as rolled
// back, the others are kept.
func TestRunChecksCachedRecords(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	u := &undos{ran: map[string]int{}}
	path := filepath.Join(t.TempDir(), "journal.db")
	j := openTestJournal(t, path, log, u)
	ids := map[string]string{}
	var ready []string
	for _, name := range []string{"sound-cached", "lost-cached", "sound-ready", "lost-ready"} {
		rec, err := j.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: name, Fingerprint: "fp"})
		if err != nil {
			t.Fatal(err)
		}
		seq, err := j.Intents(rec.ID, journal.Intended{Stage: "s", Kind: stepOK})
		if err != nil {
			t.Fatal(err)
		}
		j.Done(rec.ID, seq)
		j.Settle(rec.ID, 1, false)
		if strings.HasSuffix(name, "ready") {
			ready = append(ready, rec.ID) // rewritten ready below, as an earlier version left it
		}
		ids[name] = rec.ID
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	markReady(t, path, ready)
	j = openTestJournal(t, path, log, u)
	defer j.Close()
	sum := Run(ctx, j, log, func(ctx context.Context, rec journal.Record) (bool, error) {
		if rec.State != journal.StateCached {
			t.Errorf("reconciler got %s in state %s, want cached", rec.Name, rec.State)
		}
		if strings.HasPrefix(rec.Name, "lost-") {
			return true, j.Rollback(ctx, rec.ID)
		}
		return false, nil
	})
	want := Summary{RolledBack: 2, Cached: 1, Kept: 1}
	if sum != want {
		t.Errorf("summary = %+v, want %+v", sum, want)
	}
	for name, id := range ids {
		rec, err := j.Get(id)
		if strings.HasPrefix(name, "lost-") {
			if !errors.Is(err, journal.ErrNotFound) {
				t.Errorf("%s after recovery: %s, %v; want rolled back", name, rec.State, err)
			}
		} else if err != nil || rec.State != journal.StateCached {
			t.Errorf("%s after recovery: %s, %v; want cached", name, rec.State, err)
		}
	}
}
