package storage

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// searchableTempDir returns a fresh temporary directory that it and every directory
// above it let other users search, as a node's /run does: t.TempDir's own directories
// are 0700. Only the test's directories are changed.
func searchableTempDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := searchableByOthers(dir); err != nil {
		t.Skipf("the temporary directory cannot be made searchable: %v", err)
	}
	return dir
}

func TestSearchableByOthers(t *testing.T) {
	base := searchableTempDir(t)
	for _, tc := range []struct {
		name  string
		modes []os.FileMode // of base/a, base/a/b, ...
		bad   int           // index of the directory at fault, -1 for none
	}{
		{"all searchable", []os.FileMode{0o711, 0o755, 0o701}, -1},
		{"a closed parent", []os.FileMode{0o711, 0o700, 0o755}, 1},
		{"the directory itself closed", []os.FileMode{0o755, 0o750}, 1},
		{"group only", []os.FileMode{0o710}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp(base, "chain")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o711); err != nil {
				t.Fatal(err)
			}
			var chain []string
			for _, mode := range tc.modes {
				dir = filepath.Join(dir, "d")
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, mode); err != nil {
					t.Fatal(err)
				}
				chain = append(chain, dir)
			}
			err = searchableByOthers(dir)
			if tc.bad < 0 {
				if err != nil {
					t.Errorf("searchableByOthers(%s) = %v, want nil", dir, err)
				}
				return
			}
			if !errors.Is(err, ErrRootfsUnreachable) {
				t.Fatalf("searchableByOthers(%s) = %v, want ErrRootfsUnreachable", dir, err)
			}
			if want := chain[tc.bad] + " has mode"; !strings.Contains(err.Error(), want) {
				t.Errorf("searchableByOthers(%s) = %q, want it to name %s", dir, err, chain[tc.bad])
			}
			// It only looks: no mode changed.
			for i, d := range chain {
				if st, err := os.Stat(d); err != nil || st.Mode().Perm() != tc.modes[i] {
					t.Errorf("%s: mode %v after the check, want %04o", d, st.Mode().Perm(), tc.modes[i])
				}
			}
		})
	}
}

// TestBindUserRootfs binds a directory (standing for a mounted root filesystem, behind a
// 0700 directory as the store's are) for a user namespace: the bound path shows its
// files, a second bind does not stack, the unbind removes mount and directory, and a
// second unbind, or one of a container never bound, is success.
func TestBindUserRootfs(t *testing.T) {
	requireRoot(t)
	base := searchableTempDir(t)
	private := filepath.Join(t.TempDir(), "store")
	rootfs := filepath.Join(private, "merged")
	if err := os.MkdirAll(rootfs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "marker"), []byte("rootfs"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "rootfs")
	if err := prepareRootfsDir(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o711 {
		t.Fatalf("prepareRootfsDir made %s %v (%v), want 0711", dir, st.Mode().Perm(), err)
	}
	s := &Store{rootfsDir: dir, log: slog.New(slog.DiscardHandler)}
	id := newID(t)
	t.Cleanup(func() { _ = s.unbindUserRootfs(id) })

	var bound string
	for range 2 {
		got, err := s.bindUserRootfs(id, rootfs)
		if err != nil {
			t.Fatal(err)
		}
		bound = got
	}
	if bound != filepath.Join(dir, id) {
		t.Errorf("bound at %s, want %s", bound, filepath.Join(dir, id))
	}
	if data, err := os.ReadFile(filepath.Join(bound, "marker")); err != nil || string(data) != "rootfs" {
		t.Errorf("the bound path shows %q (%v), want the root filesystem's marker", data, err)
	}
	if n := countMounts(t, bound); n != 1 {
		t.Errorf("%s is mounted %d times after two binds, want once", bound, n)
	}
	for range 2 {
		if err := s.unbindUserRootfs(id); err != nil {
			t.Fatalf("unbindUserRootfs: %v", err)
		}
	}
	if _, err := os.Stat(bound); !errors.Is(err, fs.ErrNotExist) || testenv.IsMountPoint(t, bound) {
		t.Errorf("%s after the unbind: %v, mounted %v; want it gone", bound, err, testenv.IsMountPoint(t, bound))
	}
	if err := s.unbindUserRootfs(newID(t)); err != nil {
		t.Errorf("unbind of a container never bound: %v", err)
	}
	if err := s.unbindUserRootfs("../" + id); err != nil {
		t.Errorf("unbind of a path, not an ID: %v", err)
	}
	if _, err := os.Stat(filepath.Join(rootfs, "marker")); err != nil {
		t.Errorf("the unbind touched the root filesystem: %v", err)
	}
}

// TestBindUserRootfsUnreachable: when a directory above the root filesystems' directory
// is closed to other users, the bind fails with ErrRootfsUnreachable, binds nothing and
// changes no mode.
func TestBindUserRootfsUnreachable(t *testing.T) {
	requireRoot(t)
	closed := filepath.Join(searchableTempDir(t), "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(closed, "rootfs")
	if err := prepareRootfsDir(dir); err != nil {
		t.Fatal(err)
	}
	s := &Store{rootfsDir: dir, log: slog.New(slog.DiscardHandler)}
	id := newID(t)
	if _, err := s.bindUserRootfs(id, t.TempDir()); !errors.Is(err, ErrRootfsUnreachable) {
		t.Fatalf("bindUserRootfs under a 0700 directory = %v, want ErrRootfsUnreachable", err)
	}
	if st, err := os.Stat(closed); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("%s has mode %v after the bind, want 0700 as it was", closed, st.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(dir, id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the failed bind left %s: %v", filepath.Join(dir, id), err)
	}
}

// TestUndoUnbindsUserRootfs: the undo of a container storage step made for a user
// namespace removes the bind mount of its root filesystem, whether the step finished
// or was cut after the bind (a crash), and the storage container.
func TestUndoUnbindsUserRootfs(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	j := openUndoJournal(t, func() (*Store, error) { return s.Store, nil })
	maps := []IDMap{{ContainerID: 0, HostID: 300000, Size: 65536}}
	for _, done := range []bool{true, false} {
		id := newID(t)
		rec, err := j.Begin(journal.BeginRequest{ID: id, Kind: journal.KindContainer, Name: "userns-undo"})
		if err != nil {
			t.Fatal(err)
		}
		step := ContainerStep(s.Store, ContainerRequest{ID: id, ImageID: img.ID, UIDMap: maps, GIDMap: maps})
		seq, err := j.Intent(rec.ID, StageContainer, step.Kind, step.Args)
		if err != nil {
			t.Fatal(err)
		}
		rootfs, err := step.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !testenv.IsMountPoint(t, rootfs) {
			t.Fatalf("%s is not mounted after the step", rootfs)
		}
		if done {
			if err := j.Done(rec.ID, seq); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.Rollback(ctx, rec.ID); err != nil {
			t.Fatalf("Rollback: %v", err)
		}
		if _, err := os.Stat(rootfs); !errors.Is(err, os.ErrNotExist) || testenv.IsMountPoint(t, rootfs) {
			t.Errorf("done %v: %s after Rollback: %v, mounted %v; want it gone", done, rootfs, err, testenv.IsMountPoint(t, rootfs))
		}
		if ids, _ := s.Containers(ctx); slices.Contains(ids, id) {
			t.Errorf("done %v: storage container %s left after Rollback", done, id)
		}
	}
}

// countMounts returns how many mounts /proc/self/mountinfo lists at path.
func countMounts(t *testing.T, path string) int {
	t.Helper()
	n := 0
	for _, m := range testenv.Mounts(t, path) {
		if m == path {
			n++
		}
	}
	return n
}
