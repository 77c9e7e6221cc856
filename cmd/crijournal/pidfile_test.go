package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestPidFile: --pid-file holds this process's PID as bare digits (the node e2e suite
// parses the whole file with strconv.Atoi), and is removed at the end only while it
// still holds that PID.
func TestPidFile(t *testing.T) {
	for _, tc := range []struct {
		name        string
		overwritten string // what another daemon wrote after this one, "" for nothing
		wantGone    bool
	}{
		{name: "ours", wantGone: true},
		{name: "another daemon's", overwritten: "1", wantGone: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "crijournal.pid")
			if err := writePidFile(path); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if pid, err := strconv.Atoi(string(b)); err != nil || pid != os.Getpid() {
				t.Fatalf("pid file holds %q (Atoi: %d, %v), want %d", b, pid, err, os.Getpid())
			}
			if tc.overwritten != "" {
				if err := os.WriteFile(path, []byte(tc.overwritten), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			removePidFile(path)
			_, err = os.Stat(path)
			if gone := errors.Is(err, fs.ErrNotExist); gone != tc.wantGone {
				t.Errorf("after removePidFile: stat = %v, want gone = %v", err, tc.wantGone)
			}
		})
	}
}
