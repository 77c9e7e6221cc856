package main

import (
	"encoding/binary"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/migrations"
)

// TestServeRefusesNewerJournal: serve on the state of a later release whose journal
// schema this binary does not know (a rollback past a schema change) fails at start,
// naming both releases, and writes nothing: no file under the node's directories is made
// or changed.
func TestServeRefusesNewerJournal(t *testing.T) {
	defer func(v string) { version = v }(version)
	version = "0.2.0"

	base := t.TempDir()
	q := strconv.Quote
	cfgFile := filepath.Join(base, "crijournal.toml")
	os.WriteFile(cfgFile, []byte(strings.Join([]string{
		"root = " + q(filepath.Join(base, "root")),
		"run_root = " + q(filepath.Join(base, "run")),
		"socket = " + q(filepath.Join(base, "run", "crijournal.sock")),
		"namespace_dir = " + q(filepath.Join(base, "netns")),
		"cni_conf_dir = " + q(filepath.Join(base, "cni")),
		"cni_cache_dir = " + q(filepath.Join(base, "cni-cache")),
		"nri_listen = " + q(filepath.Join(base, "nri.sock")),
		"storage_driver = \"vfs\"",
		"log_format = \"text\"",
	}, "\n")+"\n"), 0o600)
	dbPath := filepath.Join(base, "root", "journal.db")
	j, err := journal.Open(dbPath, journal.Options{Release: "0.9.0"})
	if err != nil {
		t.Fatal(err)
	}
	j.Close()
	db, err := bolt.Open(dbPath, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error {
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], migrations.Latest()+1)
		return tx.Bucket(migrations.BucketMeta).Put(migrations.KeyVersion, b[:])
	})
	db.Close()
	before := tree(t, base)

	_, err = run(t, "serve", "--config", cfgFile)
	if err == nil {
		t.Fatal("serve started on a journal of a newer schema")
	}
	for _, want := range []string{"crijournal 0.9.0", "crijournal 0.2.0", dbPath, "Nothing was written"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("serve's error does not say %q: %v", want, err)
		}
	}
	if after := tree(t, base); after != before {
		t.Errorf("serve wrote on the refused state:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// tree lists every path below dir with its size and modification time.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(path + " " + strconv.FormatInt(fi.Size(), 10) + " " + fi.ModTime().String() + "\n")
		return nil
	})
	return b.String()
}
