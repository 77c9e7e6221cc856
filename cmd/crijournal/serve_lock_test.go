package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/journal"
)

// TestServeLeavesTheStoreToTheJournalsHolder: a second daemon started on a node whose
// journal another holds fails on the journal's lock before it opens the image store,
// whose Open removes what it takes for leftovers (layers no image uses, what a cut
// damaged): the running daemon's pulls and creations in progress would be among them.
func TestServeLeavesTheStoreToTheJournalsHolder(t *testing.T) {
	base := t.TempDir()
	pause := filepath.Join(base, "pause")
	if err := os.WriteFile(pause, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	q := strconv.Quote
	cfgFile := filepath.Join(base, "crijournal.toml")
	if err := os.WriteFile(cfgFile, []byte(strings.Join([]string{
		"root = " + q(filepath.Join(base, "root")),
		"run_root = " + q(filepath.Join(base, "run")),
		"socket = " + q(filepath.Join(base, "run", "crijournal.sock")),
		"namespace_dir = " + q(filepath.Join(base, "netns")),
		"cni_conf_dir = " + q(filepath.Join(base, "cni")),
		"cni_cache_dir = " + q(filepath.Join(base, "cni-cache")),
		"nri_listen = " + q(filepath.Join(base, "nri.sock")),
		"pause_path = " + q(pause),
		"journal_lock_timeout = \"200ms\"",
		"storage_driver = \"vfs\"",
		"log_format = \"text\"",
	}, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The running daemon.
	j, err := journal.Open(filepath.Join(base, "root", "journal.db"), journal.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()

	_, err = run(t, "serve", "--config", cfgFile)
	if !errors.Is(err, journal.ErrInUse) {
		t.Fatalf("serve beside a running daemon = %v, want journal.ErrInUse", err)
	}
	for _, dir := range []string{filepath.Join(base, "root", "storage"), filepath.Join(base, "root", "image-cache"), filepath.Join(base, "run", "storage")} {
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v; want the store left unopened", dir, err)
		}
	}
}
