package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/migrations"
)

// writtenBy reads the release a journal file names, as a later start would.
func writtenBy(t *testing.T, path string) string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var got string
	db.View(func(tx *bolt.Tx) error { got = migrations.WrittenBy(tx); return nil })
	return got
}

// TestOpenRecordsRelease: a journal opened for writing names the release that opened
// it last; one opened read-only (inspect) or without a release leaves the name as it is.
func TestOpenRecordsRelease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	for _, step := range []struct {
		opts Options
		want string
	}{
		{Options{Release: "0.2.0"}, "0.2.0"},
		{Options{Release: "0.3.0"}, "0.3.0"},
		{Options{ReadOnly: true, Release: "0.4.0"}, "0.3.0"},
		{Options{}, "0.3.0"},
	} {
		j, err := Open(path, step.opts)
		if err != nil {
			t.Fatal(err)
		}
		j.Close()
		if got := writtenBy(t, path); got != step.want {
			t.Errorf("after Open(%+v): written_by %q, want %q", step.opts, got, step.want)
		}
	}
}

// TestNewerSchemaRefusedNamingBothReleases: a file a later release wrote with a newer
// schema is refused by Open and by CheckSchema with an error naming both releases and
// both schemas, and neither writes a byte of it.
func TestNewerSchemaRefusedNamingBothReleases(t *testing.T) {
	for _, tt := range []struct {
		name, writtenBy string
		want            []string
	}{
		{"named", "9.1.0", []string{"written by crijournal 9.1.0", "this crijournal 0.2.0", "schema " + itoa(migrations.Latest()+1), "up to " + itoa(migrations.Latest()), "Nothing was written", "upgrade", "move it aside"}},
		{"unnamed", "", []string{"does not name its release", "this crijournal 0.2.0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			j, err := Open(path, Options{Release: "9.1.0"})
			if err != nil {
				t.Fatal(err)
			}
			j.Close()
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error {
				if tt.writtenBy == "" {
					if err := tx.Bucket(migrations.BucketMeta).Delete(migrations.KeyWrittenBy); err != nil {
						return err
					}
				}
				return setSchemaVersion(tx, migrations.Latest()+1)
			}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			before, _ := os.ReadFile(path)

			for name, open := range map[string]func() error{
				"Open": func() error {
					j, err := Open(path, Options{Release: "0.2.0"})
					if err == nil {
						j.Close()
					}
					return err
				},
				"CheckSchema": func() error { return CheckSchema(path, "0.2.0", time.Second) },
			} {
				err := open()
				var newer *NewerSchemaError
				if !errors.As(err, &newer) || !errors.Is(err, migrations.ErrNewerSchema) {
					t.Fatalf("%s = %v, want a NewerSchemaError", name, err)
				}
				for _, w := range tt.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s's error does not say %q: %v", name, w, err)
					}
				}
				if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
					t.Errorf("%s wrote to the refused file", name)
				}
			}
		})
	}
}

// TestCheckSchemaPasses: CheckSchema leaves to Open every file it cannot refuse as newer
// (missing, current, damaged, locked by another process).
func TestCheckSchemaPasses(t *testing.T) {
	dir := t.TempDir()
	current := filepath.Join(dir, "current.db")
	j, err := Open(current, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSchema(current, "0.2.0", 100*time.Millisecond); err != nil {
		t.Errorf("CheckSchema of a file held by an open journal = %v", err)
	}
	j.Close()
	damaged := filepath.Join(dir, "damaged.db")
	os.WriteFile(damaged, bytes.Repeat([]byte{0xa5}, 8192), 0o600)
	for _, path := range []string{filepath.Join(dir, "missing.db"), current, damaged} {
		if err := CheckSchema(path, "0.2.0", time.Second); err != nil {
			t.Errorf("CheckSchema(%s) = %v, want nil", filepath.Base(path), err)
		}
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
