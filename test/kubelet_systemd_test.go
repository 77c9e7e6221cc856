package test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKubeletSystemdDriver: with the systemd driver (CRIJOURNAL_E2E_CGROUP_MANAGER=systemd,
// which TestSystemdDriver sets inside the systemd it boots), a real kubelet with
// cgroupDriver: systemd and its QoS hierarchy (cgroupsPerQOS) runs a static pod on the
// daemon, as nodes run: the kubelet makes kubepods.slice and the pod's slice
// kubepods-besteffort-pod<UID>.slice and sends that as the sandbox's cgroup_parent; the
// container runs in the transient scope crijournal-<ID>.scope in it, delegated. Once the
// manifest is removed, no crijournal scope is left in the kubelet's slices.
func TestKubeletSystemdDriver(t *testing.T) {
	if !e2eSystemd() {
		t.Skipf("runs with the systemd driver (%s=systemd; TestSystemdDriver)", envE2ECgroupManager)
	}
	t.Parallel() // it mostly waits (the kubelet removes a sandbox at its minutely garbage collection)
	d, _ := startContainerDaemon(t, daemonOptions{})
	// After the kubelet's cleanup (registered later, run first): its QoS slices, which a
	// kubelet never removes, go with the test.
	t.Cleanup(func() { stopNodeSlice(t.Logf, "kubepods.slice"); removeSliceDirs(t.Logf, "kubepods.slice") })
	k := startKubelet(t, d, kubeletOptions{config: map[string]any{
		"cgroupDriver":  "systemd",
		"cgroupsPerQOS": true,
	}})

	k.writeStaticPod(t, "web", staticPod("web", kubeletContainer{name: "sleeper"}))
	k.waitPodRunning(t, "web", time.Minute)
	p, _ := k.pod(t, "web")
	ctrID := p.Status.ContainerStatuses[0].runtimeID()

	// The kubelet's pod slice (systemd escapes the UID's dashes as underscores) and the
	// container's scope in it.
	podSlice := "kubepods-besteffort-pod" + strings.ReplaceAll(p.Metadata.UID, "-", "_") + ".slice"
	scope := "crijournal-" + ctrID + ".scope"
	want := "/kubepods.slice/kubepods-besteffort.slice/" + podSlice + "/" + scope
	if cg := d.memoryCgroup(t, ctrID); cg != want {
		t.Errorf("the container's memory cgroup is %s, want %s", cg, want)
	}
	for prop, want := range map[string]string{"Slice": podSlice, "ActiveState": "active", "Delegate": "yes"} {
		if got := unitProperty(t, scope, prop); got != want {
			t.Errorf("systemctl show -P %s %s: %q, want %q", prop, scope, got, want)
		}
	}

	k.removeStaticPod(t, "web")
	k.waitPodGone(t, "web", 30*time.Second)
	// The kubelet removes the exited container at once, or else at its next container
	// garbage collection (every minute), with the sandbox.
	d.waitNoContainers(t, 90*time.Second)
	d.waitNoPods(t, 90*time.Second)
	d.requireNoContainerTrace(t, "after the kubelet removed the static pod")
	if left := kubeletScopes(t); len(left) > 0 {
		t.Errorf("units left in the kubelet's slices after it removed the pod: %v", left)
	}
	for _, h := range cgroupHierarchies() {
		if dirs, _ := filepath.Glob(filepath.Join(h, "kubepods.slice/kubepods-besteffort.slice", podSlice, "crijournal-*")); len(dirs) > 0 {
			t.Errorf("cgroups left: %v", dirs)
		}
	}
	k.stop(t)
	d.stopClean(t)
}

// kubeletScopes lists crijournal's units in the kubelet's slices (kubepods*.slice). The
// tests that run beside this one in the same systemd have units of their own daemons,
// in other slices, which come and go meanwhile.
func kubeletScopes(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("systemctl", "list-units", "--all", "--plain", "--no-legend", "--no-pager", "crijournal-*").CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl list-units: %v\n%s", err, out)
	}
	var in []string
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if slice := unitProperty(t, fields[0], "Slice"); strings.HasPrefix(slice, "kubepods") {
			in = append(in, fields[0]+" in "+slice)
		}
	}
	return in
}

// unitProperty is a property of a systemd unit (systemctl show -P).
func unitProperty(t *testing.T, unit, prop string) string {
	t.Helper()
	out, err := exec.Command("systemctl", "show", "-P", prop, unit).CombinedOutput()
	if err != nil {
		t.Fatalf("systemctl show -P %s %s: %v\n%s", prop, unit, err, out)
	}
	return strings.TrimSpace(string(out))
}

// removeSliceDirs removes what is left of a stopped slice's cgroups (the v1 hierarchies
// systemd does not manage keep them), deepest first.
func removeSliceDirs(logf func(string, ...any), slice string) {
	dirs := cgroupDirs("/" + slice)
	for _, h := range cgroupHierarchies() {
		dirs = append(dirs, filepath.Join(h, slice))
	}
	for _, dir := range dirs {
		// EROFS: not a hierarchy (a booted systemd's read-only tmpfs has empty
		// directories of the controllers it did not mount).
		if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT && err != syscall.EROFS {
			logf("cleanup: rmdir %s: %v", dir, err)
		}
	}
}
