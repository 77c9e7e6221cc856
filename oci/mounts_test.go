package oci

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/google/go-cmp/cmp"
)

func TestCreateHostPaths(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing")
	if err := os.Mkdir(existing, 0o700); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(dir, "dangling")
	if err := os.Symlink(filepath.Join(dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "a", "b")
	for _, tc := range []struct {
		name    string
		mounts  []*runtimeapi.Mount
		created []string
		refused string
	}{
		{name: "missing, with its parent", mounts: []*runtimeapi.Mount{
			{ContainerPath: "/x", HostPath: existing},
			{ContainerPath: "/y", HostPath: missing},
			{ContainerPath: "/z", Image: &runtimeapi.ImageSpec{Image: "i"}, Readonly: true},
		}, created: []string{missing}},
		{name: "a dangling link is not followed", mounts: []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: dangling}}},
		{name: "relative", mounts: []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: "rel/dir"}}, refused: "not absolute and clean"},
		{name: "dotdot", mounts: []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: dir + "/c/../d"}}, refused: "not absolute and clean"},
		{name: "trailing slash", mounts: []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: dir + "/e/"}}, refused: "not absolute and clean"},
		{name: "under a file (not a missing path: left to Spec)", mounts: []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: filepath.Join(dir, "file", "sub")}}},
		{name: "missing under an unwritable place", mounts: []*runtimeapi.Mount{{ContainerPath: "/x", HostPath: "/proc/crijournal-test"}},
			refused: "creating missing host path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeFile(t, filepath.Join(dir, "file"), "")
			created, err := CreateHostPaths(&runtimeapi.ContainerConfig{Mounts: tc.mounts})
			if tc.refused != "" {
				requireInvalidSpec(t, err, tc.refused)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.created, created); diff != "" {
				t.Errorf("created (-want +got):\n%s", diff)
			}
			for _, p := range tc.created {
				st, err := os.Stat(p)
				if err != nil || !st.IsDir() || st.Mode().Perm()&^HostPathMode != 0 || st.Mode().Perm()&0o700 != 0o700 {
					t.Errorf("%s: %v, %v; want a directory with mode %o", p, st.Mode(), err, HostPathMode)
				}
			}
		})
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
	if st, _ := os.Stat(existing); st.Mode().Perm() != 0o700 {
		t.Errorf("an existing host path changed mode: %v", st.Mode())
	}
}

// TestCPUThermalThrottle: each possible CPU's thermal_throttle directory that exists, as
// the container sees it; none when the possible list cannot be read.
func TestCPUThermalThrottle(t *testing.T) {
	for _, tc := range []struct {
		name     string
		possible string // "" for no possible file
		dirs     []string
		want     []string
	}{
		{name: "some CPUs have one", possible: "0-3\n", dirs: []string{"cpu0/thermal_throttle", "cpu2/thermal_throttle", "cpu1/cpufreq"},
			want: []string{"/sys/devices/system/cpu/cpu0/thermal_throttle", "/sys/devices/system/cpu/cpu2/thermal_throttle"}},
		{name: "only possible CPUs", possible: "0,4-5\n", dirs: []string{"cpu4/thermal_throttle", "cpu7/thermal_throttle"},
			want: []string{"/sys/devices/system/cpu/cpu4/thermal_throttle"}},
		{name: "none has one (a virtual machine)", possible: "0-1\n", dirs: []string{"cpu0", "cpu1"}},
		{name: "no possible list", dirs: []string{"cpu0/thermal_throttle"}},
		{name: "a possible list that is not one", possible: "zero\n", dirs: []string{"cpu0/thermal_throttle"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.possible != "" {
				writeFile(t, filepath.Join(dir, "possible"), tc.possible)
			}
			for _, d := range tc.dirs {
				if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if got := cpuThermalThrottle(dir); !slices.Equal(got, tc.want) {
				t.Fatalf("cpuThermalThrottle = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestThermalThrottlePathsOfThisHost: the daemon's list is this host's thermal_throttle
// directories, every one of them.
func TestThermalThrottlePathsOfThisHost(t *testing.T) {
	present, err := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle")
	if err != nil {
		t.Fatal(err)
	}
	got := slices.Clone(thermalThrottlePaths())
	slices.Sort(got)
	slices.Sort(present)
	if !slices.Equal(got, present) {
		t.Fatalf("thermalThrottlePaths = %q, want this host's %q", got, present)
	}
	h, err := readHost()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h.ThermalThrottle, thermalThrottlePaths()) {
		t.Fatalf("readHost's thermal_throttle paths %q, want %q", h.ThermalThrottle, thermalThrottlePaths())
	}
}
