package netns

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/pause"
)

// TestPinUser pins a user namespace with a mapping and net, ipc and uts
// namespaces it owns: each is pinned and not the host's, the uid and gid maps
// are the requested ones, the host name is set and lo is up, the child that
// made them is gone, and Unpin removes every pin.
func TestPinUser(t *testing.T) {
	requirePlugins(t) // for nsenter and ip
	requireNsenter(t)
	dir, id := t.TempDir(), newSandboxID(t)
	maps := []IDMap{{ContainerID: 0, HostID: 200000, Size: 65536}}
	paths, pid, err := PinUser(context.Background(), dir, id, []Kind{Net, IPC, UTS}, "pod-userns", maps, maps, testPause(t))
	if err != nil {
		t.Fatalf("PinUser: %v", err)
	}
	if pid != 0 {
		t.Errorf("PinUser without a pid namespace kept process %d", pid)
	}
	unpinAll(t, paths)
	for _, k := range []Kind{User, Net, IPC, UTS} {
		p := paths[k]
		if p != PinPath(dir, k, id) || !IsPinned(p) {
			t.Errorf("%s pin %q (PinPath %q): pinned %v", k, p, PinPath(dir, k, id), IsPinned(p))
		}
		if inode(t, p) == inode(t, "/proc/self/ns/"+string(k)) {
			t.Errorf("pinned %s namespace is the host's", k)
		}
	}
	for _, f := range []string{"uid_map", "gid_map"} {
		got := strings.Fields(run(t, "nsenter", "--user="+paths[User], "cat", "/proc/self/"+f))
		if strings.Join(got, " ") != "0 200000 65536" {
			t.Errorf("%s in the pinned user namespace = %q, want 0 200000 65536", f, got)
		}
	}
	if got := run(t, "nsenter", "--uts="+paths[UTS], "hostname"); got != "pod-userns" {
		t.Errorf("hostname in the UTS namespace = %q, want pod-userns", got)
	}
	if out := run(t, "nsenter", "--net="+paths[Net], "ip", "-o", "link", "show", "lo"); !linkFlags(out)["UP"] {
		t.Errorf("lo is not up in the pinned network namespace: %s", out)
	}
	// The network namespace belongs to the pod's user namespace: entering both,
	// root of the pod (host uid 200000) may configure it.
	run(t, "nsenter", "--user="+paths[User], "--net="+paths[Net], "ip", "addr", "add", "10.9.9.9/32", "dev", "lo")
	if procs := pauseProcessesOf(t, id); len(procs) > 0 {
		t.Errorf("the child that made the namespaces still runs: %v", procs)
	}
	for _, p := range paths {
		if err := Unpin(context.Background(), p); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Unpin: %v, want it gone", p, err)
		}
	}
}

// TestPinUserPause pins a user namespace with a shared pid namespace: the child
// that made them stays as the pause process, PID 1 of the pinned pid namespace,
// which the pod's user namespace owns (so that its root may mount /proc); the
// step's undo (StopPause, then Unpin) leaves no process and no pin.
func TestPinUserPause(t *testing.T) {
	requirePlugins(t)
	requireNsenter(t)
	dir, id := t.TempDir(), newSandboxID(t)
	maps := []IDMap{{ContainerID: 0, HostID: 200000, Size: 65536}}
	step := UserPinStep(dir, id, []Kind{Net, IPC, UTS, PID}, "pod-userns", maps, maps, testPauseCgroup(t, id))
	pins, err := step.Run(context.Background())
	if err != nil {
		t.Fatalf("PinUser: %v", err)
	}
	undo := func() {
		if err := undoUserPin(context.Background(), step.Args); err != nil {
			t.Errorf("undo: %v", err)
		}
	}
	t.Cleanup(undo)
	if pins.PID == 0 || !PauseAlive(pins.Paths[PID]) {
		t.Fatalf("pause process %d, alive in %s: %v", pins.PID, pins.Paths[PID], PauseAlive(pins.Paths[PID]))
	}
	if got := pauseProcessesOf(t, id); len(got) != 1 || got[0] != strconv.Itoa(pins.PID) {
		t.Errorf("pause processes %v, want [%d]", got, pins.PID)
	}
	if inode(t, "/proc/"+strconv.Itoa(pins.PID)+"/ns/user") != inode(t, pins.Paths[User]) {
		t.Errorf("the pause process is not in the pinned user namespace")
	}
	// 65535 in the pod's user namespace, 200000+65535 on the node.
	requireConfined(t, pins.PID, 265535, 265535)
	requireInCgroup(t, pins.PID, step.Args[ArgCgroup])
	// Root of the pod's user namespace mounts a proc of the pinned pid namespace.
	run(t, "nsenter", "--user="+pins.Paths[User], "--pid="+pins.Paths[PID], "--",
		"unshare", "--mount", "--fork", "sh", "-c", "mount -t proc proc /proc && test -e /proc/1/status")
	// The process is found again after its PID was forgotten (a daemon restart).
	time.Sleep(100 * time.Millisecond)
	if !PauseAlive(pins.Paths[PID]) {
		t.Fatal("the pause process died")
	}
	undo()
	if procs := pauseProcessesOf(t, id); len(procs) > 0 {
		t.Errorf("pause process still runs after the undo: %v", procs)
	}
	for k, p := range step.Args {
		if k == ArgCgroup {
			if dirs := cgroupDirs(p); len(dirs) > 0 {
				t.Errorf("cgroup %s after the undo: %v, want it gone", p, dirs)
			}
			continue
		}
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s pin %s after the undo: %v, want it gone", k, p, err)
		}
	}
}

func TestPinUserInvalid(t *testing.T) {
	maps := []IDMap{{ContainerID: 0, HostID: 200000, Size: 65536}}
	dir, id := t.TempDir(), newSandboxID(t)
	for _, tc := range []struct {
		name  string
		kinds []Kind
		maps  []IDMap
	}{
		{"pid twice", []Kind{PID, PID}, maps},
		{"user twice", []Kind{User}, maps},
		{"net twice", []Kind{Net, Net}, maps},
		{"no maps", []Kind{Net}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := PinUser(context.Background(), dir, id, tc.kinds, "", tc.maps, tc.maps, testPause(t)); !errors.Is(err, ErrInvalid) {
				t.Errorf("PinUser = %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := Pin(context.Background(), dir, id, []Kind{User}, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("Pin of a user namespace = %v, want ErrInvalid (PinUser's)", err)
	}
}

// pauseProcessesOf returns the PIDs of live processes whose command line is
// "<anything> pause <id>".
func pauseProcessesOf(t *testing.T, id string) []string {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []string
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) == 3 && args[1] == pause.Arg && args[2] == id {
			if st, err := os.ReadFile(filepath.Join(d, "stat")); err == nil && !strings.Contains(string(st), ") Z ") {
				pids = append(pids, filepath.Base(d))
			}
		}
	}
	return pids
}
