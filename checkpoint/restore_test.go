package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metadata "github.com/checkpoint-restore/checkpointctl/lib"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// tarOf writes entries (name to content; a name ending in "/" is a directory) as a tar.
func tarOf(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e[0], Mode: 0o644, Size: int64(len(e[1])), Typeflag: tar.TypeReg}
		if strings.HasSuffix(e[0], "/") {
			h = &tar.Header{Name: e[0], Mode: 0o755, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e[1])); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeArchive is a checkpoint archive's layout with made-up CRIU images, extra entries
// added.
func fakeArchive(t *testing.T, extra ...[2]string) []byte {
	t.Helper()
	entries := [][2]string{
		{"checkpoint/", ""},
		{"checkpoint/inventory.img", "not really CRIU's"},
		{"checkpoint/pages-1.img", "pages"},
		{metadata.ConfigDumpFile, jsonOf(t, metadata.ContainerConfig{ID: "abc", Name: "counter", RootfsImageName: "docker.io/library/busybox:latest"})},
		{metadata.SpecDumpFile, jsonOf(t, specs.Spec{Process: &specs.Process{Args: []string{"sh", "-c", "count"}, Cwd: "/"}})},
	}
	return tarOf(t, append(entries, extra...)...)
}

func TestReadArchive(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		archive []byte
		err     string // "" for a checkpoint
	}{
		{"checkpoint", fakeArchive(t), ""},
		{"not a tar", []byte(strings.Repeat("hello, world\n", 100)), "not a tar archive"},
		{"a tar of something else", tarOf(t, [2]string{"etc/passwd", "root:x:0:0::/root:/bin/sh\n"}),
			"lacks checkpoint/ (CRIU's images), config.dump, spec.dump"},
		{"no spec", tarOf(t, [2]string{"checkpoint/inventory.img", "x"}, [2]string{metadata.ConfigDumpFile, `{"rootfsImageName":"a"}`}), "lacks spec.dump"},
		{"spec without a process", tarOf(t, [2]string{"checkpoint/inventory.img", "x"}, [2]string{metadata.ConfigDumpFile, `{"rootfsImageName":"a"}`},
			[2]string{metadata.SpecDumpFile, `{}`}), "has no process"},
		{"config without an image", tarOf(t, [2]string{"checkpoint/inventory.img", "x"}, [2]string{metadata.ConfigDumpFile, `{}`},
			[2]string{metadata.SpecDumpFile, `{"process":{"args":["x"]}}`}), "names no image"},
		{"bad config.dump", tarOf(t, [2]string{"checkpoint/inventory.img", "x"}, [2]string{metadata.ConfigDumpFile, `{`},
			[2]string{metadata.SpecDumpFile, `{"process":{}}`}), "config.dump"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := ReadArchive(bytes.NewReader(tc.archive), "x.tar")
			if tc.err == "" {
				if err != nil {
					t.Fatalf("ReadArchive: %v", err)
				}
				if a.Image() != "docker.io/library/busybox:latest" || a.Config.Name != "counter" || a.Spec.Process.Args[2] != "count" {
					t.Errorf("ReadArchive read %+v", a)
				}
				return
			}
			if !errors.Is(err, ErrNotCheckpoint) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ReadArchive: %v, want ErrNotCheckpoint saying %q", err, tc.err)
			}
		})
	}
}

func TestImport(t *testing.T) {
	t.Parallel()
	rootfs := t.TempDir()
	for _, p := range []string{"etc/issue", "etc/motd", "keep"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(rootfs, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rootfs, p), []byte("image's\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	diff := tarOf(t, [2]string{"state", "42\n"}, [2]string{"etc/motd", "changed\n"})
	archive := fakeArchive(t,
		[2]string{metadata.RootFsDiffTar, string(diff)},
		[2]string{metadata.DeletedFilesFile, jsonOf(t, []string{"/etc/issue", "/../../outside"})},
		[2]string{"../escape", "no"},
	)
	parent := t.TempDir()
	outside := filepath.Join(filepath.Dir(parent), "outside")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(outside) })
	dir := RestoreDir(parent, "abc")
	open := func(context.Context) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(archive)), nil }
	// Twice: a retry starts over.
	for range 2 {
		if err := Import(t.Context(), open, dir, rootfs); err != nil {
			t.Fatalf("Import: %v", err)
		}
	}
	for path, want := range map[string]string{
		filepath.Join(dir, "checkpoint/inventory.img"): "not really CRIU's",
		filepath.Join(dir, "escape"):                   "no", // kept inside
		filepath.Join(rootfs, "state"):                 "42\n",
		filepath.Join(rootfs, "etc/motd"):              "changed\n",
		filepath.Join(rootfs, "keep"):                  "image's\n",
		outside:                                        "x",
	} {
		if b, err := os.ReadFile(path); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", path, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(rootfs, "etc/issue")); !os.IsNotExist(err) {
		t.Errorf("etc/issue, listed in deleted.files, is still there: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, WorkDir)); err != nil || !fi.IsDir() {
		t.Errorf("no CRIU work directory: %v", err)
	}

	// The undo removes the restore directory, and only one.
	if err := undoImport(map[string]string{ArgDir: parent}); err == nil {
		t.Errorf("the undo took %s, which is not a restore directory", parent)
	}
	for range 2 {
		if err := undoImport(map[string]string{ArgDir: dir}); err != nil {
			t.Fatalf("undo: %v", err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the undo left %s: %v", dir, err)
	}
}

func TestIsCheckpointImage(t *testing.T) {
	t.Parallel()
	for ann, want := range map[string]bool{AnnotationCRIOName: true, AnnotationName: true, "org.opencontainers.image.title": false} {
		if got := IsCheckpointImage(map[string]string{ann: "counter"}); got != want {
			t.Errorf("IsCheckpointImage(%s) = %v, want %v", ann, got, want)
		}
	}
}
