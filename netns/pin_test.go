package netns

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// unpinAll registers the removal of every pin in paths.
func unpinAll(t *testing.T, paths Paths) {
	t.Cleanup(func() {
		for _, p := range paths {
			if err := Unpin(context.Background(), p); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
	})
}

func TestPin(t *testing.T) {
	requirePlugins(t) // for nsenter and ip
	hostName, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		kinds    []Kind
		hostname string
	}{
		{"all", []Kind{Net, IPC, UTS}, "pod-all"},
		{"net only", []Kind{Net}, ""},
		{"uts only", []Kind{UTS}, "pod-uts"},
		{"ipc and uts without hostname", []Kind{IPC, UTS}, ""},
		{"hostname ignored without uts", []Kind{Net, IPC}, "must-not-be-set"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			id := newSandboxID(t)
			paths, err := Pin(context.Background(), dir, id, tc.kinds, tc.hostname)
			if err != nil {
				t.Fatalf("Pin: %v", err)
			}
			unpinAll(t, paths)

			if len(paths) != len(tc.kinds) {
				t.Fatalf("Pin returned %v, want %d paths", paths, len(tc.kinds))
			}
			for _, k := range tc.kinds {
				p := paths[k]
				if want := filepath.Join(dir, string(k)+"ns", id); p != want || PinPath(dir, k, id) != want {
					t.Errorf("path of %s = %q, PinPath = %q, want %q", k, p, PinPath(dir, k, id), want)
				}
				if !IsPinned(p) {
					t.Errorf("IsPinned(%s) = false", p)
				}
				if !testenv.IsMountPoint(t, p) {
					t.Errorf("%s is not in /proc/self/mountinfo", p)
				}
				if inode(t, p) == inode(t, "/proc/self/ns/"+string(k)) {
					t.Errorf("pinned %s namespace is the host's", k)
				}
				st, err := os.Stat(filepath.Dir(p))
				if err != nil || st.Mode().Perm() != 0o755 {
					t.Errorf("parent dir of %s: %v, %v; want mode 0755", p, st.Mode(), err)
				}
			}
			if p, ok := paths[UTS]; ok {
				want := tc.hostname
				if want == "" {
					want = hostName // a new UTS namespace starts as a copy
				}
				if got := run(t, "nsenter", "--uts="+p, "hostname"); got != want {
					t.Errorf("hostname in UTS namespace = %q, want %q", got, want)
				}
			}
			if p, ok := paths[Net]; ok {
				out := run(t, "nsenter", "--net="+p, "ip", "-o", "link", "show", "lo")
				if !linkFlags(out)["UP"] {
					t.Errorf("lo is not up in the pinned namespace: %s", out)
				}
				// A new network namespace has only lo.
				if n := len(strings.Split(run(t, "nsenter", "--net="+p, "ip", "-o", "link", "show"), "\n")); n != 1 {
					t.Errorf("pinned network namespace has %d links, want 1", n)
				}
			}
			if got, _ := os.Hostname(); got != hostName {
				t.Fatalf("host name changed from %q to %q", hostName, got)
			}
		})
	}
}

// linkFlags returns the flags of an `ip -o link show` line ("<LOOPBACK,UP>").
func linkFlags(line string) map[string]bool {
	flags := map[string]bool{}
	start, end := strings.Index(line, "<"), strings.Index(line, ">")
	if start < 0 || end < start {
		return flags
	}
	for _, f := range strings.Split(line[start+1:end], ",") {
		flags[f] = true
	}
	return flags
}

func TestUnpin(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	id := newSandboxID(t)
	paths, err := Pin(context.Background(), dir, id, []Kind{Net, IPC, UTS}, "unpin")
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	unpinAll(t, paths)
	for k, p := range paths {
		for i := range 2 { // the second time finds nothing, which is success
			if err := Unpin(context.Background(), p); err != nil {
				t.Fatalf("Unpin %s (#%d): %v", k, i+1, err)
			}
			if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("after Unpin, %s: %v, want not exist", p, err)
			}
			if testenv.IsMountPoint(t, p) {
				t.Errorf("after Unpin, %s is still in /proc/self/mountinfo", p)
			}
			if IsPinned(p) {
				t.Errorf("after Unpin, IsPinned(%s) = true", p)
			}
		}
	}

	// A pin file left unmounted (a crash between create and mount) is removed.
	stale := PinPath(dir, Net, newSandboxID(t))
	if err := os.WriteFile(stale, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	if IsPinned(stale) {
		t.Errorf("IsPinned(empty file) = true")
	}
	if err := Unpin(context.Background(), stale); err != nil {
		t.Fatalf("Unpin of an unmounted pin file: %v", err)
	}
	if _, err := os.Lstat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("unmounted pin file still there: %v", err)
	}

	// A pin that never existed, in a directory that never existed.
	if err := Unpin(context.Background(), PinPath(filepath.Join(dir, "nowhere"), IPC, id)); err != nil {
		t.Errorf("Unpin of a path that never existed: %v", err)
	}
}

func TestUnpinRefusesNonPinPaths(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "netns", "keep")
	if err := os.MkdirAll(filepath.Dir(victim), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim+".txt", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{
		"",
		"relative/netns/" + newSandboxID(t),
		"/etc/passwd",
		dir + "/netns/../netns/" + newSandboxID(t),
		dir + "/netns/.hidden",
		dir + "/mntns/" + newSandboxID(t),
		dir + "/netns/",
	} {
		if err := Unpin(context.Background(), p); !errors.Is(err, ErrInvalid) {
			t.Errorf("Unpin(%q) = %v, want ErrInvalid", p, err)
		}
	}
	if _, err := os.Stat(victim + ".txt"); err != nil {
		t.Errorf("a refused Unpin touched a file: %v", err)
	}
}

func TestPinInvalid(t *testing.T) {
	// Validation happens before anything is created, so root is not needed.
	dir := t.TempDir()
	id := newSandboxID(t)
	tests := []struct {
		name  string
		dir   string
		id    string
		kinds []Kind
	}{
		{"empty id", dir, "", []Kind{Net}},
		{"dot dot", dir, "..", []Kind{Net}},
		{"dot", dir, ".", []Kind{Net}},
		{"traversal", dir, "../../etc", []Kind{Net}},
		{"slash", dir, "a/b", []Kind{Net}},
		{"double dot inside", dir, "a..b", []Kind{Net}},
		{"leading dash", dir, "-rf", []Kind{Net}},
		{"too long", dir, strings.Repeat("a", 129), []Kind{Net}},
		{"relative dir", "relative", id, []Kind{Net}},
		{"no kinds", dir, id, nil},
		{"unknown kind", dir, id, []Kind{"mnt"}},
		{"duplicate kind", dir, id, []Kind{Net, IPC, Net}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			paths, err := Pin(context.Background(), tc.dir, tc.id, tc.kinds, "x")
			if !errors.Is(err, ErrInvalid) || paths != nil {
				t.Fatalf("Pin = %v, %v; want ErrInvalid", paths, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused Pin created %v", entries)
			}
			if p := PinPath(tc.dir, Net, tc.id); p != "" && validateID(tc.id) != nil {
				t.Errorf("PinPath built %q from an invalid ID", p)
			}
		})
	}
	if p := PinPath(dir, "mnt", id); p != "" {
		t.Errorf("PinPath with an unknown kind = %q, want empty", p)
	}
}

func TestPinCanceled(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Pin(ctx, dir, newSandboxID(t), []Kind{Net}, ""); !errors.Is(err, context.Canceled) {
		t.Fatalf("Pin with a canceled context = %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Pin with a canceled context created %v", entries)
	}
}

// TestPinFailureUndoesOnlyItsOwnPins: a Pin that fails part way removes the
// pins it made, and leaves alone the one that was already there.
func TestPinFailureUndoesOnlyItsOwnPins(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	id := newSandboxID(t)

	existing, err := Pin(context.Background(), dir, id, []Kind{UTS}, "first")
	if err != nil {
		t.Fatalf("Pin: %v", err)
	}
	unpinAll(t, existing)

	paths, err := Pin(context.Background(), dir, id, []Kind{Net, IPC, UTS}, "second")
	if !errors.Is(err, fs.ErrExist) || paths != nil {
		t.Fatalf("Pin over an existing pin = %v, %v; want fs.ErrExist", paths, err)
	}
	for _, k := range []Kind{Net, IPC} {
		p := PinPath(dir, k, id)
		if _, err := os.Lstat(p); !errors.Is(err, fs.ErrNotExist) || testenv.IsMountPoint(t, p) {
			t.Errorf("failed Pin left %s behind (stat: %v, mounted: %v)", p, err, testenv.IsMountPoint(t, p))
		}
	}
	if p := existing[UTS]; !IsPinned(p) {
		t.Fatalf("failed Pin removed the pin %s it did not make", p)
	}
	if got := run(t, "nsenter", "--uts="+existing[UTS], "hostname"); got != "first" {
		t.Errorf("existing UTS pin has hostname %q, want %q", got, "first")
	}
}

// TestPinDoesNotTaintThreads: the threads Pin moves into new namespaces must
// die with their goroutine, never run other goroutines afterwards.
func TestPinDoesNotTaintThreads(t *testing.T) {
	requireRoot(t)
	host, err := threadNamespaces()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for range 50 {
		paths, err := Pin(context.Background(), dir, newSandboxID(t), []Kind{Net, IPC, UTS}, "tainted")
		if err != nil {
			t.Fatalf("Pin: %v", err)
		}
		unpinAll(t, paths)
	}
	// Give the scheduler every chance to hand a leftover thread to one of
	// these goroutines.
	var wg sync.WaitGroup
	results := make(chan []uint64, 16*runtime.GOMAXPROCS(0))
	errs := make(chan error, cap(results))
	for range cap(results) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ns, err := threadNamespaces()
			results <- ns
			errs <- err
		}()
	}
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for got := range results {
		if !slices.Equal(got, host) {
			t.Fatalf("a thread runs in namespaces %v, the host's are %v", got, host)
		}
	}
	// The main thread cannot exit (the Go runtime wedges it instead), so a
	// Pin that ran there would leave it, and /proc/<pid>/ns/*, in a
	// sandbox's namespaces for the life of the process.
	for i, k := range []Kind{Net, IPC, UTS} {
		if got := inode(t, "/proc/self/ns/"+string(k)); got != host[i] {
			t.Errorf("the main thread is in %s namespace %d, the host's is %d", k, got, host[i])
		}
	}
}

// threadNamespaces returns the net, ipc and uts namespace inodes of the
// calling goroutine's thread.
func threadNamespaces() ([]uint64, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ns []uint64
	for _, k := range []Kind{Net, IPC, UTS} {
		var st unix.Stat_t
		if err := unix.Stat("/proc/thread-self/ns/"+string(k), &st); err != nil {
			return nil, err
		}
		ns = append(ns, st.Ino)
	}
	return ns, nil
}
