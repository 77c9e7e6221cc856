package oci

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOnKernel: recursive read-only mounts are advertised only where the runtime lists
// "rro" and the kernel has mount_setattr (5.12); the other features stay as the runtime
// says them.
func TestOnKernel(t *testing.T) {
	for _, tc := range []struct {
		name       string
		f          Features
		hasSetattr bool
		want       Features
	}{
		{"rro on 5.12+", Features{RecursiveReadOnlyMounts: true, UserNamespaces: true}, true, Features{RecursiveReadOnlyMounts: true, UserNamespaces: true}},
		{"rro before 5.12", Features{RecursiveReadOnlyMounts: true, UserNamespaces: true}, false, Features{UserNamespaces: true}},
		{"no rro on 5.12+", Features{}, true, Features{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := onKernel(tc.f, tc.hasSetattr); got != tc.want {
				t.Errorf("onKernel(%+v, %v) = %+v, want %+v", tc.f, tc.hasSetattr, got, tc.want)
			}
		})
	}
}

// TestKernelMountSetattr: on a kernel of 5.12 or later the probe finds mount_setattr.
func TestKernelMountSetattr(t *testing.T) {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		t.Fatal(err)
	}
	release := unix.ByteSliceToString(uts.Release[:])
	var major, minor int
	if _, err := fmt.Sscanf(release, "%d.%d", &major, &minor); err != nil {
		t.Fatalf("kernel release %q: %v", release, err)
	}
	if major < 5 || major == 5 && minor < 12 {
		if kernelMountSetattr() {
			t.Errorf("kernel %s (before 5.12) has mount_setattr", release)
		}
		return
	}
	if !kernelMountSetattr() {
		t.Errorf("kernel %s (5.12 or later): the probe finds no mount_setattr", release)
	}
}
