package oci

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/opencontainers/cgroups"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestPodResources(t *testing.T) {
	type lcr = runtimeapi.LinuxContainerResources
	for _, tc := range []struct {
		name                string
		overhead, resources *lcr
		want                *cgroups.Resources
		invalid             bool
	}{
		{name: "neither", invalid: true},
		{name: "negative shares", resources: &lcr{CpuShares: -2}, invalid: true},
		{name: "negative memory", overhead: &lcr{MemoryLimitInBytes: -1}, invalid: true},
		{name: "period under 1 ms", resources: &lcr{CpuPeriod: 999, CpuQuota: 50000}, invalid: true},
		{name: "period over 1 s", resources: &lcr{CpuPeriod: 1000001, CpuQuota: 50000}, invalid: true},
		{name: "quota under 1 ms", resources: &lcr{CpuPeriod: 100000, CpuQuota: 999}, invalid: true},
		{name: "memory overflows", overhead: &lcr{MemoryLimitInBytes: 1 << 62}, resources: &lcr{MemoryLimitInBytes: 1 << 62}, invalid: true},
		{
			// The kubelet's figures for a pod of 500m CPU and 128 MiB, 250m and 64 MiB of overhead:
			// 750m is 768 shares, 75000 µs of 100000.
			name:      "kubelet pod with overhead",
			overhead:  &lcr{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 25000, MemoryLimitInBytes: 64 << 20},
			resources: &lcr{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20},
			want:      &cgroups.Resources{SkipDevices: true, CpuShares: 768, CpuPeriod: 100000, CpuQuota: 75000, Memory: 192 << 20},
		},
		{
			name:      "overhead quota over another period",
			overhead:  &lcr{CpuPeriod: 50000, CpuQuota: 10000},
			resources: &lcr{CpuPeriod: 100000, CpuQuota: 50000},
			want:      &cgroups.Resources{SkipDevices: true, CpuPeriod: 100000, CpuQuota: 70000},
		},
		{
			// A container without a CPU limit: the kubelet sends the pod's unlimited quota
			// (-1) less the overhead's.
			name:      "unlimited quota",
			overhead:  &lcr{CpuShares: 256, CpuPeriod: 100000, CpuQuota: 25000},
			resources: &lcr{CpuShares: 2, CpuPeriod: 100000, CpuQuota: -1 - 25000},
			want:      &cgroups.Resources{SkipDevices: true, CpuShares: 258, CpuPeriod: 100000, CpuQuota: -1},
		},
		{
			name:      "best effort: least shares, no limits",
			overhead:  &lcr{},
			resources: &lcr{CpuShares: 2},
			want:      &cgroups.Resources{SkipDevices: true, CpuShares: 2},
		},
		{
			name:      "only resources",
			resources: &lcr{MemoryLimitInBytes: 256 << 20, CpuShares: 1024},
			want:      &cgroups.Resources{SkipDevices: true, CpuShares: 1024, Memory: 256 << 20},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodResources(tc.overhead, tc.resources)
			if tc.invalid {
				if !errors.Is(err, ErrInvalidSpec) {
					t.Fatalf("PodResources = %+v, %v; want ErrInvalidSpec", got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("PodResources = %+v\nwant %+v", *got, *tc.want)
			}
		})
	}
}

func TestSetPodResourcesNeedsAPodCgroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		parent  string
		systemd bool
		want    error
	}{
		{"no cgroup_parent", "", false, ErrNoPodCgroup},
		{"no cgroup_parent, systemd", "", true, ErrNoPodCgroup},
		{"relative", "kubepods/pod1", false, ErrInvalidSpec},
		{"dot dot", "/kubepods/../pod1", false, ErrInvalidSpec},
		{"not a slice, systemd", "/kubepods/pod1", true, ErrInvalidSpec},
		{"missing cgroup", "/crijournal-test-missing-pod-cgroup", false, ErrNoPodCgroup},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := SetPodResources(t.Context(), tc.parent, tc.systemd, &cgroups.Resources{SkipDevices: true, CpuShares: 512})
			if !errors.Is(err, tc.want) {
				t.Fatalf("SetPodResources(%q) = %v, want %v", tc.parent, err, tc.want)
			}
		})
	}
}

func TestPodPSI(t *testing.T) {
	root := t.TempDir()
	pod := filepath.Join(root, "kubepods", "pod1")
	if err := os.MkdirAll(pod, 0o755); err != nil {
		t.Fatal(err)
	}
	for file, content := range map[string]string{
		"cpu.pressure":    "some avg10=1.50 avg60=0.50 avg300=0.10 total=2000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"memory.pressure": "some avg10=0.00 avg60=0.00 avg300=0.00 total=30\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=10\n",
	} {
		if err := os.WriteFile(filepath.Join(pod, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := podPSI(root, "/kubepods/pod1")
	if err != nil {
		t.Fatal(err)
	}
	if got.CPU == nil || got.CPU.Some.Total != 2000 || got.CPU.Some.Avg10 != 1.5 || got.Memory == nil || got.Memory.Full.Total != 10 || got.IO != nil {
		t.Fatalf("podPSI = cpu %+v, memory %+v, io %+v; want the files' figures, no I/O", got.CPU, got.Memory, got.IO)
	}
	if got, err := podPSI(root, "/kubepods/missing"); err != nil || got.CPU != nil {
		t.Fatalf("podPSI of a missing cgroup = %+v, %v; want nothing", got, err)
	}
	if _, err := podPSI(root, "/kubepods/../etc"); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("podPSI of a path with .. = %v, want ErrInvalidSpec", err)
	}
}

// TestWithCPUWeight: on cgroup v2 the pod's CPU shares become the weight runc and the
// kubelet would write (512 -> 59, 1024 -> 100); on v1, or with a weight already set or no
// shares, the resources go as they are; the caller's resources are not changed.
func TestWithCPUWeight(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      cgroups.Resources
		unified bool
		want    uint64
	}{
		{"v2, 512 shares", cgroups.Resources{CpuShares: 512}, true, 59},
		{"v2, 1024 shares", cgroups.Resources{CpuShares: 1024}, true, 100},
		{"v2, 2 shares", cgroups.Resources{CpuShares: 2}, true, 1},
		{"v2, weight given", cgroups.Resources{CpuShares: 512, CpuWeight: 7}, true, 7},
		{"v2, no shares", cgroups.Resources{Memory: 1 << 20}, true, 0},
		{"v1", cgroups.Resources{CpuShares: 512}, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.in
			got := withCPUWeight(&in, tc.unified)
			if got.CpuWeight != tc.want || got.CpuShares != tc.in.CpuShares {
				t.Errorf("withCPUWeight = weight %d, shares %d; want weight %d, shares %d", got.CpuWeight, got.CpuShares, tc.want, tc.in.CpuShares)
			}
			if in.CpuWeight != tc.in.CpuWeight || in.CpuShares != tc.in.CpuShares {
				t.Errorf("withCPUWeight changed its argument: %+v, was %+v", in, tc.in)
			}
		})
	}
}
