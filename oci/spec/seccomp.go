package spec

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Seccomp.
//
// RuntimeDefault is the default profile of Docker and Moby (github.com/moby/profiles),
// the one Podman's and CRI-O's profile derives from, adjusted to the container's
// capabilities (CAP_SYS_ADMIN allows unshare, mount, sethostname and namespace-making
// clone flags, and so on). It is a pure Go module; Podman's go.podman.io/common
// pkg/seccomp needs cgo and libseccomp (build tag seccomp) and would move the cgroups
// and dbus modules.
//
// An unset profile (neither the seccomp field nor the deprecated
// seccomp_profile_path) runs unconfined: what the CRI says and what CRI-O does by
// default (its seccomp_use_default_when_empty was false by default and is gone since
// CRI-O 1.30, in favour of the kubelet's SeccompDefault, which sends RuntimeDefault
// itself). critest checks it ("should support nil profile, which is unconfined").
//
// The sandbox's own seccomp profile (LinuxSandboxSecurityContext.seccomp) is for an
// infra container, which crijournal does not run: the kubelet already folds the pod's
// profile into each container's, and the optional pause process that holds a shared
// pid namespace runs crijournal's own code, not the workload's.

// seccompFor returns the seccomp filter of a container whose spec s has its
// capabilities set: nil for unconfined. available says whether the node can filter
// system calls at all; when it cannot, a request for a filter is refused rather
// than run unconfined.
func seccompFor(sc *runtimeapi.LinuxContainerSecurityContext, s *specs.Spec, available bool) (*specs.LinuxSeccomp, error) {
	//lint:ignore SA1019 older kubelets send only the deprecated string.
	p, err := requestedProfile(sc.GetSeccomp(), sc.GetSeccompProfilePath(), "seccomp", true)
	if err != nil {
		return nil, err
	}
	// Privileged containers get no filter, whatever they ask for (as CRI-O and
	// containerd do; critest checks it).
	if sc.GetPrivileged() || p == nil || p.GetProfileType() == runtimeapi.SecurityProfile_Unconfined {
		return nil, nil
	}
	if !available {
		return nil, invalid("seccomp profile %s requested, but this node has no seccomp support (seccomp_unavailable is set or the kernel has none)", profileName(p))
	}
	if p.GetProfileType() == runtimeapi.SecurityProfile_RuntimeDefault {
		f, err := seccomp.GetDefaultProfile(s)
		if err != nil {
			// Not the request's fault: the profile's kernel conditions could not be
			// checked on this node.
			return nil, fmt.Errorf("default seccomp profile: %w", err)
		}
		return f, nil
	}
	return localSeccomp(p.GetLocalhostRef(), s)
}

// localSeccomp loads the seccomp profile file at path (a Localhost profile), in the
// Docker format that runtime-spec's LinuxSeccomp is a subset of.
func localSeccomp(path string, s *specs.Spec) (*specs.LinuxSeccomp, error) {
	if !filepath.IsAbs(path) {
		return nil, invalid("seccomp profile %q: a Localhost profile must be an absolute path", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, invalid("seccomp profile %q does not exist on this node", path)
		}
		return nil, invalid("seccomp profile %q: %v", path, err)
	}
	f, err := seccomp.LoadProfile(string(data), s)
	if err != nil {
		return nil, invalid("seccomp profile %q: %v", path, err)
	}
	if f == nil || f.DefaultAction == "" {
		return nil, invalid("seccomp profile %q has no defaultAction", path)
	}
	if err := checkSeccomp(f); err != nil {
		return nil, invalid("seccomp profile %q: %v", path, err)
	}
	return f, nil
}

// seccompActions are the actions the runtime-spec defines.
var seccompActions = []specs.LinuxSeccompAction{
	specs.ActKill, specs.ActKillProcess, specs.ActKillThread, specs.ActTrap, specs.ActErrno,
	specs.ActTrace, specs.ActAllow, specs.ActLog, specs.ActNotify,
}

// seccompOperators are the argument comparisons the runtime-spec defines.
var seccompOperators = []specs.LinuxSeccompOperator{
	specs.OpNotEqual, specs.OpLessThan, specs.OpLessEqual, specs.OpEqualTo,
	specs.OpGreaterEqual, specs.OpGreaterThan, specs.OpMaskedEqual,
}

// checkSeccomp refuses what the runtime would refuse only when it starts the
// container: unknown actions and operators, rules without system calls.
func checkSeccomp(f *specs.LinuxSeccomp) error {
	if !slices.Contains(seccompActions, f.DefaultAction) {
		return fmt.Errorf("unknown defaultAction %q", f.DefaultAction)
	}
	for i, r := range f.Syscalls {
		if len(r.Names) == 0 {
			return fmt.Errorf("syscalls[%d] names no system call", i)
		}
		if !slices.Contains(seccompActions, r.Action) {
			return fmt.Errorf("syscalls[%d]: unknown action %q", i, r.Action)
		}
		for _, a := range r.Args {
			if !slices.Contains(seccompOperators, a.Op) {
				return fmt.Errorf("syscalls[%d]: unknown operator %q", i, a.Op)
			}
		}
	}
	return nil
}

// profileName names a profile in messages: RuntimeDefault, or localhost/<ref>.
func profileName(p *runtimeapi.SecurityProfile) string {
	if p.GetProfileType() == runtimeapi.SecurityProfile_Localhost {
		return profileLocalhost + p.GetLocalhostRef()
	}
	return p.GetProfileType().String()
}
