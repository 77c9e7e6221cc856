package storage

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.podman.io/storage/pkg/reexec"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// varLibContainersExisted records whether /var/lib/containers existed before the tests, so
// that TestNothingUnderVarLibContainers can tell whether they created it.
var varLibContainersExisted bool

func TestMain(m *testing.M) {
	if reexec.Init() {
		return
	}
	_, err := os.Stat("/var/lib/containers")
	varLibContainersExisted = err == nil
	os.Exit(m.Run())
}

// requireRoot skips the test unless it runs as root; it fails under CI=true.
func requireRoot(t *testing.T) {
	t.Helper()
	storagetest.RequireRoot(t)
}

// requireBusybox skips the test unless /bin/busybox exists; it fails under CI=true.
func requireBusybox(t *testing.T) {
	t.Helper()
	storagetest.RequireBusybox(t)
}

// testStore is a Store in a temporary directory, with the loopback registry it pulls from.
type testStore struct {
	*Store
	dir  string  // holds root/, run/ and cache/
	host string  // the registry's host:port
	opts Options // what it was opened with
}

// openTestStore opens a store in a fresh temporary directory with mirrors to a fresh
// loopback registry: registry.k8s.io -> <host>, docker.io/library -> <host>/library. It
// closes the store at the end of the test and then checks that nothing is left mounted under
// the directory (unmounting whatever is, so that the directory can be removed).
func openTestStore(t *testing.T, driver string) *testStore {
	t.Helper()
	return openTestStoreWith(t, driver, nil)
}

// openTestStoreWith is openTestStore with the options edited by edit (if not nil).
func openTestStoreWith(t *testing.T, driver string, edit func(*Options)) *testStore {
	t.Helper()
	requireRoot(t)
	requireBusybox(t)
	host := storagetest.StartRegistry(t)
	// Searchable by others, as a node's /run is, so that the default RootfsDir
	// (<dir>/run/rootfs) can be reached from a user namespace.
	dir := searchableTempDir(t)
	opts := Options{
		Root:          filepath.Join(dir, "root"),
		RunRoot:       filepath.Join(dir, "run"),
		ImageCacheDir: filepath.Join(dir, "cache"),
		Driver:        driver,
		Logger:        slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registries: []Registry{
			{Prefix: "registry.k8s.io", Location: host, Insecure: true},
			{Prefix: "docker.io/library", Location: host + "/library", Insecure: true},
		},
	}
	if edit != nil {
		edit(&opts)
	}
	s, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	ts := &testStore{Store: s, dir: dir, host: host, opts: opts}
	t.Cleanup(func() {
		if err := ts.Close(); err != nil { // the store open then (see reopen)
			t.Errorf("Close: %v", err)
		}
		if left := testenv.Mounts(t, dir); len(left) > 0 {
			t.Errorf("mounts left under %s after Close: %v", dir, left)
			for _, m := range slices.Backward(left) {
				if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
					t.Errorf("unmount %s: %v", m, err)
				}
			}
		}
	})
	return ts
}

// reopen closes the store and opens it again with the same options, after between
// (if not nil) has run: what a restart of the daemon, or a reboot, does to it.
func (s *testStore) reopen(t *testing.T, between func()) {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if between != nil {
		between()
	}
	st, err := Open(context.Background(), s.opts)
	if err != nil {
		t.Fatalf("Open again: %v", err)
	}
	s.Store = st
}

// overlaySupported reports whether the kernel lists overlay in /proc/filesystems.
func overlaySupported() bool {
	data, err := os.ReadFile("/proc/filesystems")
	return err == nil && strings.Contains(string(data), "\toverlay\n")
}

// onEachDriver runs test, as a subtest named after the driver, on a store of its own
// for each driver the tests cover: the default ("") and vfs.
func onEachDriver(t *testing.T, test func(t *testing.T, driver string, s *testStore)) {
	onEachDriverWith(t, nil, test)
}

// onEachDriverWith is onEachDriver with the stores' options edited by edit (if not nil).
func onEachDriverWith(t *testing.T, edit func(*Options), test func(t *testing.T, driver string, s *testStore)) {
	for _, driver := range []string{"", DriverVFS} {
		name := driver
		if name == "" {
			name = "default"
		}
		t.Run(name, func(t *testing.T) { test(t, driver, openTestStoreWith(t, driver, edit)) })
	}
}

// openUndoJournal opens a journal in a temporary directory whose registry has the
// storage undos, with store as their store; it is closed at the end of the test.
func openUndoJournal(t *testing.T, store func() (*Store, error)) *journal.Journal {
	t.Helper()
	reg := journal.NewRegistry()
	RegisterUndos(reg, store)
	j, err := journal.Open(filepath.Join(t.TempDir(), "journal.db"), journal.Options{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// containerDirs returns the persistent and the run directory of storage container id
// (containers/storage's ContainerDirectory and ContainerRunDirectory), for the tests
// that look at what a container's creation and deletion leave. ErrContainerNotFound
// for an unknown id.
func (s *Store) containerDirs(id string) (dir, runDir string, err error) {
	c, err := s.container(id)
	if err != nil {
		return "", "", err
	}
	if dir, err = s.st.ContainerDirectory(c.ID); err != nil {
		return "", "", fmt.Errorf("directory of storage container %s: %w", id, err)
	}
	if runDir, err = s.st.ContainerRunDirectory(c.ID); err != nil {
		return "", "", fmt.Errorf("run directory of storage container %s: %w", id, err)
	}
	return dir, runDir, nil
}
