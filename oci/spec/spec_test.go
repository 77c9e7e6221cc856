package spec

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// testHost is a daemon without CAP_SYS_RESOURCE (as in a container that lacks it),
// oom_score_adj 0, cgroup v1 without swap or hugetlb.
func testHost() Host {
	return Host{Bounding: slices.DeleteFunc(slices.Clone(CapNames), func(c string) bool { return c == "CAP_SYS_RESOURCE" })}
}

func baseInput(t *testing.T) SpecInput {
	return SpecInput{
		ID:        "c1",
		Container: &runtimeapi.ContainerConfig{Command: []string{"sh"}},
		Sandbox:   &runtimeapi.PodSandboxConfig{Hostname: "pod"},
		Rootfs:    specRootfs(t),
	}
}

func sc(in *SpecInput) *runtimeapi.LinuxContainerSecurityContext {
	if in.Container.Linux == nil {
		in.Container.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if in.Container.Linux.SecurityContext == nil {
		in.Container.Linux.SecurityContext = &runtimeapi.LinuxContainerSecurityContext{}
	}
	return in.Container.Linux.SecurityContext
}

func resourcesOf(in *SpecInput) *runtimeapi.LinuxContainerResources {
	if in.Container.Linux == nil {
		in.Container.Linux = &runtimeapi.LinuxContainerConfig{}
	}
	if in.Container.Linux.Resources == nil {
		in.Container.Linux.Resources = &runtimeapi.LinuxContainerResources{}
	}
	return in.Container.Linux.Resources
}

func mustSpec(t *testing.T, in SpecInput, h Host) *specs.Spec {
	t.Helper()
	s, err := Build(t.Context(), in, h)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return s
}

// specOrInvalid builds in's spec on h. When invalid, it requires the refusal
// (ErrInvalidSpec) and returns nil; otherwise it requires the spec.
func specOrInvalid(t *testing.T, in SpecInput, h Host, invalid bool) *specs.Spec {
	t.Helper()
	if !invalid {
		return mustSpec(t, in, h)
	}
	if _, err := Build(t.Context(), in, h); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("err = %v, want ErrInvalidSpec", err)
	}
	return nil
}

func TestSpecArgs(t *testing.T) {
	img := ImageConfig{Entrypoint: []string{"/ep"}, Cmd: []string{"cmd1", "cmd2"}}
	for _, tc := range []struct {
		name          string
		command, args []string
		img           ImageConfig
		want          []string
	}{
		{"image entrypoint and cmd", nil, nil, img, []string{"/ep", "cmd1", "cmd2"}},
		{"args replace cmd", nil, []string{"a"}, img, []string{"/ep", "a"}},
		{"command replaces entrypoint and drops cmd", []string{"/c"}, nil, img, []string{"/c"}},
		{"command and args", []string{"/c"}, []string{"a", "b"}, img, []string{"/c", "a", "b"}},
		{"empty entrypoint means none", nil, nil, ImageConfig{Entrypoint: []string{""}, Cmd: []string{"x"}}, []string{"x"}},
		{"cmd only", nil, nil, ImageConfig{Cmd: []string{"x"}}, []string{"x"}},
		{"args only", nil, []string{"y"}, ImageConfig{}, []string{"y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			in.Container.Command, in.Container.Args, in.Image = tc.command, tc.args, tc.img
			if got := mustSpec(t, in, testHost()).Process.Args; !slices.Equal(got, tc.want) {
				t.Fatalf("args = %q, want %q", got, tc.want)
			}
		})
	}
	in := baseInput(t)
	in.Container.Command = nil
	if _, err := Build(t.Context(), in, testHost()); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("no command anywhere: %v, want ErrInvalidSpec", err)
	}
}

func TestSpecMounts(t *testing.T) {
	hostDir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(hostDir, link); err != nil {
		t.Fatal(err)
	}
	mount := func(m *runtimeapi.Mount) func(*SpecInput) {
		return func(in *SpecInput) { in.Container.Mounts = append(in.Container.Mounts, m) }
	}
	inUserns := func(edit func(*SpecInput)) func(*SpecInput) {
		return func(in *SpecInput) {
			in.Namespaces = map[string]string{"user": "/ns/userns/x"}
			edit(in)
		}
	}
	idm := func(container, Host, size uint32) []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{ContainerId: container, HostId: Host, Length: size}}
	}
	for _, tc := range []struct {
		name      string
		edit      func(*SpecInput)
		invalid   bool
		dst       string
		want      *specs.Mount
		propagate string
	}{
		{name: "relative container path", edit: mount(&runtimeapi.Mount{ContainerPath: "data", HostPath: hostDir}), invalid: true},
		{name: "dotdot container path", edit: mount(&runtimeapi.Mount{ContainerPath: "/data/../etc", HostPath: hostDir}), invalid: true},
		{name: "missing Host path", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: filepath.Join(hostDir, "nope")}), invalid: true},
		{name: "relative Host path", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: "rel"}), invalid: true},
		{name: "recursive read-only", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, Readonly: true, RecursiveReadOnly: true}), invalid: true},
		{name: "image volume", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", Image: &runtimeapi.ImageSpec{Image: "x"}}), invalid: true},
		{name: "bad mount option", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, MountOptions: []string{"remount"}}), invalid: true},
		{name: "loosening mount option exec", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, MountOptions: []string{"noexec", "exec"}}), invalid: true},
		{name: "loosening mount option suid", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, MountOptions: []string{"suid"}}), invalid: true},
		{name: "loosening mount option dev", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, MountOptions: []string{"dev"}}), invalid: true},
		{name: "loosening mount option rw on a read-only mount", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, Readonly: true, MountOptions: []string{"rw"}}), invalid: true},
		{name: "bind as a mount option", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, MountOptions: []string{"bind"}}), invalid: true},
		{name: "mount options of the API, each once", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, MountOptions: []string{"noexec", "nodev", "nosuid", "noexec"}}),
			dst: "/data", want: &specs.Mount{Destination: "/data", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "rw", "noexec", "nodev", "nosuid"}}},
		{name: "ro as a mount option", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir, MountOptions: []string{"ro", "noatime"}}),
			dst: "/data", want: &specs.Mount{Destination: "/data", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "ro", "noatime"}}},
		{name: "private read-only", edit: mount(&runtimeapi.Mount{ContainerPath: "/data/", HostPath: hostDir, Readonly: true}),
			dst: "/data", want: &specs.Mount{Destination: "/data", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "ro"}}},
		{name: "Host to container, link followed", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: link,
			Propagation: runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER, MountOptions: []string{"noexec"}}),
			dst: "/data", want: &specs.Mount{Destination: "/data", Type: "bind", Source: hostDir, Options: []string{"rbind", "rslave", "rw", "noexec"}}, propagate: "rslave"},
		{name: "bidirectional", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir,
			Propagation: runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL}),
			dst: "/data", want: &specs.Mount{Destination: "/data", Type: "bind", Source: hostDir, Options: []string{"rbind", "rshared", "rw"}}, propagate: "rshared"},
		{name: "ID-mapped without a user namespace", edit: mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir,
			UidMappings: idm(0, 1000, 10), GidMappings: idm(0, 1000, 10)}), invalid: true},
		{name: "in a user namespace: idmapped through it", edit: inUserns(mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir})),
			dst: "/data", want: &specs.Mount{Destination: "/data", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "rw", "idmap"}}},
		{name: "in a user namespace: own mappings", edit: inUserns(mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir,
			UidMappings: idm(0, 1000, 10), GidMappings: idm(0, 2000, 10)})),
			dst: "/data", want: &specs.Mount{Destination: "/data", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "rw", "idmap"},
				UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1000, Size: 10}}, GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 2000, Size: 10}}}},
		{name: "in a user namespace: only uid mappings", edit: inUserns(mount(&runtimeapi.Mount{ContainerPath: "/data", HostPath: hostDir,
			UidMappings: idm(0, 1000, 10)})), invalid: true},
		{name: "replaces /dev/shm", edit: mount(&runtimeapi.Mount{ContainerPath: "/dev/shm", HostPath: hostDir}),
			dst: "/dev/shm", want: &specs.Mount{Destination: "/dev/shm", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "rw"}}},
		{name: "sandbox shm", edit: func(in *SpecInput) { in.ShmPath = hostDir },
			dst: "/dev/shm", want: &specs.Mount{Destination: "/dev/shm", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "nosuid", "nodev", "noexec", "rw"}}},
		{name: "default shm", dst: "/dev/shm",
			want: &specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}},
		{name: "resolv.conf read-only with a read-only rootfs", edit: func(in *SpecInput) {
			in.ResolvConf = filepath.Join(hostDir, "resolv.conf")
			sc(in).ReadonlyRootfs = true
		}, dst: "/etc/resolv.conf", want: &specs.Mount{Destination: "/etc/resolv.conf", Type: "bind", Source: filepath.Join(hostDir, "resolv.conf"), Options: []string{"rbind", "rprivate", "ro"}}},
		{name: "sandbox hostname file", edit: func(in *SpecInput) { in.HostnameFile = filepath.Join(hostDir, "hostname") },
			dst: "/etc/hostname", want: &specs.Mount{Destination: "/etc/hostname", Type: "bind", Source: filepath.Join(hostDir, "hostname"), Options: []string{"rbind", "rprivate", "rw"}}},
		{name: "a CRI mount replaces the sandbox's /etc/hosts", edit: func(in *SpecInput) {
			in.Hosts = "/etc/hosts"
			mount(&runtimeapi.Mount{ContainerPath: "/etc/hosts", HostPath: hostDir})(in)
		}, dst: "/etc/hosts", want: &specs.Mount{Destination: "/etc/hosts", Type: "bind", Source: hostDir, Options: []string{"rbind", "rprivate", "rw"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			if tc.edit != nil {
				tc.edit(&in)
			}
			s := specOrInvalid(t, in, testHost(), tc.invalid)
			if s == nil {
				return // refused, as wanted
			}
			var found []specs.Mount
			for _, m := range s.Mounts {
				if m.Destination == tc.dst {
					found = append(found, m)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d mounts at %s, want 1: %+v", len(found), tc.dst, s.Mounts)
			}
			if diff := cmp.Diff(*tc.want, found[0]); diff != "" {
				t.Fatalf("mount (-want +got):\n%s", diff)
			}
			if s.Linux.RootfsPropagation != tc.propagate {
				t.Fatalf("rootfs propagation = %q, want %q", s.Linux.RootfsPropagation, tc.propagate)
			}
		})
	}
}

func TestSpecStandardMounts(t *testing.T) {
	s := mustSpec(t, baseInput(t), testHost())
	var dsts []string
	for _, m := range s.Mounts {
		dsts = append(dsts, m.Destination)
		if m.Destination == "/sys" && !slices.Contains(m.Options, "ro") {
			t.Errorf("/sys is not read-only: %v", m.Options)
		}
	}
	for _, want := range []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys"} {
		if !slices.Contains(dsts, want) {
			t.Errorf("no %s mount in %v", want, dsts)
		}
	}
	if !slices.Equal(s.Linux.MaskedPaths, defaultMaskedPaths) || !slices.Equal(s.Linux.ReadonlyPaths, defaultReadonlyPaths) {
		t.Errorf("masked %v readonly %v, want the standard lists", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	if s.Linux.Seccomp != nil || s.Process.ApparmorProfile != "" {
		t.Errorf("want unconfined: seccomp %v apparmor %q", s.Linux.Seccomp, s.Process.ApparmorProfile)
	}
	if s.Version != SpecVersion {
		t.Errorf("ociVersion %q", s.Version)
	}
}

func TestSpecCapabilities(t *testing.T) {
	without := func(list []string, drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(list), func(c string) bool { return slices.Contains(drop, c) })
	}
	sorted := func(l []string) []string { l = slices.Clone(l); slices.Sort(l); return l }
	h := testHost()
	for _, tc := range []struct {
		name       string
		h          Host
		privileged bool
		add, drop  []string
		want       []string
		invalid    bool
	}{
		{name: "default", h: h, want: sorted(DefaultCapabilities)},
		{name: "default intersected with a smaller bounding set", h: Host{Bounding: without(CapNames, "CAP_MKNOD", "CAP_NET_RAW")},
			want: sorted(without(DefaultCapabilities, "CAP_MKNOD", "CAP_NET_RAW"))},
		{name: "add and drop, any spelling", h: h, add: []string{"sys_admin", "CAP_NET_ADMIN"}, drop: []string{"chown", "KILL"},
			want: sorted(append(without(DefaultCapabilities, "CAP_CHOWN", "CAP_KILL"), "CAP_SYS_ADMIN", "CAP_NET_ADMIN"))},
		{name: "drop ALL then add", h: h, add: []string{"NET_BIND_SERVICE"}, drop: []string{"ALL"}, want: []string{"CAP_NET_BIND_SERVICE"}},
		{name: "add ALL then drop", h: h, add: []string{"ALL"}, drop: []string{"CHOWN"}, want: without(h.Bounding, "CAP_CHOWN")},
		{name: "add a capability the daemon lacks", h: h, add: []string{"SYS_RESOURCE"}, invalid: true},
		{name: "add an unknown capability", h: h, add: []string{"FLY"}, invalid: true},
		{name: "privileged is the daemon's bounding set", h: h, privileged: true, want: h.Bounding},
		{name: "privileged ignores add and drop", h: h, privileged: true, drop: []string{"ALL"}, want: h.Bounding},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			s := sc(&in)
			s.Privileged = tc.privileged
			s.Capabilities = &runtimeapi.Capability{AddCapabilities: tc.add, DropCapabilities: tc.drop}
			spec := specOrInvalid(t, in, tc.h, tc.invalid)
			if spec == nil {
				return // refused, as wanted
			}
			c := spec.Process.Capabilities
			for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "permitted": c.Permitted} {
				if diff := cmp.Diff(sorted(tc.want), set); diff != "" {
					t.Errorf("%s (-want +got):\n%s", name, diff)
				}
			}
			if len(c.Inheritable) != 0 || len(c.Ambient) != 0 {
				t.Errorf("inheritable %v ambient %v, want none", c.Inheritable, c.Ambient)
			}
		})
	}

	in := baseInput(t)
	sc(&in).Capabilities = &runtimeapi.Capability{DropCapabilities: []string{"ALL"}, AddAmbientCapabilities: []string{"NET_BIND_SERVICE"}}
	c := mustSpec(t, in, h).Process.Capabilities
	want := []string{"CAP_NET_BIND_SERVICE"}
	if !slices.Equal(c.Ambient, want) || !slices.Equal(c.Inheritable, want) || !slices.Equal(c.Permitted, want) {
		t.Fatalf("ambient: %+v", c)
	}
}

func TestSpecPrivileged(t *testing.T) {
	in := baseInput(t)
	sc(&in).Privileged = true
	h := testHost()
	h.Devices = func() ([]specs.LinuxDevice, error) {
		return []specs.LinuxDevice{{Path: "/dev/fuse", Type: "c", Major: 10, Minor: 229}}, nil
	}
	s := mustSpec(t, in, h)
	if len(s.Linux.MaskedPaths) != 0 || len(s.Linux.ReadonlyPaths) != 0 {
		t.Fatalf("privileged: masked %v readonly %v, want none", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	if diff := cmp.Diff([]specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}, s.Linux.Resources.Devices); diff != "" {
		t.Fatalf("device cgroup (-want +got):\n%s", diff)
	}
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/fuse" {
		t.Fatalf("devices %+v, want the host's", s.Linux.Devices)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/sys" && !slices.Contains(m.Options, "rw") {
			t.Fatalf("privileged /sys options %v, want rw", m.Options)
		}
	}
	if !slices.Equal(s.Process.Capabilities.Bounding, slices.Sorted(slices.Values(h.Bounding))) {
		t.Fatalf("privileged capabilities %v", s.Process.Capabilities.Bounding)
	}
}

func TestSpecOOMScoreAdj(t *testing.T) {
	for _, tc := range []struct {
		name           string
		requested, own int
		sysResource    bool // the daemon has CAP_SYS_RESOURCE
		want           int
	}{
		{"negative request clamped to the daemon's", -998, 0, false, 0},
		{"positive request kept", 500, 0, false, 500},
		{"clamped to a negative daemon score", -998, -500, false, -500},
		{"unset request raised to the daemon's", 0, 100, false, 100},
		{"above the maximum", 5000, 0, false, 1000},
		{"negative request kept with CAP_SYS_RESOURCE", -998, 0, true, -998},
		{"below the daemon's kept with CAP_SYS_RESOURCE", -998, -500, true, -998},
		{"unset request not raised with CAP_SYS_RESOURCE", 0, 100, true, 0},
		{"below the minimum with CAP_SYS_RESOURCE", -5000, 0, true, -1000},
		{"above the maximum with CAP_SYS_RESOURCE", 5000, 0, true, 1000},
		{"a pause's under the systemd unit's daemon", SandboxOOMScoreAdj, -999, false, -998},
		{"a pause's under a raised daemon", SandboxOOMScoreAdj, 500, false, 500},
		{"a pause's under a raised daemon with CAP_SYS_RESOURCE", SandboxOOMScoreAdj, 500, true, -998},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			resourcesOf(&in).OomScoreAdj = int64(tc.requested)
			h := testHost()
			h.OOMScoreAdj = tc.own
			h.SysResource = tc.sysResource
			if got := *mustSpec(t, in, h).Process.OOMScoreAdj; got != tc.want {
				t.Fatalf("oom_score_adj = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestSpecResources(t *testing.T) {
	in := baseInput(t)
	r := resourcesOf(&in)
	r.CpuPeriod, r.CpuQuota, r.CpuShares = 100000, 50000, 256
	r.MemoryLimitInBytes, r.MemorySwapLimitInBytes = 1<<30, 2<<30
	r.CpusetCpus, r.CpusetMems = "0-1", "0"
	r.HugepageLimits = []*runtimeapi.HugepageLimit{{PageSize: "2MB", Limit: 0}}
	r.Unified = map[string]string{"memory.high": "1"}

	s := mustSpec(t, in, testHost())
	res := s.Linux.Resources
	if *res.CPU.Period != 100000 || *res.CPU.Quota != 50000 || *res.CPU.Shares != 256 || res.CPU.Cpus != "0-1" || res.CPU.Mems != "0" {
		t.Fatalf("cpu %+v", res.CPU)
	}
	if *res.Memory.Limit != 1<<30 || res.Memory.Swap != nil {
		t.Fatalf("memory %+v: want the limit and no swap (the host has no swap accounting)", res.Memory)
	}
	if res.HugepageLimits != nil || res.Unified != nil {
		t.Fatalf("hugepages %v unified %v on a host without them", res.HugepageLimits, res.Unified)
	}
	if diff := cmp.Diff([]specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}, res.Devices); diff != "" {
		t.Fatalf("device cgroup (-want +got):\n%s", diff)
	}

	h := testHost()
	h.Swap, h.Hugetlb, h.Cgroup2 = true, true, true
	res = mustSpec(t, in, h).Linux.Resources
	if res.Memory.Swap == nil || *res.Memory.Swap != 2<<30 || len(res.HugepageLimits) != 1 || res.Unified["memory.high"] != "1" {
		t.Fatalf("resources on a capable host: %+v", res)
	}

	r.MemoryLimitInBytes = -1
	if _, err := Build(t.Context(), in, testHost()); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("negative memory limit: %v", err)
	}
}

func TestSpecCgroupPath(t *testing.T) {
	for _, tc := range []struct {
		name, sandboxParent, want string
		invalid                   bool
	}{
		{name: "default", want: "/crijournal/crijournal-c1"},
		{name: "sandbox's parent", sandboxParent: "/kubepods/pod1", want: "/kubepods/pod1/crijournal-c1"},
		{name: "systemd slice refused", sandboxParent: "kubepods.slice", invalid: true},
		{name: "dotdot refused", sandboxParent: "/a/../b", invalid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			in.Sandbox.Linux = &runtimeapi.LinuxPodSandboxConfig{CgroupParent: tc.sandboxParent}
			s := specOrInvalid(t, in, testHost(), tc.invalid)
			if s == nil {
				return // refused, as wanted
			}
			if s.Linux.CgroupsPath != tc.want {
				t.Fatalf("cgroups path %q, want %q", s.Linux.CgroupsPath, tc.want)
			}
		})
	}
}

func TestSpecNamespaces(t *testing.T) {
	nsTypes := func(s *specs.Spec) map[specs.LinuxNamespaceType]string {
		m := map[specs.LinuxNamespaceType]string{}
		for _, n := range s.Linux.Namespaces {
			m[n.Type] = n.Path
		}
		return m
	}
	in := baseInput(t)
	in.Namespaces = map[string]string{"net": "/run/netns/x", "ipc": "/run/ipcns/x", "uts": "/run/utsns/x"}
	s := mustSpec(t, in, testHost())
	want := map[specs.LinuxNamespaceType]string{
		specs.MountNamespace: "", specs.PIDNamespace: "",
		specs.NetworkNamespace: "/run/netns/x", specs.IPCNamespace: "/run/ipcns/x", specs.UTSNamespace: "/run/utsns/x",
	}
	if diff := cmp.Diff(want, nsTypes(s)); diff != "" {
		t.Fatalf("namespaces (-want +got):\n%s", diff)
	}
	if s.Hostname != "pod" {
		t.Fatalf("hostname %q, want the sandbox's", s.Hostname)
	}

	in = baseInput(t)
	in.Namespaces = map[string]string{"pid": "/proc/1234/ns/pid"}
	in.Hostname = "h"
	s = mustSpec(t, in, testHost())
	if diff := cmp.Diff(map[specs.LinuxNamespaceType]string{specs.MountNamespace: "", specs.PIDNamespace: "/proc/1234/ns/pid"}, nsTypes(s)); diff != "" {
		t.Fatalf("host namespaces with the pod's pid (-want +got):\n%s", diff)
	}
	if s.Hostname != "" {
		t.Fatalf("hostname %q set with the host's UTS namespace", s.Hostname)
	}

	sc(&in).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE}
	if _, ok := nsTypes(mustSpec(t, in, testHost()))[specs.PIDNamespace]; ok {
		t.Fatal("pid NODE still has a pid namespace")
	}
	// The pod's pid namespace is joined only by a container whose own option is POD.
	// TARGET joins the target container's, which the caller looked up.
	for _, tc := range []struct {
		name    string
		paths   map[string]string
		mode    runtimeapi.NamespaceMode
		target  string // SpecInput.TargetPidNamespace
		want    string // path of the pid namespace; "-" for none (the host's)
		invalid bool
	}{
		{"pod mode, pod has one", map[string]string{"pid": "/ns/pidns/x"}, runtimeapi.NamespaceMode_POD, "", "/ns/pidns/x", false},
		{"pod mode, pod has none", map[string]string{"net": "/ns/netns/x"}, runtimeapi.NamespaceMode_POD, "", "", false},
		{"container mode, pod has one", map[string]string{"pid": "/ns/pidns/x"}, runtimeapi.NamespaceMode_CONTAINER, "", "", false},
		{"container mode, pod has none", nil, runtimeapi.NamespaceMode_CONTAINER, "", "", false},
		{"node mode, pod has one", map[string]string{"pid": "/ns/pidns/x"}, runtimeapi.NamespaceMode_NODE, "", "-", false},
		{"target mode", nil, runtimeapi.NamespaceMode_TARGET, "/proc/42/ns/pid", "/proc/42/ns/pid", false},
		{"target mode, pod has one", map[string]string{"pid": "/ns/pidns/x"}, runtimeapi.NamespaceMode_TARGET, "/proc/42/ns/pid", "/proc/42/ns/pid", false},
		{"target ignored in container mode", nil, runtimeapi.NamespaceMode_CONTAINER, "/proc/42/ns/pid", "", false},
		{"target mode without the target's namespace", map[string]string{"pid": "/ns/pidns/x"}, runtimeapi.NamespaceMode_TARGET, "", "", true},
		{"target mode with a relative path", nil, runtimeapi.NamespaceMode_TARGET, "proc/42/ns/pid", "", true},
	} {
		t.Run("pid "+tc.name, func(t *testing.T) {
			in := baseInput(t)
			in.Namespaces = tc.paths
			in.TargetPidNamespace = tc.target
			sc(&in).NamespaceOptions = &runtimeapi.NamespaceOption{Pid: tc.mode, TargetId: "t1"}
			s := specOrInvalid(t, in, testHost(), tc.invalid)
			if s == nil {
				return
			}
			got, ok := nsTypes(s)[specs.PIDNamespace]
			if !ok {
				got = "-"
			}
			if got != tc.want {
				t.Errorf("pid namespace path %q, want %q (\"\" is a new one, \"-\" the host's)", got, tc.want)
			}
		})
	}

	sc(&in).NamespaceOptions = &runtimeapi.NamespaceOption{UsernsOptions: &runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}}
	if _, err := Build(t.Context(), in, testHost()); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("user namespace mode POD in a pod without one: %v", err)
	}
	// The pod's user namespace is joined by path, without mappings (runc reads them).
	in.Namespaces = map[string]string{"user": "/ns/userns/x", "net": "/ns/netns/x"}
	spec := mustSpec(t, in, testHost())
	if got, ok := nsTypes(spec)[specs.UserNamespace]; !ok || got != "/ns/userns/x" {
		t.Errorf("user namespace %q (present %v), want /ns/userns/x", got, ok)
	}
	if len(spec.Linux.UIDMappings) > 0 || len(spec.Linux.GIDMappings) > 0 {
		t.Errorf("mappings %v %v given with a joined user namespace", spec.Linux.UIDMappings, spec.Linux.GIDMappings)
	}
	in = baseInput(t)
	in.Namespaces = map[string]string{"mnt": "/x"}
	if _, err := Build(t.Context(), in, testHost()); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("unknown namespace kind: %v", err)
	}
}

func TestSpecDevices(t *testing.T) {
	in := baseInput(t)
	in.Container.Devices = []*runtimeapi.Device{{ContainerPath: "/dev/mynull", HostPath: "/dev/null", Permissions: "rw"}}
	s := mustSpec(t, in, testHost())
	if len(s.Linux.Devices) != 1 || s.Linux.Devices[0].Path != "/dev/mynull" || s.Linux.Devices[0].Type != "c" ||
		s.Linux.Devices[0].Major != 1 || s.Linux.Devices[0].Minor != 3 {
		t.Fatalf("devices %+v", s.Linux.Devices)
	}
	rules := s.Linux.Resources.Devices
	if len(rules) != 2 || !rules[1].Allow || rules[1].Access != "rw" || *rules[1].Major != 1 || *rules[1].Minor != 3 {
		t.Fatalf("device rules %+v", rules)
	}
	in.Container.Devices = []*runtimeapi.Device{{ContainerPath: "/dev/x", HostPath: in.Rootfs}}
	if _, err := Build(t.Context(), in, testHost()); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("a directory as a device: %v", err)
	}
}

// TestMergeEnv: the container's environment is the image's, then the request's (a key
// the request sets again replaces the image's, in place), with PATH and HOME defaulted;
// names that are not shell identifiers (a ConfigMap's keys through envFrom) are kept as
// they are.
func TestMergeEnv(t *testing.T) {
	kv := func(k, v string) *runtimeapi.KeyValue { return &runtimeapi.KeyValue{Key: k, Value: []byte(v)} }
	for _, tc := range []struct {
		name  string
		image []string
		cri   []*runtimeapi.KeyValue
		home  string
		want  []string
	}{
		{"defaults", nil, nil, "", []string{"PATH=" + DefaultPath, "HOME=/"}},
		{"request replaces the image's in place", []string{"A=1", "PATH=/bin"}, []*runtimeapi.KeyValue{kv("A", "2"), kv("B", "3")}, "/root",
			[]string{"A=2", "PATH=/bin", "B=3", "HOME=/root"}},
		{"names that are not identifiers", nil, []*runtimeapi.KeyValue{kv("data-1", "value-1"), kv("p-data-1", "value-1"), kv("1x", "y")}, "/",
			[]string{"data-1=value-1", "p-data-1=value-1", "1x=y", "PATH=" + DefaultPath, "HOME=/"}},
		{"empty key dropped", nil, []*runtimeapi.KeyValue{kv("", "x")}, "/", []string{"PATH=" + DefaultPath, "HOME=/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mergeEnv(tc.image, tc.cri, tc.home); !slices.Equal(got, tc.want) {
				t.Errorf("mergeEnv = %q, want %q", got, tc.want)
			}
		})
	}
}

// specRootfs is a root filesystem with only a passwd and a group file.
func specRootfs(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/passwd"), strings.Join([]string{
		"root:x:0:0:root:/root:/bin/sh",
		"# a comment",
		"alice:x:1000:1001:Alice:/home/alice:/bin/sh",
		"bob:x:1002:1002::/home/bob:/bin/sh",
	}, "\n")+"\n")
	writeFile(t, filepath.Join(root, "etc/group"), strings.Join([]string{
		"root:x:0:",
		"alice:x:1001:",
		"wheel:x:10:alice,bob",
		"audio:x:29:alice",
	}, "\n")+"\n")
	return root
}
