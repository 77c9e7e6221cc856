package recovery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/migrations"
)

// BenchmarkRecovery10k measures startup recovery (Open, then Run) of a journal holding
// 10,000 records in mixed states, a sixth each: interrupted creations (rolled back),
// finished but unanswered (cached), cached (kept), created (reconciled, nothing to do),
// undoing with an undo still failing (left to the background retries), and removals
// interrupted by a crash (finished). Target: under 1 s (docs/BENCHMARKS.md, "Targets").
func BenchmarkRecovery10k(b *testing.B) {
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	u := &undos{ran: map[string]int{}}
	dir := b.TempDir()
	golden := filepath.Join(dir, "golden.db")
	j, err := journal.Open(golden, journal.Options{Logger: log, Registry: u.registry(), CacheTTL: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	const n = 10000
	want := Summary{}
	var removing, ready []string
	var mu sync.Mutex
	sem := make(chan struct{}, 64)
	errs := make(chan error, n)
	for i := range n {
		switch i % 6 {
		case 0:
			want.RolledBack++
		case 1:
			want.Cached++
		case 2:
			want.Kept++
		case 4:
			want.Retrying++
		case 5:
			want.Resumed++
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			rec, err := j.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: fmt.Sprintf("pod-%d", i), Fingerprint: "fp"})
			if err != nil {
				errs <- err
				return
			}
			kinds := []journal.StepKind{stepOK, stepOK}
			if i%6 == 4 {
				kinds[1] = stepBroken
			}
			for _, kind := range kinds {
				seq, err := j.Intents(rec.ID, journal.Intended{Stage: "s", Kind: kind, Args: map[string]string{"path": "/run/x/" + rec.ID}})
				if err != nil {
					errs <- err
					return
				}
				j.Done(rec.ID, seq)
			}
			switch i % 6 {
			case 0: // interrupted
				return
			case 1: // rewritten ready below, as an earlier version left it
				_, err = j.Settle(rec.ID, map[string]string{"ip": "10.0.0.1"}, false)
				mu.Lock()
				ready = append(ready, rec.ID)
				mu.Unlock()
			case 2, 3, 5:
				_, err = j.Settle(rec.ID, map[string]string{"ip": "10.0.0.1"}, i%6 != 2)
				if i%6 == 5 {
					mu.Lock()
					removing = append(removing, rec.ID)
					mu.Unlock()
				}
			case 4:
				if rerr := j.Rollback(ctx, rec.ID); !errors.As(rerr, new(*journal.UndoError)) {
					err = fmt.Errorf("rollback with a broken undo: %v", rerr)
				}
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	for range cap(sem) {
		sem <- struct{}{}
	}
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	j.Close()
	markRemoving(b, golden, removing)
	markReady(b, golden, ready)
	goldenBytes := mustRead(b, golden)

	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		path := filepath.Join(dir, fmt.Sprintf("run-%d.db", i))
		mustWrite(b, path, goldenBytes)
		b.StartTimer()
		j, err := journal.Open(path, journal.Options{Logger: log, Registry: u.registry(), CacheTTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		sum := Run(ctx, j, log, func(context.Context, journal.Record) (bool, error) { return false, nil })
		b.StopTimer()
		if sum != want {
			b.Fatalf("summary %+v, want %+v", sum, want)
		}
		j.Close()
		b.StartTimer()
	}
}

// markRemoving rewrites the created records ids as a crash in the middle of their removal
// leaves them: state removing.
func markRemoving(tb testing.TB, path string, ids []string) {
	rewriteRecords(tb, path, ids, func(rec *journal.Record) { rec.State, rec.Stage = journal.StateRemoving, "undo" })
}

// markReady rewrites the settled records ids as an earlier version, which stored the
// object (ready) and the answer in two commits, left them after a crash between the two:
// state ready, no expiry.
func markReady(tb testing.TB, path string, ids []string) {
	rewriteRecords(tb, path, ids, func(rec *journal.Record) { rec.State, rec.Expiry = journal.StateReady, time.Time{} })
}

// rewriteRecords applies edit to the records ids of the closed journal file at path.
func rewriteRecords(tb testing.TB, path string, ids []string, edit func(*journal.Record)) {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bolt.Tx) error {
		records := tx.Bucket(migrations.BucketRecords)
		for _, id := range ids {
			rec, err := journal.DecodeRecord(records.Get(migrations.RecordKey(id)))
			if err != nil {
				return err
			}
			edit(&rec)
			v, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			if err := records.Put(migrations.RecordKey(id), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func mustRead(b *testing.B, path string) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func mustWrite(b *testing.B, path string, data []byte) {
	if err := os.WriteFile(path, data, 0o600); err != nil {
		b.Fatal(err)
	}
}
