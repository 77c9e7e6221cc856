//lint:file-ignore SA1019 the tests cover the deprecated profile strings older kubelets send.

package spec

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// blockMkdir is a Localhost profile in the Docker format (as critest writes them).
const blockMkdir = `{"defaultAction": "SCMP_ACT_ALLOW",
 "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO"}]}`

func profile(typ runtimeapi.SecurityProfile_ProfileType, ref string) *runtimeapi.SecurityProfile {
	return &runtimeapi.SecurityProfile{ProfileType: typ, LocalhostRef: ref}
}

// ruleFor returns the action of the first rule that names call, "" for none.
func ruleFor(f *specs.LinuxSeccomp, call string) specs.LinuxSeccompAction {
	for _, r := range f.Syscalls {
		if slices.Contains(r.Names, call) && len(r.Args) == 0 {
			return r.Action
		}
	}
	return ""
}

func TestSpecSeccomp(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "block-mkdir.json")
	writeFile(t, good, blockMkdir)
	malformed := filepath.Join(dir, "malformed.json")
	writeFile(t, malformed, `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [`)
	empty := filepath.Join(dir, "empty.json")
	writeFile(t, empty, `{}`)
	badAction := filepath.Join(dir, "bad-action.json")
	writeFile(t, badAction, `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mkdir"], "action": "SCMP_ACT_DENY"}]}`)
	missing := filepath.Join(dir, "missing.json")

	const (
		none     = "unconfined"
		dflt     = "default"
		localhst = "localhost"
	)
	for _, tc := range []struct {
		name       string
		edit       func(*runtimeapi.LinuxContainerSecurityContext)
		noSeccomp  bool   // the node has no seccomp
		want       string // none, dflt or localhst; "" means refused
		errMention string // what the refusal names
	}{
		{name: "unset is unconfined (CRI-O's default)", edit: func(*runtimeapi.LinuxContainerSecurityContext) {}, want: none},
		{name: "Unconfined", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Unconfined, "")
		}, want: none},
		{name: "RuntimeDefault", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_RuntimeDefault, "")
		}, want: dflt},
		{name: "Localhost", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, good)
		}, want: localhst},
		{name: "deprecated runtime/default", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.SeccompProfilePath = "runtime/default"
		}, want: dflt},
		{name: "deprecated docker/default", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.SeccompProfilePath = "docker/default"
		}, want: dflt},
		{name: "deprecated unconfined", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.SeccompProfilePath = "unconfined"
		}, want: none},
		{name: "deprecated localhost/<path>", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.SeccompProfilePath = "localhost/" + good
		}, want: localhst},
		{name: "the field wins over the deprecated string", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Unconfined, "")
			s.SeccompProfilePath = "runtime/default"
		}, want: none},
		{name: "deprecated unknown name", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.SeccompProfilePath = "strict"
		}, errMention: `"strict"`},
		{name: "privileged gets none, whatever it asks for", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Privileged = true
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, good)
		}, want: none},
		{name: "Localhost missing file", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, missing)
		}, errMention: missing},
		{name: "Localhost malformed file", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, malformed)
		}, errMention: malformed},
		{name: "Localhost profile without defaultAction", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, empty)
		}, errMention: empty},
		{name: "Localhost profile with an unknown action", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, badAction)
		}, errMention: "SCMP_ACT_DENY"},
		{name: "Localhost relative path", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, "profiles/x.json")
		}, errMention: "profiles/x.json"},
		{name: "Localhost without a ref", edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, "")
		}, errMention: "localhost_ref"},
		{name: "no seccomp on the node: RuntimeDefault refused", noSeccomp: true, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_RuntimeDefault, "")
		}, errMention: "no seccomp support"},
		{name: "no seccomp on the node: Localhost refused", noSeccomp: true, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Localhost, good)
		}, errMention: "no seccomp support"},
		{name: "no seccomp on the node: Unconfined runs", noSeccomp: true, edit: func(s *runtimeapi.LinuxContainerSecurityContext) {
			s.Seccomp = profile(runtimeapi.SecurityProfile_Unconfined, "")
		}, want: none},
		{name: "no seccomp on the node: unset runs", noSeccomp: true, edit: func(*runtimeapi.LinuxContainerSecurityContext) {}, want: none},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			tc.edit(sc(&in))
			in.NoSeccomp = tc.noSeccomp
			h := testHost()
			h.Seccomp = true
			s, err := Build(t.Context(), in, h)
			if tc.want == "" {
				if !errors.Is(err, ErrInvalidSpec) {
					t.Fatalf("err = %v, want ErrInvalidSpec", err)
				}
				if !strings.Contains(err.Error(), tc.errMention) {
					t.Fatalf("err = %v, want it to name %s", err, tc.errMention)
				}
				return
			}
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			f := s.Linux.Seccomp
			switch tc.want {
			case none:
				if f != nil {
					t.Fatalf("seccomp = %+v, want none", f)
				}
			case dflt:
				if f == nil || f.DefaultAction != specs.ActErrno || ruleFor(f, "read") != specs.ActAllow {
					t.Fatalf("seccomp = %+v, want the default profile", f)
				}
			case localhst:
				if f == nil || f.DefaultAction != specs.ActAllow || ruleFor(f, "mkdir") != specs.ActErrno {
					t.Fatalf("seccomp = %+v, want the block-mkdir profile", f)
				}
			}
		})
	}
}

// TestSpecSeccompDefaultFollowsCapabilities: the default profile allows what
// CAP_SYS_ADMIN allows (unshare, sethostname, mount) only to a container that has it.
func TestSpecSeccompDefaultFollowsCapabilities(t *testing.T) {
	for _, tc := range []struct {
		name  string
		add   []string
		allow bool
	}{
		{name: "default capabilities", allow: false},
		{name: "with SYS_ADMIN", add: []string{"SYS_ADMIN"}, allow: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := baseInput(t)
			s := sc(&in)
			s.Seccomp = profile(runtimeapi.SecurityProfile_RuntimeDefault, "")
			s.Capabilities = &runtimeapi.Capability{AddCapabilities: tc.add}
			h := testHost()
			h.Seccomp = true
			f := mustSpec(t, in, h).Linux.Seccomp
			for _, call := range []string{"unshare", "sethostname", "mount"} {
				if got := ruleFor(f, call) == specs.ActAllow; got != tc.allow {
					t.Errorf("%s allowed = %v, want %v", call, got, tc.allow)
				}
			}
		})
	}
}

// TestSpecSeccompKernelWithout: a kernel without seccomp refuses a profile as the
// configuration does.
func TestSpecSeccompKernelWithout(t *testing.T) {
	in := baseInput(t)
	sc(&in).Seccomp = profile(runtimeapi.SecurityProfile_RuntimeDefault, "")
	if _, err := Build(t.Context(), in, testHost()); !errors.Is(err, ErrInvalidSpec) {
		t.Fatalf("err = %v, want ErrInvalidSpec", err)
	}
}
