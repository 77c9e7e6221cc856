package test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/testenv"
)

// A pod's files: the daemon writes each pod's resolv.conf (from its dns_config, or a
// copy of the host's) and hostname file and mounts its own /dev/shm (a tmpfs of 64
// MiB) under <run_root>/sandboxes/<id>/, and every container of the pod bind-mounts
// them. Pods on the host's network also get the host's /etc/hosts, read-only; pods
// with ipc NODE the host's /dev/shm. Removal leaves nothing.

// TestPodFiles: a pod with a DNS configuration and a hostname; its two containers see
// the resolv.conf rendered from it and the hostname, and share one /dev/shm, a tmpfs of
// 64 MiB (a file written in one is read in the other). A container created after a
// restart of the daemon gets the same files. The stop unmounts the pod's /dev/shm; the
// removal leaves no file, directory or mount.
func TestPodFiles(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.editedPod(t, "files", func(cfg map[string]any) {
		cfg["hostname"] = "files-host"
		cfg["dns_config"] = map[string]any{
			"servers":  []string{"10.10.10.10", "fd00::53"},
			"searches": []string{"svc.e2e.example", "e2e.example"},
			"options":  []string{"ndots:5", "edns0"},
		}
	})
	podID := d.mustRunp(t, pod)
	dir := filepath.Join(d.podFilesDir(), podID)
	if !testenv.IsMountPoint(t, filepath.Join(dir, "shm")) {
		t.Fatalf("the pod's /dev/shm %s is not mounted", filepath.Join(dir, "shm"))
	}
	one := d.run(t, podID, containerConfig(t, "one", 0, sleeper), pod)
	two := d.run(t, podID, containerConfig(t, "two", 0, sleeper), pod)

	const wantResolv = "search svc.e2e.example e2e.example\nnameserver 10.10.10.10\nnameserver fd00::53\noptions ndots:5 edns0"
	for _, id := range []string{one, two} {
		if got := d.execSync(t, id, "cat", "/etc/resolv.conf"); got != wantResolv {
			t.Errorf("/etc/resolv.conf of container %s:\n%s\nwant:\n%s", id, got, wantResolv)
		}
		if got := d.execSync(t, id, "cat", "/etc/hostname"); got != "files-host" {
			t.Errorf("/etc/hostname of container %s: %q, want the pod's hostname", id, got)
		}
		// /proc/mounts: "shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0".
		m := mountLine(d.execSync(t, id, "cat", "/proc/mounts"), "/dev/shm")
		if f := strings.Fields(m); len(f) < 4 || f[2] != "tmpfs" || !strings.Contains(f[3], "size=65536k") ||
			!strings.Contains(f[3], "nosuid") || !strings.Contains(f[3], "nodev") || !strings.Contains(f[3], "noexec") {
			t.Errorf("/dev/shm of container %s: %q, want a tmpfs of 64 MiB, nosuid, nodev, noexec", id, m)
		}
	}
	d.execSync(t, one, "sh", "-c", "echo shared-by-the-pod > /dev/shm/note")
	if got := d.execSync(t, two, "cat", "/dev/shm/note"); got != "shared-by-the-pod" {
		t.Errorf("container two read %q from /dev/shm/note written by container one: the pod's /dev/shm is not shared", got)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "shm", "note")); err != nil || strings.TrimSpace(string(b)) != "shared-by-the-pod" {
		t.Errorf("the pod's shm on the node holds %q, %v", b, err)
	}

	// The files outlive a restart of the daemon: a new container gets them.
	d.restart(t)
	three := d.run(t, podID, containerConfig(t, "three", 0, sleeper), pod)
	if got := d.execSync(t, three, "cat", "/etc/resolv.conf"); got != wantResolv {
		t.Errorf("/etc/resolv.conf of a container created after a restart:\n%s", got)
	}
	if got := d.execSync(t, three, "cat", "/dev/shm/note"); got != "shared-by-the-pod" {
		t.Errorf("a container created after a restart read %q from the pod's /dev/shm", got)
	}

	d.mustCrictl(t, "stopp", podID)
	if testenv.IsMountPoint(t, filepath.Join(dir, "shm")) {
		t.Errorf("the pod's /dev/shm is still mounted after stopp")
	}
	d.mustCrictl(t, "rmp", podID)
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the pod's directory %s is left after rmp: %v", dir, err)
	}
	d.assertNoLeaks(t)
	d.stopClean(t)
}

// TestPodFilesHost: a pod on the host's network with ipc NODE and no DNS
// configuration gets a copy of the host's resolv.conf, the host's hostname (it names
// none), the host's /etc/hosts, read-only, and the host's /dev/shm; no tmpfs is mounted
// for it.
func TestPodFilesHost(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.editedPod(t, "hostfiles", func(cfg map[string]any) {
		delete(cfg, "hostname")
		ns := namespaceOptions(cfg)
		ns["network"] = int(runtimeapi.NamespaceMode_NODE)
		ns["ipc"] = int(runtimeapi.NamespaceMode_NODE)
	})
	podID := d.mustRunp(t, pod)
	if _, err := os.Stat(filepath.Join(d.podFilesDir(), podID, "shm")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a pod with ipc NODE got a shm of its own: %v", err)
	}
	id := d.run(t, podID, containerConfig(t, "c", 0, sleeper), pod)

	for file, want := range map[string]string{"/etc/resolv.conf": hostFile(t, "/etc/resolv.conf"), "/etc/hosts": hostFile(t, "/etc/hosts")} {
		if got := d.execSync(t, id, "cat", file); got != want {
			t.Errorf("%s of a host-network container:\n%s\nwant the host's:\n%s", file, got, want)
		}
	}
	// The host's /etc/hosts is the node's, read-only in the container (issue 40): opening
	// it for writing fails. (": >>" opens it to append and writes nothing, so that a
	// daemon without the fix does not change the node's file.)
	if m := mountLine(d.execSync(t, id, "cat", "/proc/mounts"), "/etc/hosts"); !slices.Contains(strings.Split(fieldOf(m, 3), ","), "ro") {
		t.Errorf("/etc/hosts of a host-network container is mounted %q, want read-only", m)
	}
	if _, stderr, err := d.crictl(t, "exec", "--sync", id, "sh", "-c", ": >> /etc/hosts"); err == nil || !strings.Contains(stderr, "Read-only file system") {
		t.Errorf("a host-network container opened the host's /etc/hosts for writing: err %v, stderr %q; want a read-only file system", err, stderr)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	if got := d.execSync(t, id, "cat", "/etc/hostname"); got != host {
		t.Errorf("/etc/hostname of a host-network container: %q, want the host's %q", got, host)
	}
	// A file of the test's own in the host's /dev/shm is seen by the container.
	note := "cj-podfiles-" + randomHex(t, 8)
	writeFile(t, filepath.Join("/dev/shm", note), "from-the-host\n", 0o644)
	t.Cleanup(func() { _ = os.Remove(filepath.Join("/dev/shm", note)) })
	if got := d.execSync(t, id, "cat", "/dev/shm/"+note); got != "from-the-host" {
		t.Errorf("a container of a pod with ipc NODE read %q from the host's /dev/shm", got)
	}

	d.removePod(t, podID)
	if _, err := os.Stat(filepath.Join(d.podFilesDir(), podID)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the pod's directory is left after rmp: %v", err)
	}
	if _, err := os.Stat("/dev/shm"); err != nil {
		t.Errorf("the host's /dev/shm after the removal of a pod with ipc NODE: %v", err)
	}
	d.stopClean(t)
}

// hostFile returns a file of the host, without its trailing white space (as execSync
// returns a container's).
func hostFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// fieldOf returns the i-th white-space separated field of line ("" when it has fewer).
func fieldOf(line string, i int) string {
	if f := strings.Fields(line); i < len(f) {
		return f[i]
	}
	return ""
}

// mountLine returns the line of a /proc/mounts text whose mount point is dir.
func mountLine(mounts, dir string) string {
	for line := range strings.Lines(mounts) {
		if f := strings.Fields(line); len(f) > 1 && f[1] == dir {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
