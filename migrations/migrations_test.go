package migrations

import (
	"errors"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func testDB(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "m.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}); err != nil {
			t.Errorf("bbolt check: %v", err)
		}
		db.Close()
	})
	return db
}

// TestMigrations has one row per migration: build the old layout, migrate, check the new one.
func TestMigrations(t *testing.T) {
	tests := []struct {
		name  string
		from  uint64
		setup func(tx *bolt.Tx) error
		check func(t *testing.T, tx *bolt.Tx)
	}{
		{
			name:  "0 -> 1 creates the buckets of an empty file",
			from:  0,
			setup: func(tx *bolt.Tx) error { return nil },
			check: func(t *testing.T, tx *bolt.Tx) {
				for _, b := range [][]byte{BucketMeta, BucketRecords, BucketNames} {
					if tx.Bucket(b) == nil {
						t.Errorf("bucket %q missing", b)
					}
				}
			},
		},
		{
			name: "1 -> 2 keys records by RecordKey (ID halves swapped), the rest untouched",
			from: 1,
			setup: func(tx *bolt.Tx) error {
				if err := initialSchema(tx); err != nil {
					return err
				}
				records := tx.Bucket(BucketRecords)
				for _, id := range []string{strings.Repeat("a", 32) + strings.Repeat("b", 32), strings.Repeat("c", 64)} {
					if err := records.Put([]byte(id), []byte(`{"id":"`+id+`"}`)); err != nil {
						return err
					}
				}
				if err := records.Put([]byte("damaged"), []byte("x")); err != nil {
					return err
				}
				return tx.Bucket(BucketNames).Put([]byte("sandbox/pod"), []byte(strings.Repeat("c", 64)))
			},
			check: func(t *testing.T, tx *bolt.Tx) {
				records := tx.Bucket(BucketRecords)
				want := map[string]string{
					strings.Repeat("b", 32) + strings.Repeat("a", 32): `{"id":"` + strings.Repeat("a", 32) + strings.Repeat("b", 32) + `"}`,
					strings.Repeat("c", 64):                           `{"id":"` + strings.Repeat("c", 64) + `"}`,
					"damaged":                                         "x",
				}
				got := map[string]string{}
				records.ForEach(func(k, v []byte) error { got[string(k)] = string(v); return nil })
				if !maps.Equal(got, want) {
					t.Errorf("records after the migration: %v, want %v", got, want)
				}
				if v := tx.Bucket(BucketNames).Get([]byte("sandbox/pod")); string(v) != strings.Repeat("c", 64) {
					t.Errorf("names changed: %q", v)
				}
			},
		},
	}
	if len(tests) != len(Migrations) {
		t.Fatalf("%d migrations but %d test rows: every migration needs a row", len(Migrations), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testDB(t)
			if err := db.Update(func(tx *bolt.Tx) error {
				if err := tt.setup(tx); err != nil {
					return err
				}
				if tt.from > 0 {
					return setVersion(tx, tt.from)
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error {
				from, to, err := Run(tx)
				if err != nil {
					return err
				}
				if from != tt.from || to != Latest() {
					t.Errorf("Run = %d -> %d, want %d -> %d", from, to, tt.from, Latest())
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			db.View(func(tx *bolt.Tx) error {
				tt.check(t, tx)
				v, err := Version(tx)
				if err != nil || v != Latest() {
					t.Errorf("version after migrating = %d, %v; want %d", v, err, Latest())
				}
				return nil
			})
		})
	}
}

func TestRunRefusesNewerSchema(t *testing.T) {
	db := testDB(t)
	if err := db.Update(func(tx *bolt.Tx) error { return setVersion(tx, Latest()+1) }); err != nil {
		t.Fatal(err)
	}
	err := db.Update(func(tx *bolt.Tx) error { _, _, err := Run(tx); return err })
	if !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("Run on a newer schema = %v, want ErrNewerSchema", err)
	}
	db.View(func(tx *bolt.Tx) error {
		if v, _ := Version(tx); v != Latest()+1 {
			t.Errorf("version changed to %d", v)
		}
		return nil
	})
}

func TestRunReadOnlyNeedsNoMigration(t *testing.T) {
	db := testDB(t)
	err := db.View(func(tx *bolt.Tx) error { _, _, err := Run(tx); return err })
	if !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only Run on an empty file = %v, want ErrReadOnly", err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, _, err := Run(tx); return err }); err != nil {
		t.Fatal(err)
	}
	if err := db.View(func(tx *bolt.Tx) error { _, _, err := Run(tx); return err }); err != nil {
		t.Fatalf("read-only Run on a current file: %v", err)
	}
}

func TestVersionRejectsMalformed(t *testing.T) {
	db := testDB(t)
	db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucketIfNotExists(BucketMeta)
		return b.Put(KeyVersion, []byte("x"))
	})
	if err := db.View(func(tx *bolt.Tx) error { _, err := Version(tx); return err }); err == nil {
		t.Fatal("a 1-byte version was accepted")
	}
}
