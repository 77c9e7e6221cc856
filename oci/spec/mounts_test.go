package spec

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// mountAt returns the one mount of s at dst.
func mountAt(t *testing.T, s *specs.Spec, dst string) specs.Mount {
	t.Helper()
	var found []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == dst {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d mounts at %s, want 1: %+v", len(found), dst, s.Mounts)
	}
	return found[0]
}

// specRefused builds in's spec and requires ErrInvalidSpec with an error that contains
// want.
func specRefused(t *testing.T, in SpecInput, want string) {
	t.Helper()
	_, err := Build(t.Context(), in, testHost())
	requireInvalidSpec(t, err, want)
}

// TestSpecSandboxFiles is issue 40's: containers of a pod on the host's network got the
// node's /etc/hosts read-write. The node's own files are mounted read-only; a pod's own
// copy is writable unless the root filesystem is read-only.
func TestSpecSandboxFiles(t *testing.T) {
	if _, err := os.Stat("/etc/hosts"); err != nil {
		t.Fatalf("this test needs the host's /etc/hosts: %v", err)
	}
	podDir := t.TempDir()
	writeFile(t, filepath.Join(podDir, "hosts"), "127.0.0.1 localhost\n")
	writeFile(t, filepath.Join(podDir, "resolv.conf"), "nameserver 10.0.0.10\n")
	linked := filepath.Join(podDir, "linked-hosts")
	if err := os.Symlink("/etc/hosts", linked); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		edit       func(*SpecInput)
		dst, want  string // the mount at dst and its source's option, "ro" or "rw"
		readonlyFS bool
	}{
		{name: "the host's /etc/hosts", edit: func(in *SpecInput) { in.Hosts = "/etc/hosts" }, dst: "/etc/hosts", want: "ro"},
		{name: "a link to the host's /etc/hosts", edit: func(in *SpecInput) { in.Hosts = linked }, dst: "/etc/hosts", want: "ro"},
		{name: "the pod's own hosts", edit: func(in *SpecInput) { in.Hosts = filepath.Join(podDir, "hosts") }, dst: "/etc/hosts", want: "rw"},
		{name: "the pod's own hosts, read-only rootfs", edit: func(in *SpecInput) { in.Hosts = filepath.Join(podDir, "hosts") },
			readonlyFS: true, dst: "/etc/hosts", want: "ro"},
		{name: "the host's /etc/resolv.conf", edit: func(in *SpecInput) { in.ResolvConf = "/etc/resolv.conf" }, dst: "/etc/resolv.conf", want: "ro"},
		{name: "the pod's own resolv.conf", edit: func(in *SpecInput) { in.ResolvConf = filepath.Join(podDir, "resolv.conf") }, dst: "/etc/resolv.conf", want: "rw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			tc.edit(&in)
			sc(&in).ReadonlyRootfs = tc.readonlyFS
			m := mountAt(t, mustSpec(t, in, testHost()), tc.dst)
			if want := []string{"rbind", "rprivate", tc.want}; !slices.Equal(m.Options, want) {
				t.Fatalf("%s options = %q, want %q", tc.dst, m.Options, want)
			}
		})
	}
}

func TestSpecRecursiveReadOnly(t *testing.T) {
	hostDir := t.TempDir()
	for _, tc := range []struct {
		name      string
		mount     *runtimeapi.Mount
		supported bool   // the runtime lists "rro"
		refused   string // "" when the spec is made; else what the error says
	}{
		{name: "supported", supported: true,
			mount: &runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, Readonly: true, RecursiveReadOnly: true}},
		{name: "runtime without rro", supported: false, refused: `do not list the "rro" mount option`,
			mount: &runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, Readonly: true, RecursiveReadOnly: true}},
		{name: "not read-only", supported: true, refused: "must set readonly",
			mount: &runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, RecursiveReadOnly: true}},
		{name: "host to container", supported: true, refused: "must have propagation PRIVATE",
			mount: &runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, Readonly: true, RecursiveReadOnly: true,
				Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER}},
		{name: "bidirectional", supported: true, refused: "must have propagation PRIVATE",
			mount: &runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, Readonly: true, RecursiveReadOnly: true,
				Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			in.RecursiveReadOnly = tc.supported
			in.Container.Mounts = []*runtimeapi.Mount{tc.mount}
			if tc.refused != "" {
				specRefused(t, in, tc.refused)
				return
			}
			got := mountAt(t, mustSpec(t, in, testHost()), "/data")
			want := specs.Mount{Destination: "/data", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "ro", "rro"}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("mount (-want +got):\n%s", diff)
			}
		})
	}
	// A plain read-only mount on a runtime with rro stays non-recursive.
	in := baseInput(t)
	in.RecursiveReadOnly = true
	in.Container.Mounts = []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: hostDir, Readonly: true}}
	if got := mountAt(t, mustSpec(t, in, testHost()), "/data"); !cmp.Equal(got.Options, []string{"rbind", "rprivate", "ro"}) {
		t.Errorf("read-only mount options %v, want no rro", got.Options)
	}
}

func TestImageVolumes(t *testing.T) {
	img := &runtimeapi.ImageSpec{Image: "sha256:abc"}
	for _, tc := range []struct {
		name    string
		mounts  []*runtimeapi.Mount
		want    []ImageVolume
		refused string
	}{
		{name: "none", mounts: []*runtimeapi.Mount{{ContainerPath: "/data", HostPath: "/tmp"}}},
		{name: "root and sub path", mounts: []*runtimeapi.Mount{
			{ContainerPath: "/a/", Image: img, Readonly: true},
			{ContainerPath: "/data", HostPath: "/tmp"},
			{ContainerPath: "/b", Image: &runtimeapi.ImageSpec{Image: "other"}, Readonly: true, ImageSubPath: "etc/ssl/"},
			{ContainerPath: "/c", Image: img, Readonly: true, ImageSubPath: "./"},
		}, want: []ImageVolume{{"/a", "sha256:abc", ""}, {"/b", "other", "etc/ssl"}, {"/c", "sha256:abc", ""}}},
		{name: "a later mount at the same path wins", mounts: []*runtimeapi.Mount{
			{ContainerPath: "/a", Image: img, Readonly: true},
			{ContainerPath: "/a/", HostPath: "/tmp"},
		}},
		{name: "read-write", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", Image: img}}, refused: "must set readonly"},
		{name: "Host path too", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", Image: img, Readonly: true, HostPath: "/tmp"}},
			refused: "mutually exclusive"},
		{name: "no image", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", Image: &runtimeapi.ImageSpec{}, Readonly: true}},
			refused: "no image"},
		{name: "relative container path", mounts: []*runtimeapi.Mount{{ContainerPath: "a", Image: img, Readonly: true}},
			refused: "must be absolute"},
		{name: "escaping sub path", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", Image: img, Readonly: true, ImageSubPath: "etc/../../x"}},
			refused: `image sub path "etc/../../x" must be relative without ".."`},
		{name: "absolute sub path", mounts: []*runtimeapi.Mount{{ContainerPath: "/a", Image: img, Readonly: true, ImageSubPath: "/etc"}},
			refused: "must be relative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ImageVolumes(&runtimeapi.ContainerConfig{Mounts: tc.mounts})
			if tc.refused != "" {
				requireInvalidSpec(t, err, tc.refused)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ImageVolumes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSpecImageVolume(t *testing.T) {
	// A mounted image: /etc/passwd, /bin/sh, a link inside it and links that point out.
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/passwd"), "root:x:0:0::/root:/bin/sh\n")
	writeFile(t, filepath.Join(root, "bin/sh"), "")
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret"), "x")
	for name, target := range map[string]string{"conf": "etc", "abs": outside, "up": "../../../../../../" + outside, "etclink": "/etc"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	img := &runtimeapi.ImageSpec{Image: "sha256:abc"}
	for _, tc := range []struct {
		name    string
		mount   *runtimeapi.Mount
		roots   map[string]string
		source  string // want; "" when refused
		refused string
	}{
		{name: "root", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true}, source: root},
		{name: "sub path", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true, ImageSubPath: "etc"},
			source: filepath.Join(root, "etc")},
		{name: "a link inside the image", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true, ImageSubPath: "conf/passwd"},
			source: filepath.Join(root, "etc/passwd")},
		{name: "an absolute link resolves in the image", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true, ImageSubPath: "etclink"},
			source: filepath.Join(root, "etc")},
		{name: "a link out of the image stays in it", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true, ImageSubPath: "abs/secret"},
			refused: "does not exist in image"},
		{name: "a relative link up stays in it", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true, ImageSubPath: "up/secret"},
			refused: "does not exist in image"},
		{name: "missing sub path", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true, ImageSubPath: "not-existing"},
			refused: `image sub path "not-existing" does not exist`},
		{name: "dotdot sub path", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true, ImageSubPath: "../etc"},
			refused: "must be relative without"},
		{name: "not mounted", mount: &runtimeapi.Mount{ContainerPath: "/vol", Image: img, Readonly: true}, roots: map[string]string{},
			refused: "is not mounted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			in.Container.Mounts = []*runtimeapi.Mount{tc.mount}
			in.ImageVolumes = map[string]string{"/vol": root}
			if tc.roots != nil {
				in.ImageVolumes = tc.roots
			}
			if tc.refused != "" {
				specRefused(t, in, tc.refused)
				return
			}
			got := mountAt(t, mustSpec(t, in, testHost()), "/vol")
			want := specs.Mount{Destination: "/vol", Type: "bind", Source: tc.source, Options: []string{"rbind", "rprivate", "ro"}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("mount (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSpecMaskedPaths is issue 40's: the default masked paths lacked /proc/interrupts
// and the CPUs' thermal_throttle directories that moby and containerd 2.x mask (a
// thermal side channel). A request's own list replaces the default one.
func TestSpecMaskedPaths(t *testing.T) {
	throttle := []string{"/sys/devices/system/cpu/cpu0/thermal_throttle", "/sys/devices/system/cpu/cpu1/thermal_throttle"}
	h := testHost()
	h.ThermalThrottle = throttle
	for _, tc := range []struct {
		name string
		own  []string // the request's masked_paths
		want []string // paths that must be masked
		not  []string // paths that must not be
	}{
		{name: "default", want: append([]string{
			"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
			"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
			"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
		}, throttle...)},
		{name: "the request's own", own: []string{"/proc/kcore"}, want: []string{"/proc/kcore"}, not: append([]string{"/proc/interrupts"}, throttle...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			sc(&in).MaskedPaths = tc.own
			got := mustSpec(t, in, h).Linux.MaskedPaths
			for _, p := range tc.want {
				if !slices.Contains(got, p) {
					t.Errorf("%s is not masked: %q", p, got)
				}
			}
			for _, p := range tc.not {
				if slices.Contains(got, p) {
					t.Errorf("%s is masked: %q", p, got)
				}
			}
		})
	}
}

// TestSpecProcMount is issue 51's item 1: the pod API's procMount as the kubelet encodes
// it (k8s.io/kubernetes pkg/securitycontext/util.go, ConvertToRuntimeMaskedPaths and
// ConvertToRuntimeReadonlyPaths): Default sends the default lists, Unmasked sends both
// empty, which the API allows only with hostUsers: false (pkg/apis/core/validation:
// "`hostUsers` must be false to use `Unmasked`"). In a pod's own user namespace the empty
// lists are honoured, nothing masked or read-only; outside one (where the kubelet never
// sends them empty) the defaults stay; the kubelet's Default lists are taken as sent
// everywhere; privileged containers get none.
func TestSpecProcMount(t *testing.T) {
	// The kubelet's Default lists (its defaultMaskedPaths before the thermal_throttle
	// directories it adds, and defaultReadonlyPaths).
	kubeletMasked := []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys",
		"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap"}
	kubeletReadonly := []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	throttle := []string{"/sys/devices/system/cpu/cpu0/thermal_throttle"}
	h := testHost()
	h.ThermalThrottle = throttle
	userns := map[string]string{"user": "/run/ns/user/pod", "net": "/run/ns/net/pod"}
	for _, tc := range []struct {
		name             string
		namespaces       map[string]string
		privileged       bool
		masked, readonly []string // the request's lists
		wantMasked       []string
		wantReadonly     []string
	}{
		{name: "Default in a user namespace", namespaces: userns, masked: kubeletMasked, readonly: kubeletReadonly,
			wantMasked: kubeletMasked, wantReadonly: kubeletReadonly},
		{name: "Unmasked in a user namespace", namespaces: userns},
		{name: "Default in the node's user namespace", masked: kubeletMasked, readonly: kubeletReadonly,
			wantMasked: kubeletMasked, wantReadonly: kubeletReadonly},
		{name: "empty lists in the node's user namespace keep the defaults",
			wantMasked: append(slices.Clone(defaultMaskedPaths), throttle...), wantReadonly: defaultReadonlyPaths},
		{name: "one list empty in the node's user namespace", masked: []string{"/proc/kcore"},
			wantMasked: []string{"/proc/kcore"}, wantReadonly: defaultReadonlyPaths},
		{name: "privileged Unmasked in a user namespace", namespaces: userns, privileged: true},
		{name: "privileged Default", privileged: true, masked: kubeletMasked, readonly: kubeletReadonly},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			in.Namespaces = tc.namespaces
			s := sc(&in)
			s.Privileged = tc.privileged
			s.MaskedPaths, s.ReadonlyPaths = tc.masked, tc.readonly
			got := mustSpec(t, in, h).Linux
			if !slices.Equal(got.MaskedPaths, tc.wantMasked) {
				t.Errorf("masked paths %q, want %q", got.MaskedPaths, tc.wantMasked)
			}
			if !slices.Equal(got.ReadonlyPaths, tc.wantReadonly) {
				t.Errorf("read-only paths %q, want %q", got.ReadonlyPaths, tc.wantReadonly)
			}
		})
	}
}

// TestSpecSysUsernsHostNetwork is issue 51's item 3: a container in its pod's own user
// namespace on the node's network may not mount a sysfs (its user namespace does not own
// the network namespace), so its /sys is the node's, bound recursively, read-only
// unless privileged, as containerd (PR 12518: "use bind mounts for /sys
// when a pod employs both hostNetwork and user namespace") and CRI-O give it; every
// other container gets a new sysfs.
func TestSpecSysUsernsHostNetwork(t *testing.T) {
	for _, tc := range []struct {
		name       string
		namespaces map[string]string
		privileged bool
		want       specs.Mount
	}{
		{name: "user namespace, node's network", namespaces: map[string]string{"user": "/run/ns/user/p", "ipc": "/run/ns/ipc/p"},
			want: specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}}},
		{name: "privileged, user namespace, node's network", namespaces: map[string]string{"user": "/run/ns/user/p"}, privileged: true,
			want: specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "rw"}}},
		{name: "user namespace, pod network", namespaces: map[string]string{"user": "/run/ns/user/p", "net": "/run/ns/net/p"},
			want: specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}}},
		{name: "node's user namespace, node's network",
			want: specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			in.Namespaces = tc.namespaces
			sc(&in).Privileged = tc.privileged
			var got []specs.Mount
			for _, m := range mustSpec(t, in, testHost()).Mounts {
				if m.Destination == "/sys" {
					got = append(got, m)
				}
			}
			if diff := cmp.Diff([]specs.Mount{tc.want}, got); diff != "" {
				t.Errorf("/sys (-want +got):\n%s", diff)
			}
		})
	}
}
