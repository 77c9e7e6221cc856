package oci

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci/spec"
)

// The spec building itself lives in oci/spec; these are its names as oci's callers
// know them.
type (
	// SpecInput is spec.SpecInput: everything Spec needs to build a container's spec.
	SpecInput = spec.SpecInput
	// ImageConfig is spec.ImageConfig: the part of an image's configuration that
	// shapes a container's process.
	ImageConfig = spec.ImageConfig
	// ImageVolume is spec.ImageVolume: an image volume of a container.
	ImageVolume = spec.ImageVolume
)

var (
	// ErrInvalidSpec is spec.ErrInvalidSpec: a container's configuration cannot be
	// turned into a runtime spec. The server maps it to InvalidArgument.
	ErrInvalidSpec = spec.ErrInvalidSpec
	// ErrNoDefaultAppArmor is spec.ErrNoDefaultAppArmor: the default AppArmor profile
	// is needed and cannot be loaded. The server maps it to FailedPrecondition.
	ErrNoDefaultAppArmor = spec.ErrNoDefaultAppArmor
	// DefaultCapabilities is spec.DefaultCapabilities.
	DefaultCapabilities = spec.DefaultCapabilities
)

const (
	// SpecVersion is spec.SpecVersion, the ociVersion of every spec.
	SpecVersion = spec.SpecVersion
	// DefaultCgroupParent is spec.DefaultCgroupParent.
	DefaultCgroupParent = spec.DefaultCgroupParent
	// DefaultAppArmorProfile is spec.DefaultAppArmorProfile.
	DefaultAppArmorProfile = spec.DefaultAppArmorProfile
	// SandboxOOMScoreAdj is spec.SandboxOOMScoreAdj.
	SandboxOOMScoreAdj = spec.SandboxOOMScoreAdj
)

// ImageVolumes is spec.ImageVolumes: the image volumes of a container, checked.
func ImageVolumes(c *runtimeapi.ContainerConfig) ([]ImageVolume, error) {
	return spec.ImageVolumes(c)
}

// SandboxCgroup is spec.SandboxCgroup.
func SandboxCgroup(sandboxID string, sandbox *runtimeapi.PodSandboxConfig, systemd bool) (string, error) {
	return spec.SandboxCgroup(sandboxID, sandbox, systemd)
}

// validID is spec.ValidID, for the calls of this package that take a container ID.
func validID(id string) error { return spec.ValidID(id) }

// invalid is an error of the class ErrInvalidSpec.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
}

// Spec builds the OCI runtime spec of a CRI container. See the package documentation
// for the rules; every refusal of the configuration wraps ErrInvalidSpec. It reads
// the daemon's own capability bounding set and oom_score_adj from /proc/self, the
// cgroup layout from /sys/fs/cgroup, the CPUs' thermal_throttle directories from
// /sys/devices/system/cpu (once), the user and group databases from the
// container's root filesystem and, for a privileged container, the host's /dev. Where AppArmor is enabled and the
// container needs the default AppArmor profile, it loads that profile if it is not
// loaded (see [DefaultAppArmorProfile]); ctx bounds that, and a failure is
// [ErrNoDefaultAppArmor].
func Spec(ctx context.Context, in SpecInput) (*specs.Spec, error) {
	h, err := readHost()
	if err != nil {
		return nil, err
	}
	return spec.Build(ctx, in, h)
}

// OOMScoreAdj returns the oom_score_adj the daemon gives a process of its own (a pause
// process) that asks for requested, by the rule a container's follows (see the package
// documentation): within [-1000, 1000], and not below the daemon's own unless the daemon
// has CAP_SYS_RESOURCE. It reads the daemon's oom_score_adj and capabilities from
// /proc/self.
func OOMScoreAdj(requested int64) (int, error) {
	caps, err := ownCapabilities("CapEff")
	if err != nil {
		return 0, err
	}
	h := spec.Host{SysResource: caps[0]&(1<<unix.CAP_SYS_RESOURCE) != 0}
	if h.OOMScoreAdj, err = ownOOMScoreAdj(); err != nil {
		return 0, err
	}
	return spec.ClampOOMScoreAdj(requested, h), nil
}

// Resources converts CRI resources to OCI cgroup limits by the rules Spec uses, for
// UpdateContainerResources.
func Resources(r *runtimeapi.LinuxContainerResources) (*specs.LinuxResources, error) {
	h, err := readHost()
	if err != nil {
		return nil, err
	}
	return spec.Resources(r, h)
}
