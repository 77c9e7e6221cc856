package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/migrations"
)

// Opening the file: locks, read-only use, damaged files, checks, schema migrations.

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
			db.Update(func(tx *bolt.Tx) error { return setSchemaVersion(tx, migrations.Latest()+1) })
			db.Close()
		}, migrations.ErrNewerSchema},
		{"record that is not JSON", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket(migrations.BucketRecords).Put([]byte(newID()), []byte("{garbage"))
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
	badID := newID()
	db.Update(func(tx *bolt.Tx) error {
		tx.Bucket(migrations.BucketRecords).Put([]byte(badID), []byte("{garbage"))
		return tx.Bucket(migrations.BucketNames).Put(nameKey(KindSandbox, "ghost"), []byte(newID()))
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
	good, _ := encodeRecord(&Record{ID: newID(), Kind: KindSandbox, Name: "n", State: StateCreating,
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

// TestOpenMigratesSchema1: a journal written by schema 1 (records keyed by their ID) opens
// with its records and names intact, stored under their schema 2 keys.
func TestOpenMigratesSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	rec := Record{ID: newID(), Kind: KindSandbox, Name: "pod", Fingerprint: "fp", State: StateCreated,
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
		return setSchemaVersion(tx, 1)
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
	if got, err := j.getByName(KindSandbox, "pod"); err != nil || got.ID != rec.ID || got.State != StateCreated {
		t.Fatalf("after the migration: %+v, %v", got, err)
	}
	if problems := j.Check(); len(problems) != 0 {
		t.Errorf("check after the migration: %v", problems)
	}
}

// setSchemaVersion writes a schema version as migrations stores it (big-endian, at
// KeyVersion of BucketMeta), to build old or future layouts.
func setSchemaVersion(tx *bolt.Tx, v uint64) error {
	meta, err := tx.CreateBucketIfNotExists(migrations.BucketMeta)
	if err != nil {
		return err
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return meta.Put(migrations.KeyVersion, b[:])
}
