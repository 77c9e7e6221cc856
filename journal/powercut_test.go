package journal

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/migrations"
)

// What a power cut can leave of the file, and what Open makes of it: bbolt writes a
// commit's pages, fsyncs, then writes one of its two meta pages (alternating) and fsyncs
// again, so a cut tears at most the meta page being written; the other still names the
// previous commit, which bbolt falls back to. Anything worse (both meta pages gone, a
// truncated file, garbage in a page the tree uses) is damage from elsewhere, which Open
// must refuse with ErrCorrupt and a message saying what to do, never a panic.

// Layout of a bbolt meta page: a 16-byte page header, then magic, version, page size,
// flags (4 bytes each), the root bucket (16), the freelist's page, the high-water page,
// then the transaction ID.
const (
	testPageSize   = 4096
	metaTxidOffset = 16 + 4*4 + 16 + 8 + 8
	metaFreelistAt = 16 + 4*4 + 16
)

// TestOpenAfterPowerCut: each kind of damage gives a journal that opens, holding every
// record of the commits before the torn one, or ErrCorrupt with the clear message; never a
// panic, and a refused file is left untouched.
func TestOpenAfterPowerCut(t *testing.T) {
	tests := []struct {
		name string
		// syncFreelist writes the file with its freelist stored (bbolt's default, as a file
		// written by something other than the journal may be).
		syncFreelist bool
		damage       func(t *testing.T, path string)
		wantErr      bool
		// lastMayGo: the last record's commit may be lost (its meta page was torn);
		// every earlier one must be there.
		lastMayGo bool
	}{
		{name: "newest meta page torn", lastMayGo: true, damage: func(t *testing.T, path string) {
			scribble(t, path, newestMeta(t, path)*testPageSize+16, 200)
		}},
		{name: "newest meta page zeroed", lastMayGo: true, damage: func(t *testing.T, path string) {
			zero(t, path, newestMeta(t, path)*testPageSize, testPageSize)
		}},
		{name: "older meta page torn", damage: func(t *testing.T, path string) {
			scribble(t, path, (1-newestMeta(t, path))*testPageSize+16, 200)
		}},
		{name: "both meta pages zeroed", wantErr: true, damage: func(t *testing.T, path string) {
			zero(t, path, 0, 2*testPageSize)
		}},
		{name: "both meta pages torn", wantErr: true, damage: func(t *testing.T, path string) {
			scribble(t, path, 16, 100)
			scribble(t, path, testPageSize+16, 100)
		}},
		{name: "truncated to its meta pages", wantErr: true, damage: func(t *testing.T, path string) {
			if err := os.Truncate(path, 2*testPageSize); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "truncated mid-page", wantErr: true, damage: func(t *testing.T, path string) {
			info, _ := os.Stat(path)
			if err := os.Truncate(path, info.Size()/2+100); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "garbage in the root's branch page", wantErr: true, damage: func(t *testing.T, path string) {
			scribble(t, path, recordsRoot(t, path)*testPageSize, testPageSize)
		}},
		{name: "garbage in the stored freelist", syncFreelist: true, wantErr: true, damage: func(t *testing.T, path string) {
			scribble(t, path, freelistPage(t, path)*testPageSize, testPageSize)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal.db")
			ids := writeJournal(t, path, 300, tt.syncFreelist)
			tt.damage(t, path)
			before, _ := os.ReadFile(path)

			// The daemon's first look (serve's checkJournal) leaves damage to Open,
			// without crashing on it (a fault reading a truncated file is fatal unless
			// turned into a panic).
			if err := CheckSchema(path, "v0.0.0-test", time.Second); err != nil {
				t.Errorf("CheckSchema = %v, want nil: damage is Open's to report", err)
			}
			j, err := Open(path, Options{})
			if tt.wantErr {
				if err == nil {
					j.Close()
					t.Fatal("Open of the damaged file succeeded")
				}
				checkCorruptMessage(t, err, path)
				if after, _ := os.ReadFile(path); string(after) != string(before) {
					t.Error("Open changed a file it refused")
				}
				return
			}
			if err != nil {
				t.Fatalf("Open = %v, want bbolt to fall back to the other meta page", err)
			}
			defer j.Close()
			for i, id := range ids {
				if _, err := j.Get(id); err != nil && !(tt.lastMayGo && i == len(ids)-1) {
					t.Errorf("record %d of %d (%s) lost: %v", i, len(ids), id, err)
				}
			}
			// Writable and sound: a commit goes through, and the check finds nothing.
			begin(t, j, "after-the-cut", time.Time{})
			if problems := j.Check(); len(problems) > 0 {
				t.Errorf("Check after the fallback: %v", problems)
			}
		})
	}
}

// TestCorruptErrorSaysWhatToDo: the message names the file, says it was left as it is,
// how to move it aside and what that loses.
func TestCorruptErrorSaysWhatToDo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("not bbolt ", 2000)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(path, Options{})
	checkCorruptMessage(t, err, path)
}

func checkCorruptMessage(t *testing.T, err error, path string) {
	t.Helper()
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open = %v, want ErrCorrupt", err)
	}
	msg := err.Error()
	for _, want := range []string{path, "left as it is", "move it aside", "mv " + path + " " + path + ".corrupt", "inspect --check", "inspect --leaks", "lost", "restore"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q: %s", want, msg)
		}
	}
}

// writeJournal makes a journal of n records, one commit each, and returns their IDs in
// the order written. With syncFreelist the file is then rewritten by plain bbolt, which
// stores its freelist.
func writeJournal(t *testing.T, path string, n int, syncFreelist bool) []string {
	t.Helper()
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range n {
		rec := begin(t, j, fmt.Sprintf("pod-%d", i), time.Time{})
		step(t, j, rec.ID, kindA, strings.Repeat("x", i%50))
		ids = append(ids, rec.ID)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if syncFreelist {
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		// A commit that frees pages, so that the stored freelist is not empty.
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(migrations.BucketMeta).Put([]byte("scratch"), make([]byte, 3*testPageSize))
		}); err != nil {
			t.Fatal(err)
		}
		if err := db.Update(func(tx *bolt.Tx) error {
			return tx.Bucket(migrations.BucketMeta).Delete([]byte("scratch"))
		}); err != nil {
			t.Fatal(err)
		}
		db.Close()
		if freelistPage(t, path) == 0 {
			t.Fatal("bbolt stored no freelist")
		}
	}
	return ids
}

// newestMeta returns which meta page (0 or 1) holds the higher transaction ID.
func newestMeta(t *testing.T, path string) int64 {
	t.Helper()
	b := readPages(t, path)
	if binary.LittleEndian.Uint64(b[testPageSize+metaTxidOffset:]) > binary.LittleEndian.Uint64(b[metaTxidOffset:]) {
		return 1
	}
	return 0
}

// freelistPage returns the page of the stored freelist the newest meta names; 0 when none.
func freelistPage(t *testing.T, path string) int64 {
	t.Helper()
	b := readPages(t, path)
	pg := binary.LittleEndian.Uint64(b[newestMeta(t, path)*testPageSize+metaFreelistAt:])
	if pg == 0xffffffffffffffff { // bbolt's "no freelist stored"
		return 0
	}
	return int64(pg)
}

// recordsRoot returns the root page of the records bucket, a branch page for a journal
// of hundreds of records.
func recordsRoot(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root int64
	db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(migrations.BucketRecords)
		root = int64(b.Root())
		if st := b.Stats(); st.BranchPageN == 0 {
			t.Fatalf("the records bucket has no branch page: %+v", st)
		}
		return nil
	})
	return root
}

func readPages(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2*testPageSize {
		t.Fatalf("%s: %d bytes, shorter than its meta pages", path, len(b))
	}
	return b
}

func zero(t *testing.T, path string, off, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n), off); err != nil {
		t.Fatal(err)
	}
}

// TestBoltOptionsForPowerLoss: the journal's bbolt handle fsyncs every commit (NoSync
// off), fsyncs the file's growth (NoGrowSync off: ext4 needs it), and stores no freelist
// (NoFreelistSync, as etcd: nothing to tear in it; Open rebuilds it by walking the tree,
// which preflight walks first, so that damage there is an error, not a panic).
func TestBoltOptionsForPowerLoss(t *testing.T) {
	j, _ := testJournal(t, Options{})
	if j.db.NoSync || j.db.NoGrowSync || !j.db.NoFreelistSync {
		t.Errorf("bbolt options NoSync %v, NoGrowSync %v, NoFreelistSync %v; want false, false, true",
			j.db.NoSync, j.db.NoGrowSync, j.db.NoFreelistSync)
	}
}
