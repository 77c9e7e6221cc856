package test

import (
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

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
)

// TestUsernsRefused checks, through crictl, the user namespace requests a pod
// sandbox refuses before anything is made: modes CONTAINER and TARGET, and
// mappings that are not one range from container ID 0, are InvalidArgument on
// every handler; mode POD on a handler that does not support user namespaces
// (Debian's runc 1.1, without idmapped mounts, as a second handler) is
// FailedPrecondition naming the handler. Status tells which handlers support
// them: those whose runtime says it can (runtimeFeatures, from `runc features`). Nothing is
// left behind.
func TestUsernsRefused(t *testing.T) {
	t.Parallel()
	debianRunc := "/usr/sbin/runc"
	if !isExecutable(debianRunc) {
		t.Skipf("%s (Debian's runc) is not installed", debianRunc)
	}
	d := startDaemon(t, daemonOptions{secondHandler: "debian", secondPath: debianRunc})

	valid := map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
		"uids": idMapping(0, 1000, 100000), "gids": idMapping(0, 1000, 100000)}
	for _, tc := range []struct {
		name    string
		handler string
		userns  map[string]any
		want    []string // in crictl's error
	}{
		{"container", "", map[string]any{"mode": int(runtimeapi.NamespaceMode_CONTAINER)}, []string{"InvalidArgument", "mode CONTAINER"}},
		{"target", "", map[string]any{"mode": int(runtimeapi.NamespaceMode_TARGET)}, []string{"InvalidArgument", "mode TARGET"}},
		{"two-mappings", "", map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
			"uids": append(idMapping(0, 1000, 100000), idMapping(0, 2000, 100000)...), "gids": idMapping(0, 1000, 100000)},
			[]string{"InvalidArgument", "exactly one uid mapping"}},
		{"no-root", "", map[string]any{"mode": int(runtimeapi.NamespaceMode_POD),
			"uids": idMapping(1, 1000, 100000), "gids": idMapping(1, 1000, 100000)},
			[]string{"InvalidArgument", "must map container ID 0"}},
		{"debian-runc", "debian", valid, []string{"FailedPrecondition", "debian", "does not support user namespaces"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"runp"}
			if tc.handler != "" {
				args = append(args, "--runtime", tc.handler)
			}
			args = append(args, usernsPod(t, "userns-"+tc.name, tc.userns))
			out, stderr, err := d.crictl(t, args...)
			if err == nil {
				t.Fatalf("crictl runp of a pod with userns_options %v succeeded (%s), want a refusal", tc.userns, strings.TrimSpace(out))
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("crictl runp refused with %q, want it to say %q", strings.TrimSpace(stderr), w)
				}
			}
		})
	}
	if out := strings.TrimSpace(d.mustCrictl(t, "pods", "-q")); out != "" {
		t.Errorf("crictl pods lists %q after the refusals, want nothing", out)
	}

	// What each handler's runtime says, and what Status tells the kubelet.
	var reported map[string]map[string]bool
	info := d.info(t)
	mustDecode(t, "runtimeFeatures", info["runtimeFeatures"], &reported)
	if reported["debian"]["userNamespaces"] {
		t.Errorf("runtimeFeatures.debian.userNamespaces is true for %s, which has no idmapped mounts", debianRunc)
	}
	if (config.Config{}).RuntimePath("runc") == config.BundledRunc && !reported["runc"]["userNamespaces"] {
		t.Errorf("runtimeFeatures.runc.userNamespaces is false for the project's runc %s", config.BundledRunc)
	}
	type handler struct {
		Name     string          `json:"name"`
		Features map[string]bool `json:"features"`
	}
	var handlers []handler
	mustDecode(t, "runtimeHandlers", info["runtimeHandlers"], &handlers)
	for _, h := range handlers {
		got := h.Features["userNamespaces"] || h.Features["user_namespaces"]
		name := h.Name
		if name == "" {
			name = "runc" // the default handler
		}
		if want := reported[name]["userNamespaces"]; got != want {
			t.Errorf("handler %q reports user namespaces %v, its runtime %v", h.Name, got, want)
		}
	}
	d.stopClean(t)
}

// usernsScript is what the user namespace tests' containers run: it prints the
// uid map, writes the root filesystem as root, checks /proc is the pod's (PID 1 is
// the pause process with a shared pid namespace, the script itself without) and
// that sysfs is mounted, then sleeps.
const usernsScript = `set -e
echo "uid_map: $(cat /proc/self/uid_map)"
echo written >/rootfs-write && echo "rootfs-write: $(ls -n /rootfs-write | awk '{print $3":"$4}')"
echo "pid1: $(tr '\0' ' ' </proc/1/cmdline)"
test -d /sys/class/net && echo sysfs-ok
echo ready; sleep 3600`

// TestUsernsPod runs, through crictl, pods with their own user namespace (mode POD,
// 0 -> 200000 for 65536 IDs), sharing their pid namespace (pid POD, held by the pause
// process that made the pod's namespaces) and not (pid CONTAINER): the container sees
// the mapping in /proc/self/uid_map, writes its root filesystem as its root (owned by
// 0:0 inside), has /proc and sysfs mounted, and the pod gets an IP. The handler reports
// user namespaces in Status. The runtime gets the root filesystem through a bind mount
// under the daemon's run root, in a directory only the pod's mapped root may search, and
// no directory of the store or above it changes mode (issue 20, item 4). Removal leaves
// no pin, no pause process and no bind mount.
func TestUsernsPod(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	for _, tc := range []struct {
		name string
		pid  runtimeapi.NamespaceMode
		pid1 string // what /proc/1/cmdline shows ("pause <pod ID>" for the pause process)
	}{
		{"shared-pid", runtimeapi.NamespaceMode_POD, "pause "},
		{"own-pid", runtimeapi.NamespaceMode_CONTAINER, "pid1: sh -c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := d.usernsContainerPod(t, "userns-"+tc.name, tc.pid)
			podID := d.mustRunp(t, pod)
			reaper.add(podID)
			if tc.pid == runtimeapi.NamespaceMode_POD {
				d.requirePause(t, podID)
			} else if pids := pauseProcesses(podID); len(pids) > 0 {
				t.Errorf("pause processes %v in a pod without a shared pid namespace", pids)
			}
			if ip := d.inspectp(t, podID).Status.Network.IP; ip == "" {
				t.Errorf("the pod has no IP")
			}
			d.pull(t, testImage)
			modes := storageDirModes(t, d.storageRoot())
			ctr := d.run(t, podID, containerConfig(t, "c", 0, []string{"sh", "-c", usernsScript}, withUserns(tc.pid)), pod)
			d.waitLog(t, ctr, "ready", 30*time.Second)
			// The runtime reached the root filesystem through the daemon's bind mount,
			// and no directory of the store (or above it) was opened up for it.
			for dir, mode := range modes {
				if st, err := os.Stat(dir); err == nil && st.Mode().Perm() != mode {
					t.Errorf("%s has mode %04o after a user namespace container ran, was %04o", dir, st.Mode().Perm(), mode)
				}
			}
			dir := filepath.Join(d.usernsRootfsDir(), ctr)
			bound := filepath.Join(dir, "rootfs")
			if !slices.Contains(mountsBelow(d.usernsRootfsDir()), bound) {
				t.Errorf("the container's root filesystem is not bind-mounted at %s", bound)
			}
			// Only the pod's mapped root can reach it (issue 40, item 3).
			if st, err := os.Stat(dir); err != nil {
				t.Error(err)
			} else if sys := st.Sys().(*syscall.Stat_t); st.Mode().Perm() != 0o700 || sys.Uid != usernsHostID || sys.Gid != usernsHostID {
				t.Errorf("%s has mode %04o and owner %d:%d, want 0700 and %d:%d", dir, st.Mode().Perm(), sys.Uid, sys.Gid, usernsHostID, usernsHostID)
			}
			logs := d.mustCrictl(t, "logs", ctr)
			pid1 := tc.pid1
			if tc.pid == runtimeapi.NamespaceMode_POD {
				pid1 += podID
			}
			for _, want := range []string{
				"uid_map: " + fmt.Sprintf("%10d %10d %10d", 0, usernsHostID, 65536),
				"rootfs-write: 0:0", pid1, "sysfs-ok",
			} {
				if !strings.Contains(logs, want) {
					t.Errorf("container log lacks %q:\n%s", want, logs)
				}
			}
			d.removeCtr(t, ctr)
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) || slices.Contains(mountsBelow(d.usernsRootfsDir()), bound) {
				t.Errorf("the bind mount %s or its directory is left after crictl rm (%v)", bound, err)
			}
			d.mustCrictl(t, "stopp", podID)
			d.mustCrictl(t, "rmp", podID)
			if pids := pauseProcesses(podID); len(pids) > 0 {
				t.Errorf("pause processes %v after rmp", pids)
			}
		})
	}
	var handlers []struct {
		Name     string          `json:"name"`
		Features map[string]bool `json:"features"`
	}
	mustDecode(t, "runtimeHandlers", d.info(t)["runtimeHandlers"], &handlers)
	for _, h := range handlers {
		if h.Name == "runc" && !h.Features["userNamespaces"] && !h.Features["user_namespaces"] {
			t.Errorf("handler runc does not report user namespaces: %v", h.Features)
		}
	}
	d.stopClean(t)
}

// storageDirModes returns the modes of the directories from / down to the storage root
// and of those up to three levels under it: every directory above a root filesystem of
// the store that exists before the container (vfs: <root>/vfs/dir/<layer>, overlay:
// <root>/overlay/<layer>/merged). Directories that vanish while it walks are skipped.
func storageDirModes(t *testing.T, root string) map[string]os.FileMode {
	t.Helper()
	modes := map[string]os.FileMode{}
	for d := root; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		modes[d] = st.Mode().Perm()
		if d == "/" {
			break
		}
	}
	_ = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(p, root), "/") > 3 {
			return filepath.SkipDir
		}
		if info, err := e.Info(); err == nil {
			modes[p] = info.Mode().Perm()
		}
		return nil
	})
	return modes
}

// TestUsernsIdmapMount bind-mounts a host directory (owned by the host's root,
// 0755) into a container of a pod with its own user namespace: the mount is
// idmapped through the pod's user namespace, so the container's root sees the
// host root's files as its own (0:0), may write the directory, and what it writes
// is owned by the host's root (0:0 on disk), not by the host ID it runs as
// (usernsHostID), as a kubelet volume expects.
func TestUsernsIdmapMount(t *testing.T) {
	t.Parallel()
	reaper := newPauseReaper(t)
	d, _ := startContainerDaemon(t, daemonOptions{})
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "host-file"), "from the host\n", 0o644)
	pod := d.usernsContainerPod(t, "userns-idmap", runtimeapi.NamespaceMode_POD)
	podID := d.mustRunp(t, pod)
	reaper.add(podID)
	rw := func(cfg map[string]any) {
		cfg["mounts"] = []any{map[string]any{"container_path": "/data", "host_path": dir}}
	}
	script := `set -e; echo "host-file: $(ls -n /data/host-file | awk '{print $3":"$4}')"
echo hi >/data/from-ctr && echo wrote; echo ready; sleep 3600`
	ctr := d.run(t, podID, containerConfig(t, "c", 0, []string{"sh", "-c", script}, withUserns(runtimeapi.NamespaceMode_POD), rw), pod)
	d.waitLog(t, ctr, "ready", 30*time.Second)
	logs := d.mustCrictl(t, "logs", ctr)
	for _, want := range []string{"host-file: 0:0", "wrote"} {
		if !strings.Contains(logs, want) {
			t.Errorf("container log lacks %q:\n%s", want, logs)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dir, "from-ctr"), &st); err != nil {
		t.Fatalf("the file the container wrote: %v", err)
	}
	if st.Uid != 0 || st.Gid != 0 {
		t.Errorf("the file the container's root wrote is owned by %d:%d on the host, want 0:0 (idmapped)", st.Uid, st.Gid)
	}
	d.removeCtr(t, ctr)
	d.mustCrictl(t, "stopp", podID)
	d.mustCrictl(t, "rmp", podID)
	d.stopClean(t)
}
