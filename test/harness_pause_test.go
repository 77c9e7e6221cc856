package test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/oci"
)

// Helpers of the pause process and the shared pid namespace: pods and
// containers that share one, the pause processes of a sandbox, and checks
// that a sandbox has exactly one or none.

// CRI namespace modes, as crictl reads them from JSON (numbers).
const (
	nsModePod       = int(runtimeapi.NamespaceMode_POD)
	nsModeContainer = int(runtimeapi.NamespaceMode_CONTAINER)
)

// pidPod writes a pod configuration like containerPod's with the given pid
// namespace mode.
func (d *daemon) pidPod(t *testing.T, name string, pidMode int) string {
	t.Helper()
	return d.editedPod(t, name, func(cfg map[string]any) { namespaceOptions(cfg)["pid"] = pidMode })
}

// withPidMode sets a container's pid namespace mode.
func withPidMode(mode int) ctrOption {
	return func(cfg map[string]any) {
		cfg["linux"] = map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"pid": mode}}}
	}
}

// pidnsPin is where the daemon pins a sandbox's shared pid namespace.
func (d *daemon) pidnsPin(id string) string { return d.node.Pin("pid", id) }

// pauseProcesses lists the live (not zombie) pause processes of a sandbox:
// "<binary> pause <id>".
func pauseProcesses(id string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(args) != 3 || args[1] != "pause" || args[2] != id {
			continue
		}
		if !testenv.Alive(pid) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// removePauseProcesses kills the pause processes of the sandboxes whose pid
// namespace pins are in nsDir: a test that stops its daemon with sandboxes
// left (the node is then removed by unmounting its pins) would otherwise
// leave them running, as it would leave containers. It is meant for the
// harness's cleanup and sweep, before the pins are unmounted.
func removePauseProcesses(logf func(string, ...any), nsDir string) {
	entries, _ := os.ReadDir(filepath.Join(nsDir, "pidns"))
	for _, e := range entries {
		for _, pid := range pauseProcesses(e.Name()) {
			logf("cleanup: killing pause process %d of %s", pid, e.Name())
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		// The pause process of a pod without a cgroup_parent was in a cgroup under the
		// daemon's default parent, which the sweep of the node's cgroup parent misses.
		if dirs := defaultPauseCgroups(e.Name()); len(dirs) > 0 {
			logf("cleanup: removing the pause process's cgroup %s in %d hierarchies", path.Join(oci.DefaultCgroupParent, "crijournal-"+e.Name()), len(dirs))
			for _, dir := range dirs {
				removeCgroupDir(dir)
			}
		}
	}
}

// nsInode returns the inode of a namespace file (0 if it cannot be read).
func nsInode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// pauseReaper kills, when the test ends, the pause processes of the sandboxes
// it was told of that are still alive: a failed test must not leave them
// running (the harness knows nothing of them). Create it before the daemon,
// so that it runs after the daemon's cleanup has removed what it could.
type pauseReaper struct {
	mu  sync.Mutex
	ids []string
}

func newPauseReaper(t *testing.T) *pauseReaper {
	r := &pauseReaper{}
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, id := range r.ids {
			for _, pid := range pauseProcesses(id) {
				t.Logf("cleanup: killing pause process %d of %s", pid, id)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return r
}

func (r *pauseReaper) add(id string) {
	r.mu.Lock()
	r.ids = append(r.ids, id)
	r.mu.Unlock()
}

// requirePause fails the test unless the sandbox has exactly one pause
// process, PID 1 of the pid namespace pinned for it, and returns its PID.
func (d *daemon) requirePause(t *testing.T, id string) int {
	t.Helper()
	pids := pauseProcesses(id)
	if len(pids) != 1 {
		t.Fatalf("sandbox %s has pause processes %v, want one", id, pids)
	}
	pid := pids[0]
	pin := d.pidnsPin(id)
	if !isNamespace(pin) {
		t.Fatalf("the pid namespace of %s is not pinned at %s", id, pin)
	}
	if got, want := nsInode(fmt.Sprintf("/proc/%d/ns/pid", pid)), nsInode(pin); got == 0 || got != want {
		t.Fatalf("pause process %d of %s is in pid namespace %d, want the pinned %d", pid, id, got, want)
	}
	if nsInode(pin) == nsInode("/proc/self/ns/pid") {
		t.Fatalf("the pinned pid namespace of %s is the host's", id)
	}
	return pid
}

// requireNoPause waits until the sandbox has no live pause process (a killed
// orphan may stay a zombie of PID 1 for a while) and no pid namespace pin.
func (d *daemon) requireNoPause(t *testing.T, id, why string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 20*time.Millisecond, func() error {
		pids := pauseProcesses(id)
		_, err := os.Lstat(d.pidnsPin(id))
		if len(pids) == 0 && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("%s: sandbox %s still has pause processes %v and pin %s (%v) after %v", why, id, pids, d.pidnsPin(id), err, within)
	})
}

// requireNoPidnsPins fails the test if anything is left in the pid namespace
// pin directory.
func (d *daemon) requireNoPidnsPins(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(d.node.PinDir("pid"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("leaked pid namespace pin %s", filepath.Join(d.node.PinDir("pid"), e.Name()))
	}
}
