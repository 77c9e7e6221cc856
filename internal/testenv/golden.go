package testenv

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

// update is the -update flag of every test binary that links testenv: Golden rewrites its
// files instead of comparing them.
var update = flag.Bool("update", false, "rewrite the golden files (testdata/golden/) from the current code")

// Updating reports whether the tests run with -update.
func Updating() bool { return *update }

// Golden compares got with the golden file at path (testdata/golden/<name> by
// convention) and fails the test where they differ; with -update it writes got there
// instead. A golden file pins a format the daemon reads back across a restart (the
// journal, the node's layout, conmon's exit files, the pause protocol, what NRI and
// checkpoints leave): a difference means that format changed, and a changed format needs
// a migration (migrations/) and a CHANGELOG entry, not just -update, or the state an
// earlier release left is misread after an upgrade.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden file: %v (write it with go test -run %s -update)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed: a format the daemon reads back across a restart is no longer what it was; "+
			"that needs a migration (migrations/) and a CHANGELOG entry, then -update.\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}
