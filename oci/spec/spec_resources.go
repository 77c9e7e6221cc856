package spec

import (
	"maps"
	"path"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/units"
)

// Resources of the spec: the cgroup a container runs in and its limits.

// DefaultCgroupParent is the cgroup parent of containers whose sandbox names none.
const DefaultCgroupParent = "/crijournal"

// CgroupsPath returns the CgroupsPath of the cgroup of a container, or of a sandbox's
// pause process, with the given ID under parent: with the cgroupfs driver the cgroupfs
// path <parent>/crijournal-<id> ("" for DefaultCgroupParent); with the systemd driver
// (systemd true) the scope <parent>:crijournal:<id>, parent a slice name ("" for
// units.DefaultSlice), which runc --systemd-cgroup makes as crijournal-<id>.scope.
func CgroupsPath(parent, id string, systemd bool) (string, error) {
	if systemd {
		p, err := units.ScopePath(parent, units.Prefix, id)
		if err != nil {
			return "", invalid("cgroup parent %q is not a systemd slice (such as kubepods-burstable-pod<uid>.slice, or its directory): the cgroup driver is systemd", parent)
		}
		return p, nil
	}
	if parent == "" {
		parent = DefaultCgroupParent
	}
	if !path.IsAbs(parent) || HasDotDot(parent) {
		return "", invalid("cgroup parent %q is not an absolute cgroupfs path", parent)
	}
	return path.Join(parent, cgroupPrefix+id), nil
}

// SandboxCgroup returns the CgroupsPath of the cgroup of a sandbox's pause process (a
// cgroupfs path, or with systemd true a systemd scope, see CgroupsPath): a sibling of its
// containers' under the sandbox's cgroup_parent, as runc makes the cgroup of a pause
// container.
func SandboxCgroup(sandboxID string, sandbox *runtimeapi.PodSandboxConfig, systemd bool) (string, error) {
	return CgroupsPath(sandbox.GetLinux().GetCgroupParent(), sandboxID, systemd)
}

// cgroupPrefix starts the name of each container's own cgroup under its parent.
const cgroupPrefix = "crijournal-"

// resources turns CRI resources into cgroup limits. Swap, hugepage and unified
// (cgroup v2) settings the machine cannot apply are left out, as runc would fail on
// them.
func Resources(r *runtimeapi.LinuxContainerResources, h Host) (*specs.LinuxResources, error) {
	res := &specs.LinuxResources{}
	if r == nil {
		return res, nil
	}
	if r.CpuPeriod < 0 || r.CpuShares < 0 || r.MemoryLimitInBytes < 0 || r.MemorySwapLimitInBytes < -1 {
		return nil, invalid("negative resource limit")
	}
	cpu := &specs.LinuxCPU{Cpus: r.CpusetCpus, Mems: r.CpusetMems}
	if r.CpuPeriod > 0 {
		p := uint64(r.CpuPeriod)
		cpu.Period = &p
	}
	if r.CpuQuota != 0 {
		q := r.CpuQuota
		cpu.Quota = &q
	}
	if r.CpuShares > 0 {
		s := uint64(r.CpuShares)
		cpu.Shares = &s
	}
	if *cpu != (specs.LinuxCPU{}) {
		res.CPU = cpu
	}
	if r.MemoryLimitInBytes > 0 {
		lim := r.MemoryLimitInBytes
		res.Memory = &specs.LinuxMemory{Limit: &lim}
		if r.MemorySwapLimitInBytes != 0 && h.Swap {
			swap := r.MemorySwapLimitInBytes
			res.Memory.Swap = &swap
		}
	}
	if h.Hugetlb {
		for _, l := range r.HugepageLimits {
			res.HugepageLimits = append(res.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: l.PageSize, Limit: l.Limit})
		}
	}
	if h.Cgroup2 && len(r.Unified) > 0 {
		res.Unified = maps.Clone(r.Unified)
	}
	return res, nil
}
