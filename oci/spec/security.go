package spec

import (
	"context"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Security profiles (seccomp and AppArmor) as the CRI asks for them.

// Prefixes and names of the deprecated string fields (seccomp_profile_path,
// apparmor_profile) of the CRI's LinuxContainerSecurityContext.
const (
	profileRuntimeDefault = "runtime/default"
	profileDockerDefault  = "docker/default" // seccomp only, an old name of runtime/default
	profileUnconfined     = "unconfined"
	profileLocalhost      = "localhost/"
)

// requestedProfile returns the profile a container asks for: the structured field
// when it is set, else the deprecated string (as containerd reads them), else nil
// (unset). what names the feature in errors ("seccomp", "AppArmor"); docker says
// whether "docker/default" is a name of the runtime's default (it is for seccomp).
func requestedProfile(p *runtimeapi.SecurityProfile, deprecated, what string, docker bool) (*runtimeapi.SecurityProfile, error) {
	if p != nil {
		switch p.GetProfileType() {
		case runtimeapi.SecurityProfile_RuntimeDefault, runtimeapi.SecurityProfile_Unconfined:
		case runtimeapi.SecurityProfile_Localhost:
			if p.GetLocalhostRef() == "" {
				return nil, invalid("%s profile type Localhost without a localhost_ref", what)
			}
		default:
			return nil, invalid("unknown %s profile type %v", what, p.GetProfileType())
		}
		return p, nil
	}
	switch {
	case deprecated == "":
		return nil, nil
	case deprecated == profileRuntimeDefault, docker && deprecated == profileDockerDefault:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_RuntimeDefault}, nil
	case deprecated == profileUnconfined:
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Unconfined}, nil
	case strings.HasPrefix(deprecated, profileLocalhost) && len(deprecated) > len(profileLocalhost):
		return &runtimeapi.SecurityProfile{ProfileType: runtimeapi.SecurityProfile_Localhost,
			LocalhostRef: strings.TrimPrefix(deprecated, profileLocalhost)}, nil
	}
	return nil, invalid("unknown %s profile %q: want %q, %q or \"localhost/<profile>\"", what, deprecated, profileRuntimeDefault, profileUnconfined)
}

// confine sets the seccomp filter and AppArmor profile of the container whose spec s
// has its capabilities set. It may load the default AppArmor profile, which ctx
// bounds.
func confine(ctx context.Context, s *specs.Spec, sc *runtimeapi.LinuxContainerSecurityContext, h Host, noSeccomp bool) error {
	f, err := seccompFor(sc, s, h.Seccomp && !noSeccomp)
	if err != nil {
		return err
	}
	s.Linux.Seccomp = f
	s.Process.ApparmorProfile, err = appArmorFor(ctx, sc, h.AppArmor)
	return err
}
