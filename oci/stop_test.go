package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

func TestStopGraceful(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "trap 'exit 0' TERM; echo ready; sleep 30 & wait"}, nil)
	waitLog(t, c, "stdout F ready")
	start := time.Now()
	if err := r.Stop(ctxb, c.id, true, syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Stop took %s for a container that exits on SIGTERM", took)
	}
	code, at, ok, err := r.ExitStatus(c.id)
	if err != nil || !ok || code != 0 {
		t.Fatalf("ExitStatus after Stop = %d, %v, %v; want 0 recorded", code, ok, err)
	}
	if time.Since(at) > time.Minute {
		t.Fatalf("exit time %s is not recent", at)
	}
	if st, err := r.State(ctxb, c.id); err != nil || st.Status != StatusStopped {
		t.Fatalf("state after Stop = %+v, %v", st, err)
	}
	// Stopping a stopped container is fine.
	if err := r.Stop(ctxb, c.id, true, syscall.SIGTERM, time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStopKillsAfterTimeout(t *testing.T) {
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "trap '' TERM; echo ready; sleep 30"}, nil)
	waitLog(t, c, "stdout F ready")
	start := time.Now()
	if err := r.Stop(ctxb, c.id, true, syscall.SIGTERM, time.Second); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if took < time.Second || took > 5*time.Second {
		t.Fatalf("Stop took %s, want the 1s timeout and then a prompt kill", took)
	}
	code, _, ok, err := r.ExitStatus(c.id)
	if err != nil || !ok || code != 128+int(syscall.SIGKILL) {
		t.Fatalf("ExitStatus = %d, %v, %v; want 137", code, ok, err)
	}
}

func TestStopCreatedContainer(t *testing.T) {
	r := newRuntime(t)
	c := createContainer(t, r, []string{"sleep", "30"}, nil)
	if err := r.Stop(ctxb, c.id, false, syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if st, err := r.State(ctxb, c.id); err != nil || st.Status != StatusStopped {
		t.Fatalf("state = %+v, %v; want stopped", st, err)
	}
	if err := r.Stop(ctxb, "unknown", false, syscall.SIGTERM, time.Second); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Stop of an unknown container: %v", err)
	}
}

func TestStopStartedForksOnlyTheKill(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string
		sig     syscall.Signal
		timeout time.Duration
		nodePid bool     // in the node's pid namespace, not one of its own
		want    []string // the runtime's subcommands, in order
		code    int
	}{
		{"exits on the stop signal", "trap 'exit 0' TERM; echo ready; sleep 30 & wait", syscall.SIGTERM, 10 * time.Second, false, nil, 0},
		{"timeout 0 kills at once", "trap 'exit 0' TERM; echo ready; sleep 30 & wait", syscall.SIGTERM, 0, false, nil, 137},
		{"ignores the stop signal", "trap '' TERM; sleep 30 & echo ready; wait", syscall.SIGTERM, 200 * time.Millisecond, false, nil, 137},
		{"the node's pid namespace: timeout 0", "trap 'exit 0' TERM; echo ready; sleep 30 & wait", syscall.SIGTERM, 0, true, []string{"kill"}, 137},
		{"the node's pid namespace: ignores the stop signal", "trap '' TERM; sleep 30 & echo ready; wait", syscall.SIGTERM, 200 * time.Millisecond, true, []string{"kill"}, 137},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The shell's background sleep, killed with it, may outlive conmon (on a
			// loaded node) and come to this process: the daemon reaps it.
			reapOrphans(t)
			r := newRuntime(t)
			var edit func(*SpecInput)
			if tc.nodePid {
				edit = func(in *SpecInput) {
					sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}
				}
			}
			c := startContainer(t, r, []string{"sh", "-c", tc.script}, edit)
			waitLog(t, c, "stdout F ready")
			calls := recordRuntimeCalls(t, r)
			if err := r.Stop(ctxb, c.id, true, tc.sig, tc.timeout); err != nil {
				t.Fatal(err)
			}
			if got := calls(); !slices.Equal(got, tc.want) {
				t.Errorf("runtime calls = %q, want %q", got, tc.want)
			}
			if code, _, ok, err := r.ExitStatus(c.id); err != nil || !ok || code != tc.code {
				t.Errorf("ExitStatus = %d, %v, %v; want %d recorded", code, ok, err, tc.code)
			}
			// Every process is gone, the shell's background sleep too.
			if procs, err := os.ReadFile(filepath.Join(c.cgroupDir("pids"), "cgroup.procs")); err != nil || len(bytes.TrimSpace(procs)) > 0 {
				t.Errorf("processes left in the container's cgroup after Stop: %q, %v", procs, err)
			}
			if err := r.Delete(ctxb, c.id); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStopWaitsForEveryProcess: the processes of a container without a pid namespace
// of its own do not end with its init. After the SIGKILL, Stop waits for each of them,
// and one that cannot exit keeps Stop from reporting the container stopped: here the
// shell's background sleep, in a frozen cgroup of its own below the container's, which
// cannot act on its SIGKILL until it is thawed. (On a loaded node Stop returned while
// such a sleep was still dying: "processes left in the container's cgroup after Stop".)
func TestStopWaitsForEveryProcess(t *testing.T) {
	cgroupV1(t)
	reapOrphans(t) // the sleep may outlive conmon
	r := newRuntime(t)
	c := startContainer(t, r, []string{"sh", "-c", "sleep 30 >/dev/null 2>&1 & echo background $!; wait"}, func(in *SpecInput) {
		sc(in).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}
	})
	background := backgroundPID(t, c)
	frozen := filepath.Join(c.cgroupDir("freezer"), "frozen")
	if err := os.Mkdir(frozen, 0o755); err != nil {
		t.Fatal(err)
	}
	thaw := func() {
		if err := os.WriteFile(filepath.Join(frozen, "freezer.state"), []byte("THAWED"), 0o644); err != nil {
			t.Error(err)
		}
	}
	// Before the container's Delete: the cgroup must be empty to go.
	t.Cleanup(func() {
		thaw()
		if err := testenv.Poll(10*time.Second, 10*time.Millisecond, func() error { return os.Remove(frozen) }); err != nil {
			t.Error(err)
		}
	})
	writeFile(t, filepath.Join(frozen, "cgroup.procs"), background)
	writeFile(t, filepath.Join(frozen, "freezer.state"), "FROZEN")
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() error {
		if st := readCgroupFile(t, filepath.Join(frozen, "freezer.state")); st != "FROZEN" {
			return fmt.Errorf("the background sleep's cgroup is %s", st)
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(ctxb, 2*time.Second)
	defer cancel()
	err := r.Stop(ctx, c.id, true, syscall.SIGKILL, 0)
	if want := "process " + background + " survived SIGKILL"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Stop with the background sleep %s frozen = %v, want an error saying %q", background, err, want)
	}
	// Thawed, it acts on the SIGKILL it was sent.
	thaw()
	pid, _ := strconv.Atoi(background)
	testenv.WaitGone(t, pid, 10*time.Second)
}

// TestCgroupGone: a cgroup read while it is removed (ENODEV, as the library wraps it)
// is gone as much as one that is not there; other errors are not.
func TestCgroupGone(t *testing.T) {
	for _, tt := range []struct {
		err  error
		gone bool
	}{
		{nil, false},
		{&os.PathError{Op: "open", Path: "/sys/fs/cgroup/x/cgroup.procs", Err: syscall.ENOENT}, true},
		{fmt.Errorf("read: %w", &os.PathError{Op: "read", Path: "/sys/fs/cgroup/x/cgroup.procs", Err: syscall.ENODEV}), true},
		{&os.PathError{Op: "open", Path: "/sys/fs/cgroup/x/cgroup.procs", Err: syscall.EACCES}, false},
		{errors.New("other"), false},
	} {
		if got := cgroupGone(tt.err); got != tt.gone {
			t.Errorf("cgroupGone(%v) = %v, want %v", tt.err, got, tt.gone)
		}
	}
}
