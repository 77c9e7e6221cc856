package migrations

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestSchemaGolden pins each schema version's layout (testdata/golden/schema-<n>.txt):
// the buckets and the meta keys an empty file has once migrated to it, with the meta
// values. A new migration adds its file (-update writes it); a change to an existing file
// means a migration was edited, which the files of nodes already migrated by it would
// not follow: append a migration instead.
func TestSchemaGolden(t *testing.T) {
	for v := uint64(1); v <= Latest(); v++ {
		t.Run(fmt.Sprintf("schema-%d", v), func(t *testing.T) {
			db, err := bolt.Open(filepath.Join(t.TempDir(), "m.db"), 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			var b strings.Builder
			if err := db.Update(func(tx *bolt.Tx) error {
				for from := uint64(0); from < v; from++ {
					if err := Migrations[from].Apply(tx); err != nil {
						return err
					}
					if err := setVersion(tx, from+1); err != nil {
						return err
					}
				}
				if err := SetWrittenBy(tx, "golden"); err != nil {
					return err
				}
				return tx.ForEach(func(name []byte, bk *bolt.Bucket) error {
					fmt.Fprintf(&b, "bucket %s\n", name)
					if string(name) == string(BucketMeta) {
						return bk.ForEach(func(k, val []byte) error {
							if string(k) == string(KeyVersion) {
								fmt.Fprintf(&b, "  %s = %x (big-endian)\n", k, val)
							} else {
								fmt.Fprintf(&b, "  %s = %q\n", k, val)
							}
							return nil
						})
					}
					return nil
				})
			}); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "migration %d -> %d: %s\n", v-1, v, Migrations[v-1].Description)
			testenv.Golden(t, fmt.Sprintf("testdata/golden/schema-%d.txt", v), []byte(b.String()))
		})
	}
	// A golden file past Latest is a schema this binary no longer knows (a migration
	// removed): the files of nodes at it would be refused.
	extra, _ := filepath.Glob("testdata/golden/schema-*.txt")
	if uint64(len(extra)) != Latest() && !testenv.Updating() {
		t.Errorf("%d golden schema files for %d schema versions: every version keeps its file", len(extra), Latest())
	}
	if _, err := os.Stat(fmt.Sprintf("testdata/golden/schema-%d.txt", Latest()+1)); err == nil {
		t.Errorf("a golden file for schema %d, which no migration makes", Latest()+1)
	}
}
