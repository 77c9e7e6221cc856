package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/oci"
)

// TestStepGolden pins the state a checkpoint leaves for a restart (testdata/golden/
// step.json): the export's step as the container's record stores it, with the names of
// its work directory (<work root>/<container ID>-<nonce>) and partial archive
// (.<archive name>.crijournal-<nonce>, beside the location), which the undo a restarted
// daemon (or a later release) runs reads back. The golden step, on real files, is undone
// as the package comment says: work directory and partial archive gone, archive kept.
// Changing it (-update) strands interrupted exports of an earlier release: that needs the
// undo to read both forms, and a CHANGELOG entry.
func TestStepGolden(t *testing.T) {
	work, dir := t.TempDir(), t.TempDir()
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	job, err := Plan(work, filepath.Join(dir, "checkpoint.tar"), id, "runc")
	if err != nil {
		t.Fatal(err)
	}
	step := job.Step()
	nonce := regexp.MustCompile(`[0-9a-f]{12}$`).FindString(job.Work)
	if nonce == "" || !strings.HasSuffix(job.Partial, nonce) {
		t.Fatalf("work %q and partial %q do not end with one nonce", job.Work, job.Partial)
	}
	generic := strings.NewReplacer(work, "<work root>", dir, "<archive dir>", nonce, "<nonce>")
	args := map[string]string{}
	for k, v := range step.Args {
		args[k] = generic.Replace(v)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(map[string]any{"kind": step.Kind, "stage": step.Stage, "args": args}); err != nil {
		t.Fatal(err)
	}
	testenv.Golden(t, "testdata/golden/step.json", b.Bytes())

	// The golden step, its placeholders made real, is undone.
	raw, err := os.ReadFile("testdata/golden/step.json")
	if err != nil {
		t.Fatal(err)
	}
	var golden struct{ Args map[string]string }
	if err := json.Unmarshal(raw, &golden); err != nil {
		t.Fatal(err)
	}
	real := strings.NewReplacer("<work root>", work, "<archive dir>", dir, "<nonce>", "0a1b2c3d4e5f")
	for k, v := range golden.Args {
		golden.Args[k] = real.Replace(v)
	}
	location := filepath.Join(dir, "checkpoint.tar")
	for _, p := range []string{golden.Args[ArgPartial], location, filepath.Join(golden.Args[ArgWork], "checkpoint", "pages-1.img")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if os.Geteuid() != 0 {
		testenv.Need(t, "the undo of the golden step asks runc whether the container is paused: run as root")
	}
	short, err := os.MkdirTemp("", "cjg") // t.TempDir's path is too long for conmon's sockets
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(short) })
	rt, err := oci.New(oci.Config{Handler: "runc", Root: filepath.Join(short, "root"), StateDir: filepath.Join(short, "s")})
	if err != nil {
		testenv.Need(t, "no runtime for the golden step's undo: %v", err)
	}
	if err := undo(context.Background(), func(string) (*oci.Runtime, error) { return rt, nil }, golden.Args); err != nil {
		t.Fatalf("undo of the golden step: %v", err)
	}
	for _, p := range []string{golden.Args[ArgPartial], golden.Args[ArgWork]} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after the golden step's undo, %s: %v, want it gone", p, err)
		}
	}
	if _, err := os.Stat(location); err != nil {
		t.Errorf("the golden step's undo removed the archive: %v", err)
	}
}
