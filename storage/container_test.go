package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// newID returns a random container ID: 64 lowercase hex.
func newID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func TestContainerLifecycle(t *testing.T) {
	onEachDriver(t, func(t *testing.T, driver string, s *testStore) {
		if driver != "" && s.Driver() != driver {
			t.Fatalf("Driver() = %q, want %q", s.Driver(), driver)
		}
		t.Logf("driver: %s", s.Driver())
		testContainerLifecycle(t, s)
	})
}

func testContainerLifecycle(t *testing.T, s *testStore) {
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	id := newID(t)
	labels := map[string]string{"io.kubernetes.pod.name": "p"}

	info, err := s.CreateContainer(ctx, id, "k8s_c_p_ns_uid_0", img.ID, labels)
	if err != nil {
		t.Fatal(err)
	}
	want := ContainerInfo{ID: id, ImageID: img.ID, Name: "k8s_c_p_ns_uid_0"}
	if info != want {
		t.Errorf("CreateContainer = %+v, want %+v", info, want)
	}
	// A retry with the same ID and image returns the same container.
	again, err := s.CreateContainer(ctx, id, "k8s_c_p_ns_uid_0", img.ID, labels)
	if err != nil || again != want {
		t.Errorf("CreateContainer again = %+v, %v; want %+v", again, err, want)
	}
	// The name is in the metadata only: another container may have it (the root
	// filesystem of a removed container waits for its deferred deletion while the
	// kubelet makes the next one; the journal keeps CRI names unique).
	other := newID(t)
	if info, err := s.CreateContainer(ctx, other, "k8s_c_p_ns_uid_0", img.ID, nil); err != nil || info.Name != "k8s_c_p_ns_uid_0" {
		t.Errorf("CreateContainer under the same name = %+v, %v", info, err)
	}
	if ids, err := s.Containers(ctx); err != nil || !cmp.Equal(ids, []string{id, other}, cmpopts.SortSlices(strings.Compare)) {
		t.Errorf("Containers = %v, %v; want [%s %s] in any order", ids, err, id, other)
	}
	if err := s.DeleteContainer(ctx, other); err != nil {
		t.Fatal(err)
	}

	rootfs, err := s.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(rootfs, "bin/busybox")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("bin/busybox in the rootfs: %v, %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(rootfs, "bin/sh")); err != nil || target != "busybox" {
		t.Errorf("bin/sh -> %q, %v; want busybox", target, err)
	}
	again2, err := s.Mount(ctx, id)
	if err != nil || again2 != rootfs {
		t.Errorf("second Mount = %q, %v; want %q", again2, err, rootfs)
	}
	if s.Driver() == DriverOverlay && !testenv.IsMountPoint(t, rootfs) {
		t.Errorf("%s is not a mount point", rootfs)
	}

	dir, runDir, err := s.containerDirs(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, runDir} {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			t.Errorf("container dir %s: %v", d, err)
		}
	}

	err = s.RemoveImage(ctx, img.ID)
	if !errors.Is(err, ErrImageInUse) || !strings.Contains(err.Error(), id) {
		t.Errorf("RemoveImage while in use = %v, want ErrImageInUse naming %s", err, id)
	}
	if _, err := s.ImageStatus(ctx, img.ID); err != nil {
		t.Errorf("image gone after a refused removal: %v", err)
	}

	// One Unmount undoes both Mounts.
	if err := s.Unmount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if testenv.IsMountPoint(t, rootfs) {
		t.Errorf("%s still mounted after Unmount", rootfs)
	}
	if err := s.Unmount(ctx, id); err != nil {
		t.Errorf("Unmount of an unmounted container: %v", err)
	}
	// Mounted again, so that DeleteContainer has to unmount.
	if _, err := s.Mount(ctx, id); err != nil {
		t.Fatal(err)
	}

	for i := range 2 {
		if err := s.DeleteContainer(ctx, id); err != nil {
			t.Fatalf("DeleteContainer #%d: %v", i+1, err)
		}
	}
	if ids, _ := s.Containers(ctx); len(ids) != 0 {
		t.Errorf("Containers after delete = %v", ids)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("container dir %s after delete: %v", dir, err)
	}
	if testenv.IsMountPoint(t, rootfs) {
		t.Errorf("%s still mounted after DeleteContainer", rootfs)
	}
	if err := s.Unmount(ctx, id); err != nil {
		t.Errorf("Unmount of a deleted container: %v", err)
	}
	if _, err := s.Mount(ctx, id); !errors.Is(err, ErrContainerNotFound) {
		t.Errorf("Mount of a deleted container = %v, want ErrContainerNotFound", err)
	}
	if _, _, err := s.containerDirs(id); !errors.Is(err, ErrContainerNotFound) {
		t.Errorf("containerDirs of a deleted container = %v, want ErrContainerNotFound", err)
	}

	if err := s.RemoveImage(ctx, img.ID); err != nil {
		t.Fatalf("RemoveImage after the container is gone: %v", err)
	}
	if _, err := s.ImageStatus(ctx, img.ID); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("ImageStatus after RemoveImage = %v, want ErrImageNotFound", err)
	}
	if _, err := s.CreateContainer(ctx, newID(t), "", img.ID, nil); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("CreateContainer from a removed image = %v, want ErrImageNotFound", err)
	}
}

func TestCreateContainerInvalid(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	for _, id := range []string{"", "abc", strings.Repeat("G", 64), strings.ToUpper(newID(t))} {
		if _, err := s.CreateContainer(ctx, id, "", img.ID, nil); err == nil {
			t.Errorf("CreateContainer(id %q) succeeded", id)
		}
	}
	if _, err := s.CreateContainer(ctx, newID(t), "", strings.Repeat("0", 64), nil); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("CreateContainer from an unknown image = %v, want ErrImageNotFound", err)
	}
	// By image ID prefix.
	id := newID(t)
	info, err := s.CreateContainer(ctx, id, "", img.ID[:12], nil)
	if err != nil || info.ImageID != img.ID {
		t.Fatalf("CreateContainer by image ID prefix = %+v, %v", info, err)
	}
	// A name is not an image ID.
	if _, err := s.CreateContainer(ctx, newID(t), "", testImage, nil); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("CreateContainer from an image name = %v, want ErrImageNotFound", err)
	}
	if err := s.DeleteContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	// A prefix of a container ID is not the container.
	if err := s.DeleteContainer(ctx, id[:12]); err != nil {
		t.Errorf("DeleteContainer of an unknown ID: %v", err)
	}
}

func TestUndoDeletesContainer(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	img, _ := pullTestImage(t, s)

	j := openUndoJournal(t, func() (*Store, error) { return s.Store, nil })

	for _, tc := range []struct {
		name   string
		create bool // whether the step acted (else only its intent was recorded)
		mount  bool
		done   bool
	}{
		{"created and mounted", true, true, true},
		{"created, not marked done", true, false, false},
		{"intent only", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := newID(t)
			rec, err := j.Begin(journal.BeginRequest{ID: id, Kind: journal.KindContainer, Name: "undo-" + tc.name})
			if err != nil {
				t.Fatal(err)
			}
			seq, err := j.Intents(rec.ID, journal.Intended{Stage: StageContainer, Kind: StepContainerStorage, Args: ContainerStep(nil, ContainerRequest{ID: id}).Args})
			if err != nil {
				t.Fatal(err)
			}
			var rootfs string
			if tc.create {
				if _, err := s.CreateContainer(ctx, id, "undo-"+id[:8], img.ID, nil); err != nil {
					t.Fatal(err)
				}
			}
			if tc.mount {
				if rootfs, err = s.Mount(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			if tc.done {
				if err := j.Done(rec.ID, seq); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Rollback(ctx, rec.ID); err != nil {
				t.Fatalf("Rollback: %v", err)
			}
			if ids, _ := s.Containers(ctx); slices.Contains(ids, id) {
				t.Errorf("storage container %s left after Rollback", id)
			}
			if rootfs != "" && testenv.IsMountPoint(t, rootfs) {
				t.Errorf("%s still mounted after Rollback", rootfs)
			}
			if _, err := j.Get(rec.ID); !errors.Is(err, journal.ErrNotFound) {
				t.Errorf("journal record after Rollback: %v, want ErrNotFound", err)
			}
		})
	}
}

// TestContainerStepRetried: the storage step taken again (a retry after a timeout, the
// first attempt's work done) returns the same root filesystem, mounted once: it finds
// the container made and mounted, and does not mount it a second time.
func TestContainerStepRetried(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	id := newID(t)
	step := ContainerStep(s.Store, ContainerRequest{ID: id, Name: "c", ImageID: img.ID})
	first, err := step.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	again, err := step.Run(ctx)
	if err != nil || again != first {
		t.Fatalf("the step again = %q, %v; want %q", again, err, first)
	}
	if n, err := s.st.Mounted(id); err != nil || n != 1 {
		t.Errorf("mounted %d times (%v), want once", n, err)
	}
	if err := s.DeleteContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
}

// TestRemovalDefersTheDelete: a removal answers before the root filesystem's deletion,
// which the journal's Maintain runs right after (RegisterUndos registers it deferred).
// The store is held back from the undo until the removal has answered: an undo run by
// the removal itself would never let it answer.
func TestRemovalDefersTheDelete(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	answered := make(chan struct{})
	j := openUndoJournal(t, func() (*Store, error) {
		select {
		case <-answered:
			return s.Store, nil
		case <-time.After(20 * time.Second):
			return nil, errors.New("the removal did not answer before its storage undo")
		}
	})
	mctx, stop := context.WithCancel(ctx)
	maintained := make(chan struct{})
	go func() {
		defer close(maintained)
		j.Maintain(mctx, time.Hour)
	}()
	t.Cleanup(func() { stop(); <-maintained })

	id := newID(t)
	rec, err := j.Begin(journal.BeginRequest{ID: id, Kind: journal.KindContainer, Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	step := ContainerStep(s.Store, ContainerRequest{ID: id, Name: "c", ImageID: img.ID})
	seq, err := j.Intents(rec.ID, journal.Intended{Stage: step.Stage, Kind: step.Kind, Args: step.Args})
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := step.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Done(rec.ID, seq); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Settle(rec.ID, struct{}{}, true); err != nil {
		t.Fatal(err)
	}
	// Maintain may not have begun yet: a removal then deletes at once, and so waits.
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() error {
		if j.Stats().MaintainPasses == 0 {
			return errors.New("Maintain has not looked yet")
		}
		return nil
	})
	if err := testenv.Within(15*time.Second, func() error { return j.Remove(ctx, rec.ID) }); err != nil {
		t.Fatalf("Remove: %v (it must not wait for its storage undo)", err)
	}
	if ids, _ := s.Containers(ctx); !slices.Contains(ids, id) {
		t.Errorf("storage container %s deleted before the removal answered", id)
	}
	close(answered)
	testenv.Eventually(t, 10*time.Second, 5*time.Millisecond, func() error {
		if ids, _ := s.Containers(ctx); slices.Contains(ids, id) {
			return fmt.Errorf("storage container %s still there", id)
		}
		if _, err := j.Get(rec.ID); !errors.Is(err, journal.ErrNotFound) {
			return fmt.Errorf("journal record after the removal: %v", err)
		}
		return nil
	})
	if testenv.IsMountPoint(t, rootfs) {
		t.Errorf("%s still mounted after the removal", rootfs)
	}
}

func TestUndoWithoutStore(t *testing.T) {
	storeErr := errors.New("storage not open yet")
	j := openUndoJournal(t, func() (*Store, error) { return nil, storeErr })
	ctx := context.Background()
	id := newID(t)
	rec, err := j.Begin(journal.BeginRequest{ID: id, Kind: journal.KindContainer, Name: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Intents(rec.ID, journal.Intended{Stage: StageContainer, Kind: StepContainerStorage, Args: ContainerStep(nil, ContainerRequest{ID: id}).Args}); err != nil {
		t.Fatal(err)
	}
	var uerr *journal.UndoError
	if err := j.Rollback(ctx, rec.ID); !errors.As(err, &uerr) || !errors.Is(err, storeErr) {
		t.Errorf("Rollback = %v, want an UndoError with the store's error", err)
	}
}

// TestContainerStepArgsAreStable pins the undo arguments ContainerStep records: they are
// stored on disk.
func TestContainerStepArgsAreStable(t *testing.T) {
	a := ContainerStep(nil, ContainerRequest{ID: "abc", Name: "n", ImageID: "img"})
	if a.Kind != "storage-container" || len(a.Args) != 1 || a.Args["id"] != "abc" {
		t.Errorf("step %s %v, want storage-container {id: abc}", a.Kind, a.Args)
	}
}

// TestMappedContainer creates a container with the ID mappings of a user namespace:
// its mounted root filesystem (and what the image put in it) is owned by the host IDs
// that map to the container's, so that the container's root may write it. The runtime
// is given a bind mount of it under the store's RootfsDir, nodev, and no directory above
// the store's own mount changes mode (issue 20, item 4: they used to be opened up to /).
func TestMappedContainer(t *testing.T) {
	onEachDriver(t, func(t *testing.T, _ string, s *testStore) {
		ctx := context.Background()
		img, _ := pullTestImage(t, s)
		id := newID(t)
		maps := []IDMap{{ContainerID: 0, HostID: 300000, Size: 65536}}
		modes := dirModes(t, filepath.Join(s.dir, "root"))
		rootfs, err := ContainerStep(s.Store, ContainerRequest{ID: id, ImageID: img.ID, UIDMap: maps, GIDMap: maps}).Run(ctx)
		if err != nil {
			t.Fatalf("driver %s: %v", s.Driver(), err)
		}
		t.Cleanup(func() { _ = s.DeleteContainer(ctx, id) })
		if want := filepath.Join(s.dir, "run", "rootfs", id, "rootfs"); rootfs != want || !testenv.IsMountPoint(t, rootfs) {
			t.Fatalf("driver %s: root filesystem for the runtime %s (mounted %v), want the bind mount %s",
				s.Driver(), rootfs, testenv.IsMountPoint(t, rootfs), want)
		}
		// Nodev on either driver: inherited from an overlay mount, set on a vfs
		// directory's bind.
		if opts := mountOptions(t, rootfs); !slices.Contains(strings.Split(opts, ","), "nodev") {
			t.Errorf("driver %s: the bind mount %s has options %q, without nodev", s.Driver(), rootfs, opts)
		}
		mounted, err := s.Mount(ctx, id) // the store's own path, mounted already
		if err != nil {
			t.Fatal(err)
		}
		for dir, mode := range modes {
			if strings.HasPrefix(mounted, dir+"/") {
				if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != mode {
					t.Errorf("driver %s: %s above the root filesystem has mode %v, was %04o", s.Driver(), dir, st.Mode().Perm(), mode)
				}
			}
		}
		for _, p := range []string{rootfs, filepath.Join(rootfs, "bin")} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			if sys.Uid != 300000 || sys.Gid != 300000 {
				t.Errorf("driver %s: %s owned by %d:%d, want 300000:300000", s.Driver(), p, sys.Uid, sys.Gid)
			}
		}
	})
}

// dirModes returns the mode of every directory under root, and of root and the
// directories above it.
func dirModes(t *testing.T, root string) map[string]os.FileMode {
	t.Helper()
	modes := map[string]os.FileMode{}
	for d := filepath.Dir(root); d != "/"; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		modes[d] = st.Mode().Perm()
	}
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		modes[p] = info.Mode().Perm()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return modes
}

// In transient store mode the records of a container and of its writable layer are in
// the run root, and an overlay root filesystem is mounted with the volatile option. A
// reboot empties the run root: the next Open knows no such container, and removes the
// layer's directory, which no record names any more; the image stays.
func TestTransientStoreAfterReboot(t *testing.T) {
	onEachDriverWith(t, transient, func(t *testing.T, _ string, s *testStore) {
		ctx := context.Background()
		img, id := createTestContainer(t, s)
		rootfs, err := s.Mount(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		layer, err := s.WritableLayerDir(id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Driver() == DriverOverlay {
			layer = filepath.Dir(layer) // the layer's directory, above its diff/
			if opts := mountOptions(t, rootfs); !strings.Contains(opts, "volatile") {
				t.Errorf("the root filesystem's overlay mount options %q lack volatile", opts)
			}
		}
		records, _ := filepath.Glob(filepath.Join(s.opts.RunRoot, "*-containers", "volatile-containers.json"))
		if len(records) != 1 {
			t.Fatalf("volatile-containers.json in the run root: %v, want one", records)
		}
		if b, err := os.ReadFile(records[0]); err != nil || !strings.Contains(string(b), id) {
			t.Errorf("%s does not record container %s: %v", records[0], id, err)
		}

		s.reopen(t, func() { // the reboot: the mounts go, and the run root's contents
			for _, m := range testenv.Mounts(t, s.opts.Root) { // deepest first
				if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.RemoveAll(s.opts.RunRoot); err != nil {
				t.Fatal(err)
			}
		})
		if ids, err := s.Containers(ctx); err != nil || len(ids) != 0 {
			t.Errorf("Containers after the reboot = %v, %v; want none", ids, err)
		}
		if _, err := os.Stat(layer); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the container's layer directory %s outlived the reboot's Open: %v", layer, err)
		}
		if _, err := s.ImageStatus(ctx, img.ID); err != nil {
			t.Errorf("the image after the reboot: %v", err)
		}
		// A removal of the container (its journaled undo) finds nothing to do.
		if err := s.DeleteContainer(ctx, id); err != nil {
			t.Errorf("DeleteContainer after the reboot: %v", err)
		}
	})
}

// TestMountsNodev: on overlay, a root filesystem and an image volume are mounted nodev
// (issue 40, item 1b), so that a device node in them (an image may bring one) cannot be
// opened through them. vfs has no mount to carry the flag (see Open).
func TestMountsNodev(t *testing.T) {
	s := openTestStore(t, "")
	if s.Driver() != DriverOverlay {
		testenv.Need(t, "overlay mounts: the store under %s fell back to %s (no overlay in the kernel, or on that file system)", s.dir, s.Driver())
	}
	ctx := context.Background()
	img, id := createTestContainer(t, s)
	rootfs, err := s.Mount(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	volume, err := s.MountImageVolume(ctx, ImageVolumeID(id, 0), img.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range []string{id, ImageVolumeID(id, 0)} {
			if err := s.DeleteContainer(ctx, c); err != nil {
				t.Error(err)
			}
		}
	})
	for _, m := range []struct{ what, path string }{{"root filesystem", rootfs}, {"image volume", volume}} {
		if opts := mountOptions(t, m.path); !slices.Contains(strings.Split(opts, ","), "nodev") {
			t.Errorf("the %s at %s is mounted %q, without nodev", m.what, m.path, opts)
		}
	}
	// A device node made in the root filesystem: /dev/null's numbers, which anyone
	// could open where device nodes work.
	dev := filepath.Join(rootfs, "null")
	if err := unix.Mknod(dev, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	if f, err := os.OpenFile(dev, os.O_RDWR, 0); !errors.Is(err, unix.EACCES) {
		if err == nil {
			f.Close()
		}
		t.Errorf("open of a device node in the root filesystem: %v, want EACCES", err)
	}
}

// mountOptions returns the options (the mount's and the super block's) of the mount at
// path, from /proc/self/mountinfo.
func mountOptions(t *testing.T, path string) string {
	t.Helper()
	infos, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(path))
	if err != nil || len(infos) == 0 {
		t.Fatalf("no mount at %s: %v", path, err)
	}
	m := infos[len(infos)-1]
	return m.Options + "," + m.VFSOptions
}

// A store opened without transient store mode does not read the run root's records of
// containers made with it; Open refuses it while there are some, instead of losing
// track of them (and, at the next collection, of their root filesystems).
func TestOpenWithoutTransientStoreRefusesItsContainers(t *testing.T) {
	s := openTestStoreWith(t, DriverVFS, transient)
	ctx := context.Background()
	_, id := createTestContainer(t, s)
	s.reopen(t, func() {
		off := s.opts
		off.TransientStore = false
		st, err := Open(ctx, off)
		if err == nil {
			_ = st.Close()
			t.Fatal("Open without transient store mode succeeded over a container made with it")
		}
		if !strings.Contains(err.Error(), "transient store") || !strings.Contains(err.Error(), "1 containers") {
			t.Errorf("Open's error %q does not say that one container was made in transient store mode", err)
		}
	})
	// With the mode, the container is there; once it is removed, the mode can go.
	if ids, err := s.Containers(ctx); err != nil || !slices.Equal(ids, []string{id}) {
		t.Errorf("Containers with the mode again = %v, %v; want [%s]", ids, err, id)
	}
	if err := s.DeleteContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	s.reopen(t, func() { s.opts.TransientStore = false })
	if ids, err := s.Containers(ctx); err != nil || len(ids) != 0 {
		t.Errorf("Containers without the mode = %v, %v; want none", ids, err)
	}
}

// transient opens a test store in transient store mode.
func transient(o *Options) { o.TransientStore = true }

// createTestContainer pulls the test image into s and creates a container of it.
func createTestContainer(t *testing.T, s *testStore) (Image, string) {
	t.Helper()
	img, _ := pullTestImage(t, s)
	id := newID(t)
	if _, err := s.CreateContainer(context.Background(), id, "k8s_c_p_ns_uid_0", img.ID, nil); err != nil {
		t.Fatal(err)
	}
	return img, id
}
