package netns

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	paths, err := PinUser(context.Background(), dir, id, []Kind{Net, IPC, UTS}, "pod-userns", maps, maps, testBinary(t))
	if err != nil {
		t.Fatalf("PinUser: %v", err)
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

func TestPinUserInvalid(t *testing.T) {
	maps := []IDMap{{ContainerID: 0, HostID: 200000, Size: 65536}}
	dir, id := t.TempDir(), newSandboxID(t)
	for _, tc := range []struct {
		name  string
		kinds []Kind
		maps  []IDMap
	}{
		{"pid is StartPause's", []Kind{PID}, maps},
		{"user twice", []Kind{User}, maps},
		{"net twice", []Kind{Net, Net}, maps},
		{"no maps", []Kind{Net}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := PinUser(context.Background(), dir, id, tc.kinds, "", tc.maps, tc.maps, testBinary(t)); !errors.Is(err, ErrInvalid) {
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
		if len(args) == 3 && args[1] == pauseArg && args[2] == id {
			if st, err := os.ReadFile(filepath.Join(d, "stat")); err == nil && !strings.Contains(string(st), ") Z ") {
				pids = append(pids, filepath.Base(d))
			}
		}
	}
	return pids
}
