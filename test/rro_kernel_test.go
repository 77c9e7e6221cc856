package test

import (
	"fmt"
	"os/exec"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestRecursiveReadOnlyAdvertised is issue 51's item 7 (recursive read-only mounts): the
// handlers advertise recursive_read_only_mounts, which the kubelet reads to allow
// recursiveReadOnly: Enabled (k8s.io/kubernetes pkg/kubelet/kuberuntime/helpers.go,
// SupportsRecursiveReadOnlyMounts), only where the runtime lists "rro" and the kernel
// applies it (mount_setattr, Linux 5.12), as containerd checks the kernel's version.
func TestRecursiveReadOnlyAdvertised(t *testing.T) {
	t.Parallel()
	runc, err := nodeRunc()
	if err != nil {
		t.Fatalf("no runc: %v", err)
	}
	out, err := exec.Command(runc, "features").Output()
	if err != nil {
		t.Fatalf("runc features: %v", err)
	}
	var runcFeatures struct {
		MountOptions []string `json:"mountOptions"`
	}
	mustDecode(t, "runc features", out, &runcFeatures)
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	want := slices.Contains(runcFeatures.MountOptions, "rro") && (major > 5 || major == 5 && minor >= 12)

	d := startDaemon(t, daemonOptions{})
	st, err := d.cri(t).Status(t.Context(), &runtimeapi.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GetRuntimeHandlers()) == 0 {
		t.Fatalf("Status lists no runtime handlers")
	}
	for _, h := range st.GetRuntimeHandlers() {
		if got := h.GetFeatures().GetRecursiveReadOnlyMounts(); got != want {
			t.Errorf("handler %q advertises recursive read-only mounts %v; runc lists rro: %v, kernel %s: want %v",
				h.GetName(), got, slices.Contains(runcFeatures.MountOptions, "rro"), release, want)
		}
	}
	d.stop(t)
}
