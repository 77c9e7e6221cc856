package journal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/migrations"
)

// The journal's golden files (testdata/golden/) pin the file a restart reads back: a
// journal written by this code through its own API (journal-schema2.db), the records it
// holds as decoded (journal-schema2.records, one encoded record a line), and when its
// cached record expires. Changing one (go test -run Golden -update) means the schema or
// the record encoding changed: that needs a migration (migrations/), so that a file an
// earlier release wrote is still read as it meant, and a newer schema is refused by the
// release before (see README, "Upgrading and rolling back").
const (
	goldenDB      = "testdata/golden/journal-schema2.db"
	goldenRecords = "testdata/golden/journal-schema2.records"
)

// goldenAt is the clock of the golden journal; goldenTTL its cache TTL.
var goldenAt = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

const goldenTTL = 2 * time.Minute

// goldenUndo is the step kind of the golden journal: its undo fails for args "fail".
const goldenUndo StepKind = "golden-step"

func goldenRegistry() *Registry {
	reg := NewRegistry()
	reg.Register(goldenUndo, func(_ context.Context, _ Record, s Step) error {
		if s.Args["fail"] != "" {
			return errors.New("undo refused: " + s.Args["fail"])
		}
		return nil
	})
	return reg
}

func goldenID(n int) string { return fmt.Sprintf("%064x", n) }

// writeGoldenJournal makes, at path, a journal with a record of each state a restart
// can find, through the journal's API and a fixed clock: a sandbox creating (an intent
// not done), one created (with its object and a marker), one cached (with its expiry),
// a container created in it, and a container undoing (an undo that failed).
func writeGoldenJournal(t *testing.T, path string) {
	t.Helper()
	os.Remove(path)
	now := goldenAt
	j, err := Open(path, Options{Now: func() time.Time { return now }, CacheTTL: goldenTTL,
		Registry: goldenRegistry(), Release: "golden", UndoRetryMin: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	begin := func(n int, kind Kind, name, parent string) string {
		t.Helper()
		_, err := j.Begin(BeginRequest{ID: goldenID(n), Kind: kind, Name: name, Parent: parent,
			Identity: name + "-identity", Fingerprint: "fp-" + name, Deadline: now.Add(4 * time.Minute), Stage: "begun"})
		must(err)
		return goldenID(n)
	}
	step := func(id string, args map[string]string, done bool) {
		t.Helper()
		seq, err := j.Intents(id, Intended{Kind: goldenUndo, Stage: "a step", Args: args})
		must(err)
		if done {
			must(j.Done(id, seq))
		}
	}
	object := map[string]any{"handler": "runc", "labels": map[string]string{"app": "golden"}}

	creating := begin(1, KindSandbox, "k8s_creating_ns_uid_0", "")
	step(creating, map[string]string{"path": "/run/x"}, false)

	created := begin(2, KindSandbox, "k8s_created_ns_uid_0", "")
	step(created, map[string]string{"path": "/run/y"}, true)
	_, err = j.Settle(created, object, true)
	must(err)
	stopped := goldenAt.Format(time.RFC3339Nano)
	must(j.SetMarker(created, "stopped", &stopped))

	now = now.Add(time.Second)
	cached := begin(3, KindSandbox, "k8s_cached_ns_uid_0", "")
	step(cached, map[string]string{"path": "/run/z"}, true)
	_, err = j.Settle(cached, object, false)
	must(err)

	container := begin(4, KindContainer, "k8s_c_created_ns_uid_0", created)
	step(container, map[string]string{"id": "c"}, true)
	_, err = j.Settle(container, object, true)
	must(err)

	undoing := begin(5, KindContainer, "k8s_c_undoing_ns_uid_0", created)
	step(undoing, map[string]string{"id": "u"}, true)
	step(undoing, map[string]string{"fail": "busy"}, true)
	if err := j.Rollback(context.Background(), undoing); err == nil {
		t.Fatal("the golden undo did not fail")
	}
}

// encodeAll encodes records sorted by ID, one a line.
func encodeAll(t *testing.T, recs []Record) []byte {
	t.Helper()
	slices.SortFunc(recs, func(a, b Record) int { return strings.Compare(a.ID, b.ID) })
	var b bytes.Buffer
	for i := range recs {
		line, err := encodeRecord(&recs[i])
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// copyGolden copies the golden journal file to a temporary directory, so that no test
// writes the golden file itself.
func copyGolden(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(goldenDB)
	if err != nil {
		t.Fatalf("%v (write it with go test -run TestJournalFileGolden -update)", err)
	}
	path := filepath.Join(t.TempDir(), "journal.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestJournalFileGolden reads the golden journal file as a restart does and compares its
// records, its schema version and the release it names with what they were when the file
// was written.
func TestJournalFileGolden(t *testing.T) {
	if testenv.Updating() {
		writeGoldenJournal(t, goldenDB)
	}
	path := copyGolden(t)
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error {
		if v, err := migrations.Version(tx); err != nil || v != 2 {
			t.Errorf("golden journal: schema version %d, %v; want 2", v, err)
		}
		if w := migrations.WrittenBy(tx); w != "golden" {
			t.Errorf("golden journal: written_by %q, want golden", w)
		}
		return nil
	})
	db.Close()

	j, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	recs := j.List(nil)
	j.Close()
	if len(recs) != 5 {
		t.Fatalf("golden journal: %d records, want 5", len(recs))
	}
	testenv.Golden(t, goldenRecords, encodeAll(t, recs))
	states := map[State]bool{}
	for _, r := range recs {
		states[r.State] = true
	}
	for _, s := range []State{StateCreating, StateCreated, StateCached, StateUndoing} {
		if !states[s] {
			t.Errorf("golden journal: no record %s", s)
		}
	}
}

// TestRecordsGolden decodes each golden record and encodes it back byte for byte: a field
// renamed, retyped or dropped changes the bytes.
func TestRecordsGolden(t *testing.T) {
	b, err := os.ReadFile(goldenRecords)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(strings.TrimSuffix(string(b), "\n"), "\n") {
		rec, err := DecodeRecord([]byte(line))
		if err != nil {
			t.Fatalf("decode %s: %v", line, err)
		}
		again, err := encodeRecord(&rec)
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != line {
			t.Errorf("record %s re-encoded differently:\ngot  %s\nwant %s", rec.ID, again, line)
		}
	}
}

// TestCacheExpiryGolden: the golden journal's cached record expires at its creation's
// settle time plus the cache TTL it was written with, whatever the TTL of the daemon that
// reads it: a restart keeps the expiry, it does not restart it. It is rolled back just
// after, not just before.
func TestCacheExpiryGolden(t *testing.T) {
	path := copyGolden(t)
	want := goldenAt.Add(time.Second).Add(goldenTTL)
	for _, tt := range []struct {
		at     time.Time
		expire int
	}{
		{want.Add(-time.Second), 0},
		{want.Add(time.Second), 1},
	} {
		at := tt.at
		j, err := Open(path, Options{Now: func() time.Time { return at }, CacheTTL: time.Hour, Registry: goldenRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := j.Get(goldenID(3))
		if err != nil {
			j.Close()
			t.Fatal(err)
		}
		if !rec.Expiry.Equal(want) {
			t.Errorf("cached record's expiry %v, want %v", rec.Expiry, want)
		}
		n, err := j.ExpireCached(context.Background())
		j.Close()
		if err != nil || n != tt.expire {
			t.Fatalf("ExpireCached at expiry%+v = %d, %v; want %d", at.Sub(want), n, err, tt.expire)
		}
	}
}
