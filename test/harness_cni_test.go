package test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
)

// Helpers of the CNI plugin wrapper: making the bridge plugin slow or failing,
// and reading which calls it got.

// slowCNI makes every later call of the bridge plugin (but VERSION) sleep d
// first; 0 makes it fast again. A call already sleeping is not affected.
func (d *daemon) slowCNI(t *testing.T, dur time.Duration) {
	t.Helper()
	path := filepath.Join(d.base, "cni-sleep")
	if dur <= 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, strconv.FormatFloat(dur.Seconds(), 'f', 3, 64)+"\n", 0o644)
}

// failCNI makes the bridge plugin fail every call of the CNI command (ADD,
// DEL, CHECK) with a CNI error while on (with the message in the file
// cni-fail-<COMMAND>, "injected failure" when it is empty).
func (d *daemon) failCNI(t *testing.T, command string, on bool) {
	t.Helper()
	path := filepath.Join(d.base, "cni-fail-"+command)
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, "", 0o644)
}

// cniCall is one call of the bridge plugin wrapper.
type cniCall struct{ command, containerID string }

// cniCalls returns the calls of the bridge plugin so far, oldest first.
func (d *daemon) cniCalls(t *testing.T) []cniCall {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.base, "cni-calls.log"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var calls []cniCall
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) == 2 {
			calls = append(calls, cniCall{f[0], f[1]})
		}
	}
	return calls
}

// addedIDs returns the sandbox IDs of the CNI ADD calls so far.
func (d *daemon) addedIDs(t *testing.T) []string {
	t.Helper()
	var ids []string
	for _, c := range d.cniCalls(t) {
		if c.command == "ADD" {
			ids = append(ids, c.containerID)
		}
	}
	return ids
}

// waitADD waits until the nth (1-based) CNI ADD has been called and returns
// its sandbox ID.
func (d *daemon) waitADD(t *testing.T, n int, within time.Duration) string {
	t.Helper()
	var ids []string
	testenv.Eventually(t, within, 20*time.Millisecond, func() error {
		if ids = d.addedIDs(t); len(ids) >= n {
			return nil
		}
		return fmt.Errorf("CNI ADD number %d was not called within %v (calls: %v)", n, within, d.cniCalls(t))
	})
	return ids[n-1]
}

// cniResultPath is libcni's cached ADD result of a sandbox; libcni writes it
// when ADD succeeded, just before returning to the daemon.
func (d *daemon) cniResultPath(id string) string {
	return d.node.CNIResult(d.network, id, "eth0")
}

// waitNetworkDone waits until the CNI ADD of the sandbox has returned to the
// daemon (libcni cached its result), then a moment more for the daemon to
// settle the record (journal commits take well under a millisecond here).
func (d *daemon) waitNetworkDone(t *testing.T, id string, within time.Duration) {
	t.Helper()
	testenv.Eventually(t, within, 20*time.Millisecond, func() error {
		if _, err := os.Stat(d.cniResultPath(id)); err != nil {
			return fmt.Errorf("CNI ADD of %s did not finish within %v (calls: %v)", id, within, d.cniCalls(t))
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
}

// pluginProcesses lists the live processes working for a sandbox's CNI
// calls (CNI_CONTAINERID in their environment), as "pid command". A zombie
// has an empty environment and is not listed.
func pluginProcesses(t *testing.T, sandboxID string) []string {
	t.Helper()
	needle := []byte("CNI_CONTAINERID=" + sandboxID + "\x00")
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !bytes.Contains(env, needle) {
			continue
		}
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		out = append(out, fmt.Sprintf("%d %s", pid, strings.TrimSpace(string(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))))
	}
	return out
}

// lateFailure is the message of a CNI ADD failed by failCNILate.
const lateFailure = "injected failure after the ADD allocated"

// failCNILate turns on or off the late failure of CNI ADD in the plugin
// wrapper (writeWrapper): the real ADD runs (an address is allocated, the
// veth made) and then the call fails, like a plugin chain failing part way.
func (d *daemon) failCNILate(t *testing.T, on bool) {
	t.Helper()
	path := filepath.Join(d.base, "cni-fail-late-ADD")
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, "", 0o644)
}

// cniFault switches a fault of the bridge plugin wrapper for one CNI command (ADD, DEL)
// on or off: "crash" kills the plugin (SIGKILL) before it does anything, "crash-late"
// kills it after the real plugin did the command (for ADD: an address allocated and a
// veth made, the result never returned), "exit" makes it exit 2 without a CNI error.
func (d *daemon) cniFault(t *testing.T, fault, command string, on bool) {
	t.Helper()
	path := filepath.Join(d.base, "cni-"+fault+"-"+command)
	if !on {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return
	}
	writeFile(t, path, "", 0o644)
}
