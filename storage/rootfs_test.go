package storage

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"go.podman.io/storage/pkg/idtools"
	"golang.org/x/sys/unix"

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

// userRootfsFixture is a store of root filesystem bind mounts in a searchable
// temporary directory, and a directory standing for a mounted root filesystem: behind a
// 0700 directory as the store's are, 0755 as an image's root is, with a marker file
// anyone may read, and an empty directory "rootfs" (a path the earlier layout's bind
// mount showed under the container's directory).
type userRootfsFixture struct {
	s      *Store
	source string // the root filesystem
	owner  idtools.IDPair
}

func newUserRootfsFixture(t *testing.T) *userRootfsFixture {
	t.Helper()
	requireRoot(t)
	base := searchableTempDir(t)
	source := filepath.Join(t.TempDir(), "store", "merged")
	if err := os.MkdirAll(filepath.Join(source, "rootfs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(source, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(source, "marker"), []byte("rootfs"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "rootfs")
	if err := prepareRootfsDir(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o711 {
		t.Fatalf("prepareRootfsDir made %s %v (%v), want 0711", dir, st.Mode().Perm(), err)
	}
	t.Cleanup(func() { // what a failed test left, so that its directories can be removed
		for _, m := range testenv.Mounts(t, dir) {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", m, err)
			}
		}
	})
	return &userRootfsFixture{
		s:      &Store{rootfsDir: dir, log: slog.New(slog.DiscardHandler)},
		source: source,
		owner:  idtools.IDPair{UID: 300000, GID: 300001},
	}
}

// requireBound checks what bindUserRootfs leaves for container id, bound at bound: the
// container's directory 0700 and the owner's, the bind mount there once and nodev,
// showing the root filesystem to the owner and to nobody else.
func (f *userRootfsFixture) requireBound(t *testing.T, id, bound string) {
	t.Helper()
	dir := filepath.Join(f.s.rootfsDir, id)
	if want := filepath.Join(dir, "rootfs"); bound != want {
		t.Errorf("bound at %s, want %s", bound, want)
	}
	if st, err := os.Stat(dir); err != nil {
		t.Error(err)
	} else if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o700 || int(sys.Uid) != f.owner.UID || int(sys.Gid) != f.owner.GID {
		t.Errorf("%s has mode %04o and owner %d:%d, want 0700 and %d:%d (the mapped root)",
			dir, st.Mode().Perm(), sys.Uid, sys.Gid, f.owner.UID, f.owner.GID)
	}
	if n := countMounts(t, bound); n != 1 {
		t.Fatalf("%s is mounted %d times, want once", bound, n)
	}
	if opts := mountOptions(t, bound); !slices.Contains(strings.Split(opts, ","), "nodev") {
		t.Errorf("the bind mount %s has options %q, without nodev", bound, opts)
	}
	marker := filepath.Join(bound, "marker")
	if out, err := readAs(t, f.owner, marker); err != nil || out != "rootfs" {
		t.Errorf("the mapped root %d:%d reads %s: %q, %v; want the marker", f.owner.UID, f.owner.GID, marker, out, err)
	}
	nobody := idtools.IDPair{UID: 65534, GID: 65534}
	if out, err := readAs(t, nobody, marker); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("user %d reads %s: %q, %v; want permission denied", nobody.UID, marker, out, err)
	}
}

// readAs runs cat on path as the user and group of who, with no supplementary groups,
// and returns what it printed.
func readAs(t *testing.T, who idtools.IDPair, path string) (string, error) {
	t.Helper()
	cat, err := exec.LookPath("cat")
	if err != nil {
		testenv.Need(t, "cat: %v", err)
	}
	cmd := exec.Command(cat, path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{
		Uid: uint32(who.UID), Gid: uint32(who.GID), Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// requireUnbound checks that nothing of container id's bind mount is left, and that
// the root filesystem kept its files.
func (f *userRootfsFixture) requireUnbound(t *testing.T, id string) {
	t.Helper()
	dir := filepath.Join(f.s.rootfsDir, id)
	if left := testenv.Mounts(t, dir); len(left) > 0 {
		t.Errorf("mounts left under %s: %v", dir, left)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("%s is left: %v", dir, err)
	}
	for _, p := range []string{"marker", "rootfs"} {
		if _, err := os.Stat(filepath.Join(f.source, p)); err != nil {
			t.Errorf("the unbind touched the root filesystem: %v", err)
		}
	}
}

// TestBindUserRootfs binds a directory standing for a mounted root filesystem for a
// user namespace: it is reached through a 0700 directory of the mapped root's, nodev
// (issue 40, item 3: it used to be bound at a path any local user could reach); a
// second bind does not stack, the unbind removes mount and directories, and a second
// unbind, or one of a container never bound, is success.
func TestBindUserRootfs(t *testing.T) {
	f := newUserRootfsFixture(t)
	id := newID(t)
	t.Cleanup(func() { _ = f.s.unbindUserRootfs(id) })

	for range 2 {
		bound, err := f.s.bindUserRootfs(id, f.source, f.owner)
		if err != nil {
			t.Fatal(err)
		}
		f.requireBound(t, id, bound)
	}
	for range 2 {
		if err := f.s.unbindUserRootfs(id); err != nil {
			t.Fatalf("unbindUserRootfs: %v", err)
		}
	}
	f.requireUnbound(t, id)
	if err := f.s.unbindUserRootfs(newID(t)); err != nil {
		t.Errorf("unbind of a container never bound: %v", err)
	}
	if err := f.s.unbindUserRootfs("../" + id); err != nil {
		t.Errorf("unbind of a path, not an ID: %v", err)
	}
}

// TestUserRootfsPartial: whatever a crash (SIGKILL) cut short of a bind, of this layout
// or of the earlier one (the bind mount at <RootfsDir>/<container ID> itself, which an
// older daemon may have journaled), the unbind (the step's undo) leaves nothing, and a
// retried bind finishes it in this layout.
func TestUserRootfsPartial(t *testing.T) {
	bind := func(t *testing.T, f *userRootfsFixture, at string) {
		t.Helper()
		if err := unix.Mount(f.source, at, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		state func(t *testing.T, f *userRootfsFixture, dir string) // dir: <RootfsDir>/<id>
	}{
		{"the directory made, not given", func(t *testing.T, f *userRootfsFixture, dir string) {
			mkdir(t, dir)
		}},
		{"the mount point made", func(t *testing.T, f *userRootfsFixture, dir string) {
			mkdir(t, dir)
			mkdir(t, filepath.Join(dir, "rootfs"))
		}},
		{"bound, not nodev yet", func(t *testing.T, f *userRootfsFixture, dir string) {
			mkdir(t, dir)
			mkdir(t, filepath.Join(dir, "rootfs"))
			bind(t, f, filepath.Join(dir, "rootfs"))
		}},
		{"earlier layout", func(t *testing.T, f *userRootfsFixture, dir string) {
			mkdir(t, dir)
			bind(t, f, dir)
		}},
		{"earlier layout, unmounted", func(t *testing.T, f *userRootfsFixture, dir string) {
			mkdir(t, dir)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newUserRootfsFixture(t)
			for _, retry := range []bool{false, true} {
				id := newID(t)
				t.Cleanup(func() { _ = f.s.unbindUserRootfs(id) })
				tc.state(t, f, filepath.Join(f.s.rootfsDir, id))
				if retry {
					bound, err := f.s.bindUserRootfs(id, f.source, f.owner)
					if err != nil {
						t.Fatalf("bind after the crash: %v", err)
					}
					f.requireBound(t, id, bound)
				}
				if err := f.s.unbindUserRootfs(id); err != nil {
					t.Fatalf("unbind (retried bind %v): %v", retry, err)
				}
				f.requireUnbound(t, id)
			}
		})
	}
}

// mkdir makes directory dir, 0700.
func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
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
	if _, err := s.bindUserRootfs(id, t.TempDir(), idtools.IDPair{UID: 300000, GID: 300000}); !errors.Is(err, ErrRootfsUnreachable) {
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
// namespace removes the bind mount of its root filesystem and its directory, whether
// the step finished or was cut after the bind (a crash), and whether the step is of
// this layout or of the earlier one (an older daemon's bind mount at the container's
// directory itself), and the storage container.
func TestUndoUnbindsUserRootfs(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	j := openUndoJournal(t, func() (*Store, error) { return s.Store, nil })
	maps := []IDMap{{ContainerID: 0, HostID: 300000, Size: 65536}}
	for _, tc := range []struct {
		name    string
		done    bool
		earlier bool // the bind mount of the earlier layout
	}{
		{"done", true, false},
		{"cut after the bind", false, false},
		{"earlier layout, done", true, true},
		{"earlier layout, cut after the bind", false, true},
	} {
		id := newID(t)
		rec, err := j.Begin(journal.BeginRequest{ID: id, Kind: journal.KindContainer, Name: "userns-undo"})
		if err != nil {
			t.Fatal(err)
		}
		step := ContainerStep(s.Store, ContainerRequest{ID: id, ImageID: img.ID, UIDMap: maps, GIDMap: maps})
		seq, err := j.Intents(rec.ID, journal.Intended{Stage: StageContainer, Kind: step.Kind, Args: step.Args})
		if err != nil {
			t.Fatal(err)
		}
		bound, err := step.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !testenv.IsMountPoint(t, bound) {
			t.Fatalf("%s: %s is not mounted after the step", tc.name, bound)
		}
		dir := filepath.Dir(bound)
		if tc.earlier {
			if err := s.unbindUserRootfs(id); err != nil {
				t.Fatal(err)
			}
			rootfs, err := s.Mount(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount(rootfs, dir, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				t.Fatal(err)
			}
		}
		if tc.done {
			if err := j.Done(rec.ID, seq); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.Rollback(ctx, rec.ID); err != nil {
			t.Fatalf("%s: Rollback: %v", tc.name, err)
		}
		if left := testenv.Mounts(t, dir); len(left) > 0 {
			t.Errorf("%s: mounts left after Rollback: %v", tc.name, left)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %s after Rollback: %v; want it gone", tc.name, dir, err)
		}
		if ids, _ := s.Containers(ctx); slices.Contains(ids, id) {
			t.Errorf("%s: storage container %s left after Rollback", tc.name, id)
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
