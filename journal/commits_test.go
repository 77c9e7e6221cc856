package journal

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/migrations"
)

// Fewer durable commits per creation: intents committed together (Intents) and markers
// that ride on the next commit (SetMarkerLazily).

// TestIntentsInOneCommit: Intents journals its steps in order, in one durable commit
// that survives a reopen, numbered on from the record's steps; each is then done on its
// own. No steps is refused.
func TestIntentsInOneCommit(t *testing.T) {
	j, path := testJournal(t, Options{})
	rec := begin(t, j, "pod", time.Time{})
	if _, err := j.Intent(rec.ID, "pin", "pin", nil); err != nil {
		t.Fatal(err)
	}
	before := j.Stats().Commits
	seq, err := j.Intents(rec.ID,
		Intended{Kind: "resolv", Stage: "files", Args: map[string]string{"path": "r"}},
		Intended{Kind: "shm", Stage: "shm", Args: map[string]string{"path": "s"}})
	if err != nil || seq != 1 {
		t.Fatalf("Intents = %d, %v; want 1", seq, err)
	}
	if n := j.Stats().Commits - before; n != 1 {
		t.Errorf("%d commits, want 1", n)
	}
	if _, err := j.Intents(rec.ID); !errors.Is(err, ErrInvalid) {
		t.Errorf("Intents of nothing: %v, want ErrInvalid", err)
	}
	if err := j.Staged(rec.ID, "shm"); err != nil {
		t.Fatal(err)
	}
	if err := j.Done(rec.ID, 2); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j2, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	got, err := j2.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, s := range got.Steps {
		steps = append(steps, fmt.Sprintf("%d %s %s %s %s", s.Seq, s.Kind, s.Stage, s.Args["path"], s.Status))
	}
	want := []string{"0 pin pin  intent", "1 resolv files r intent", "2 shm shm s done"}
	if !slices.Equal(steps, want) {
		t.Errorf("steps after a reopen %q, want %q", steps, want)
	}
	if got.Stage != "shm" {
		t.Errorf("stage %q, want shm (Staged, flushed at close)", got.Stage)
	}
}

// TestSetMarkerLazily: the marker is shown at once, costs no commit of its own, and is
// on disk after the next durable commit.
func TestSetMarkerLazily(t *testing.T) {
	j, _ := testJournal(t, Options{})
	a, b := begin(t, j, "a", time.Time{}), begin(t, j, "b", time.Time{})
	if _, err := j.Intent(a.ID, "s", "k", nil); err != nil {
		t.Fatal(err)
	}
	before := j.Stats().Commits
	v := "now"
	if err := j.SetMarkerLazily(a.ID, "started_at", &v); err != nil {
		t.Fatal(err)
	}
	if got, _ := j.Get(a.ID); got.Markers["started_at"] != "now" {
		t.Errorf("marker not shown at once: %v", got.Markers)
	}
	if n := j.Stats().Commits - before; n != 0 {
		t.Errorf("%d commits for a lazy marker, want 0", n)
	}
	if _, err := j.Intent(b.ID, "s", "k", nil); err != nil { // another record's durable commit
		t.Fatal(err)
	}
	var raw []byte
	if err := j.db.View(func(tx *bolt.Tx) error {
		raw = append(raw, tx.Bucket(migrations.BucketRecords).Get(migrations.RecordKey(a.ID))...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"started_at":"now"`) {
		t.Errorf("marker not on disk after the next commit: %s", raw)
	}
}

// TestRemoveDoesNotWaitForItsDelete: Remove returns once the record's steps are undone,
// its delete queued to ride on the next commit; readers no longer see the record then.
// A crash before that commit leaves it removing in the file (which the next start
// finishes); the delete is in the file once committed.
func TestRemoveDoesNotWaitForItsDelete(t *testing.T) {
	var u undoLog
	j, path := testJournal(t, Options{Registry: u.registry(kindA)})
	rec := createdRecord(t, j)

	// Commits after the removing mark wait until released.
	release := make(chan struct{})
	var commits int
	j.commits.beforeCommit = func() error {
		if commits++; commits > 1 {
			<-release
		}
		return nil
	}
	if err := testenv.Within(10*time.Second, func() error { return j.Remove(ctx, rec.ID) }); err != nil {
		close(release)
		t.Fatalf("Remove: %v (it must not wait for the commit of its delete)", err)
	}
	if _, err := j.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Remove = %v, want ErrNotFound", err)
	}
	if got := j.Snapshot(nil); len(got) != 0 {
		t.Errorf("Snapshot after Remove holds %d records, want none", len(got))
	}
	if diff := cmp.Diff([]string{"test-a:1"}, u.order()); diff != "" {
		t.Errorf("undos (-want +got):\n%s", diff)
	}
	// What a crash now would leave: the record removing.
	if st := stateInCopy(t, path, rec.ID); st != StateRemoving {
		t.Errorf("the file before the delete's commit says %q, want %q", st, StateRemoving)
	}
	close(release)
	j.Close()
	j2, err := Open(path, Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer j2.Close()
	if _, err := j2.Get(rec.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after a reopen = %v, want ErrNotFound", err)
	}
}

// stateInCopy opens a copy of the journal file at path, as a crash now would leave it,
// and returns the state record id has there.
func stateInCopy(t *testing.T, path, id string) State {
	t.Helper()
	j, err := Open(crashCopy(t, path), Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	r, err := j.Get(id)
	if err != nil {
		t.Fatalf("the file before the delete's commit: %v", err)
	}
	return r.State
}
