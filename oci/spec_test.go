package oci

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/google/go-cmp/cmp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/oci/spec"
)

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

func TestSpecUser(t *testing.T) {
	i64 := func(v int64) *runtimeapi.Int64Value { return &runtimeapi.Int64Value{Value: v} }
	for _, tc := range []struct {
		name    string
		image   string
		set     func(*runtimeapi.LinuxContainerSecurityContext)
		want    specs.User
		home    string
		invalid bool
	}{
		{name: "default root", want: specs.User{}, home: "/root"},
		{name: "image uid", image: "1000", want: specs.User{UID: 1000, GID: 1001, AdditionalGids: []uint32{10, 29}}, home: "/home/alice"},
		{name: "image uid:gid", image: "1000:2000", want: specs.User{UID: 1000, GID: 2000, AdditionalGids: []uint32{10, 29}}, home: "/home/alice"},
		{name: "image unknown uid", image: "4242", want: specs.User{UID: 4242}},
		{name: "image name", image: "bob", want: specs.User{UID: 1002, GID: 1002, AdditionalGids: []uint32{10}}, home: "/home/bob"},
		{name: "image name:group", image: "alice:wheel", want: specs.User{UID: 1000, GID: 10, AdditionalGids: []uint32{29}}, home: "/home/alice"},
		{name: "image unknown name", image: "mallory", invalid: true},
		{name: "image unknown group", image: "alice:nope", invalid: true},
		{name: "image empty group", image: "alice:", invalid: true},
		{name: "run_as_user wins over image", image: "bob",
			set:  func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUser = i64(1000) },
			want: specs.User{UID: 1000, GID: 1001, AdditionalGids: []uint32{10, 29}}, home: "/home/alice"},
		{name: "run_as_user not in passwd", set: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUser = i64(5000) },
			want: specs.User{UID: 5000}},
		{name: "run_as_user out of range", set: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUser = i64(-1) }, invalid: true},
		{name: "run_as_username", set: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUsername = "bob" },
			want: specs.User{UID: 1002, GID: 1002, AdditionalGids: []uint32{10}}, home: "/home/bob"},
		{name: "run_as_username unknown", set: func(s *runtimeapi.LinuxContainerSecurityContext) { s.RunAsUsername = "eve" }, invalid: true},
		{name: "run_as_group and supplemental groups", set: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.RunAsUser = i64(1000)
			s.RunAsGroup = i64(7)
			s.SupplementalGroups = []int64{29, 500}
		}, want: specs.User{UID: 1000, GID: 7, AdditionalGids: []uint32{10, 29, 500}}, home: "/home/alice"},
		{name: "strict policy ignores /etc/group", set: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.RunAsUser = i64(1000)
			s.SupplementalGroups = []int64{500}
			s.SupplementalGroupsPolicy = runtimeapi.SupplementalGroupsPolicy_Strict
		}, want: specs.User{UID: 1000, GID: 1001, AdditionalGids: []uint32{500}}, home: "/home/alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			in.Image.User = tc.image
			if tc.set != nil {
				tc.set(sc(&in))
			}
			s := specOrInvalid(t, in, testHost(), tc.invalid)
			if s == nil {
				return // refused, as wanted
			}
			if diff := cmp.Diff(tc.want, s.Process.User); diff != "" {
				t.Fatalf("user (-want +got):\n%s", diff)
			}
			home := tc.home
			if home == "" {
				home = "/"
			}
			if !slices.Contains(s.Process.Env, "HOME="+home) {
				t.Fatalf("env %q lacks HOME=%s", s.Process.Env, home)
			}
		})
	}
}

func TestSpecUserDatabaseStaysInRootfs(t *testing.T) {
	// /etc/passwd is an absolute link: it must resolve inside the root filesystem,
	// not on the host.
	root := t.TempDir()
	writeFile(t, filepath.Join(root, "real/passwd"), "inside:x:77:77::/in:/bin/sh\n")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/../../../../real/passwd", filepath.Join(root, "etc/passwd")); err != nil {
		t.Fatal(err)
	}
	in := baseInput(t)
	in.Rootfs = root
	in.Image.User = "inside"
	s := mustSpec(t, in, testHost())
	if s.Process.User.UID != 77 {
		t.Fatalf("uid = %d, want 77 from the root filesystem's own file", s.Process.User.UID)
	}
	in.Image.User = "root" // on the host, not in the image
	if _, err := spec.Build(t.Context(), in, testHost()); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("host user leaked into the container: %v", err)
	}
}

// TestOOMScoreAdj checks OOMScoreAdj, which a pause process's oom_score_adj comes from,
// against the test process's own oom_score_adj and capabilities: a request is kept
// within [-1000, 1000], and raised to the process's own unless it has CAP_SYS_RESOURCE.
func TestOOMScoreAdj(t *testing.T) {
	own, err := strconv.Atoi(readCgroupFile(t, "/proc/self/oom_score_adj"))
	if err != nil {
		t.Fatal(err)
	}
	sysResource := capLine(t, os.Getpid(), "CapEff")&(1<<unix.CAP_SYS_RESOURCE) != 0
	t.Logf("test process: oom_score_adj %d, CAP_SYS_RESOURCE %v", own, sysResource)
	for _, requested := range []int64{SandboxOOMScoreAdj, -5000, -1, 0, 500, 5000} {
		want := int(min(max(requested, -1000), 1000))
		if !sysResource {
			want = max(want, own)
		}
		if got, err := OOMScoreAdj(requested); err != nil || got != want {
			t.Errorf("OOMScoreAdj(%d) = %d, %v; want %d", requested, got, err, want)
		}
	}
}

func TestSpecReadsTheRealHost(t *testing.T) {
	// Spec (not Build) works as any user: it only reads /proc/self and /sys.
	in := baseInput(t)
	resourcesOf(&in).OomScoreAdj = -998
	s, err := Spec(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	h, err := readHost()
	if err != nil {
		t.Fatal(err)
	}
	// The kernel's word on CAP_SYS_RESOURCE, against what readHost read from /proc.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	if want := data[0].Effective&(1<<unix.CAP_SYS_RESOURCE) != 0; h.SysResource != want {
		t.Fatalf("readHost says CAP_SYS_RESOURCE %v, capget says %v", h.SysResource, want)
	}
	switch got := *s.Process.OOMScoreAdj; {
	case h.SysResource && got != -998:
		t.Fatalf("oom_score_adj %d with CAP_SYS_RESOURCE, want the requested -998", got)
	case !h.SysResource && got != max(-998, h.OOMScoreAdj):
		t.Fatalf("oom_score_adj %d without CAP_SYS_RESOURCE, want the request clamped to the daemon's %d", got, h.OOMScoreAdj)
	}
	for _, c := range s.Process.Capabilities.Bounding {
		if !slices.Contains(h.Bounding, c) {
			t.Fatalf("capability %s not in the bounding set", c)
		}
	}
}

func TestSpecEnvAndCwd(t *testing.T) {
	in := baseInput(t)
	in.Image = ImageConfig{Env: []string{"A=1", "B=2", "PATH=/img"}, WorkingDir: "/work"}
	in.Container.Envs = []*runtimeapi.KeyValue{{Key: "B", Value: []byte("3")}, {Key: "C", Value: []byte("x=y")}}
	s := mustSpec(t, in, testHost())
	want := []string{"A=1", "B=3", "PATH=/img", "C=x=y", "HOME=/root"}
	if diff := cmp.Diff(want, s.Process.Env); diff != "" {
		t.Fatalf("env (-want +got):\n%s", diff)
	}
	if s.Process.Cwd != "/work" {
		t.Fatalf("cwd = %q, want the image's /work", s.Process.Cwd)
	}

	in = baseInput(t)
	in.Container.WorkingDir = "/req"
	in.Image.WorkingDir = "/work"
	s = mustSpec(t, in, testHost())
	if s.Process.Cwd != "/req" || !slices.Contains(s.Process.Env, "PATH="+spec.DefaultPath) {
		t.Fatalf("cwd %q env %q: want /req and the default PATH", s.Process.Cwd, s.Process.Env)
	}
	in = baseInput(t)
	if s := mustSpec(t, in, testHost()); s.Process.Cwd != "/" {
		t.Fatalf("default cwd = %q", s.Process.Cwd)
	}
	in.Container.WorkingDir = "rel"
	if _, err := spec.Build(t.Context(), in, testHost()); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("relative working dir: %v", err)
	}
}
