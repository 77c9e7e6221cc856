package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// TestConmonFilesGolden pins how the daemon reads the files conmon leaves in a handler's
// state directory, which it reads back after a restart (and after an upgrade, from a
// conmon an earlier release started): testdata/golden/conmon-state/ holds them as conmon
// writes them (exits/<id>: the exit code in decimal, the file's time the exit's;
// containers/<id>/conmon.pid: conmon's PID; containers/<id>/oom: the cgroup ran out of
// memory), with malformed ones beside; testdata/golden/conmon-parsed.txt is what
// Exited, ExitStatus, ConmonPID and OOMKilled make of them. Changing the parse
// (-update) changes how containers an earlier release left are seen: that needs a
// migration or a reader of both forms, and a CHANGELOG entry.
func TestConmonFilesGolden(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "oci-runc")
	if err := os.CopyFS(dir, os.DirFS("testdata/golden/conmon-state")); err != nil {
		t.Fatal(err)
	}
	exitedAt := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	exits, err := os.ReadDir(filepath.Join(dir, "exits"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exits {
		if err := os.Chtimes(filepath.Join(dir, "exits", e.Name()), exitedAt, exitedAt); err != nil {
			t.Fatal(err)
		}
	}
	r := &Runtime{handler: "runc", root: filepath.Join(t.TempDir(), "root"), stateDir: dir}

	var b strings.Builder
	clean := func(err error) string { return strings.ReplaceAll(fmt.Sprint(err), dir, "<state>") }
	ids, err := r.Exited()
	slices.Sort(ids)
	fmt.Fprintf(&b, "Exited: %v, %s\n", ids, clean(err))
	containers, err := os.ReadDir(filepath.Join(dir, "containers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range containers {
		id := c.Name()
		code, at, ok, err := r.ExitStatus(id)
		fmt.Fprintf(&b, "%s\n  ExitStatus: code %d, ok %v, at exit file's time %v, err %s\n", id, code, ok, at.Equal(exitedAt), clean(err))
		pid, err := r.ConmonPID(id)
		fmt.Fprintf(&b, "  ConmonPID: %d, err %s\n", pid, clean(err))
		fmt.Fprintf(&b, "  OOMKilled: %v\n", r.OOMKilled(id))
	}
	testenv.Golden(t, "testdata/golden/conmon-parsed.txt", []byte(b.String()))
}
