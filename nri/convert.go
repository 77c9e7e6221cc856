package nri

import (
	"fmt"
	"maps"
	"time"

	"github.com/containerd/nri/pkg/api"
	nrigen "github.com/containerd/nri/pkg/runtime-tools/generate"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	rgen "github.com/opencontainers/runtime-tools/generate"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Pod describes a pod sandbox to NRI.
type Pod struct {
	ID             string
	Config         *runtimeapi.PodSandboxConfig
	RuntimeHandler string
	IPs            []string
	// Namespaces are the pod's pinned namespaces by kind ("net", "ipc", ...).
	Namespaces map[string]string
	// CgroupsPath is the cgroup of the pod's pause process, if it has one.
	CgroupsPath string
}

// PodSandbox returns the NRI form of a pod.
func PodSandbox(p Pod) *api.PodSandbox {
	md := p.Config.GetMetadata()
	linux := &api.LinuxPodSandbox{
		CgroupParent: p.Config.GetLinux().GetCgroupParent(),
		CgroupsPath:  p.CgroupsPath,
		PodOverhead:  criResources(p.Config.GetLinux().GetOverhead()),
		PodResources: criResources(p.Config.GetLinux().GetResources()),
	}
	for _, kind := range []string{"ipc", "net", "pid", "user", "uts"} {
		if path := p.Namespaces[kind]; path != "" {
			nsType := kind
			if kind == "net" {
				nsType = "network"
			}
			linux.Namespaces = append(linux.Namespaces, &api.LinuxNamespace{Type: nsType, Path: path})
		}
	}
	return &api.PodSandbox{
		Id:             p.ID,
		Name:           md.GetName(),
		Uid:            md.GetUid(),
		Namespace:      md.GetNamespace(),
		Labels:         maps.Clone(p.Config.GetLabels()),
		Annotations:    maps.Clone(p.Config.GetAnnotations()),
		RuntimeHandler: p.RuntimeHandler,
		Linux:          linux,
		Ips:            p.IPs,
	}
}

// Ctr describes a container to NRI.
type Ctr struct {
	ID, SandboxID string
	Config        *runtimeapi.ContainerConfig
	// Spec is the container's OCI spec: as generated when the plugins are asked about
	// its creation, as adjusted (the bundle's config.json) afterwards. Nil: only what
	// the CRI config says is told.
	Spec  *specs.Spec
	State api.ContainerState
	// CreatedAt, StartedAt, FinishedAt, ExitCode and Reason are its status, as far as
	// it has one.
	CreatedAt, StartedAt, FinishedAt time.Time
	ExitCode                         int32
	Reason                           string
}

// Container returns the NRI form of a container.
func Container(c Ctr) *api.Container {
	ctr := &api.Container{
		Id:           c.ID,
		PodSandboxId: c.SandboxID,
		Name:         c.Config.GetMetadata().GetName(),
		State:        c.State,
		Labels:       maps.Clone(c.Config.GetLabels()),
		Annotations:  maps.Clone(c.Config.GetAnnotations()),
		CreatedAt:    unixNano(c.CreatedAt),
		StartedAt:    unixNano(c.StartedAt),
		FinishedAt:   unixNano(c.FinishedAt),
		ExitCode:     c.ExitCode,
		StatusReason: c.Reason,
	}
	if c.Config.GetImage().GetImage() != "" {
		ctr.Image = &api.Image{Name: c.Config.GetImage().GetImage()}
	}
	s := c.Spec
	if s == nil {
		ctr.Args = append(append([]string{}, c.Config.GetCommand()...), c.Config.GetArgs()...)
		for _, kv := range c.Config.GetEnvs() {
			ctr.Env = append(ctr.Env, kv.GetKey()+"="+string(kv.GetValue()))
		}
		ctr.Linux = &api.LinuxContainer{Resources: criResources(c.Config.GetLinux().GetResources())}
		return ctr
	}
	if s.Annotations != nil {
		ctr.Annotations = maps.Clone(s.Annotations)
	}
	ctr.Mounts = api.FromOCIMounts(s.Mounts)
	ctr.Hooks = api.FromOCIHooks(s.Hooks)
	if p := s.Process; p != nil {
		ctr.Args = append([]string(nil), p.Args...)
		ctr.Env = append([]string(nil), p.Env...)
		ctr.User = &api.User{Uid: p.User.UID, Gid: p.User.GID, AdditionalGids: append([]uint32(nil), p.User.AdditionalGids...)}
		for _, r := range p.Rlimits {
			ctr.Rlimits = append(ctr.Rlimits, &api.POSIXRlimit{Type: r.Type, Hard: r.Hard, Soft: r.Soft})
		}
	}
	if l := s.Linux; l != nil {
		ctr.Linux = &api.LinuxContainer{
			Namespaces:  api.FromOCILinuxNamespaces(l.Namespaces),
			Devices:     api.FromOCILinuxDevices(l.Devices),
			Resources:   api.FromOCILinuxResources(l.Resources, s.Annotations),
			CgroupsPath: l.CgroupsPath,
			Sysctl:      maps.Clone(l.Sysctl),
		}
		if s.Process != nil && s.Process.OOMScoreAdj != nil {
			ctr.Linux.OomScoreAdj = api.Int(*s.Process.OOMScoreAdj)
		}
	}
	return ctr
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// criResources returns the NRI form of the CRI's container resources (nil for nil).
func criResources(r *runtimeapi.LinuxContainerResources) *api.LinuxResources {
	if r == nil {
		return nil
	}
	out := &api.LinuxResources{
		Cpu:    &api.LinuxCPU{Cpus: r.GetCpusetCpus(), Mems: r.GetCpusetMems()},
		Memory: &api.LinuxMemory{},
	}
	if v := r.GetCpuShares(); v != 0 {
		out.Cpu.Shares = api.UInt64(uint64(v))
	}
	if v := r.GetCpuQuota(); v != 0 {
		out.Cpu.Quota = api.Int64(v)
	}
	if v := r.GetCpuPeriod(); v != 0 {
		out.Cpu.Period = api.UInt64(uint64(v))
	}
	if v := r.GetMemoryLimitInBytes(); v != 0 {
		out.Memory.Limit = api.Int64(v)
	}
	if v := r.GetMemorySwapLimitInBytes(); v != 0 {
		out.Memory.Swap = api.Int64(v)
	}
	for _, h := range r.GetHugepageLimits() {
		out.HugepageLimits = append(out.HugepageLimits, &api.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
	}
	out.Unified = maps.Clone(r.GetUnified())
	return out
}

// Resources returns the NRI form of the CRI's resources of an UpdateContainerResources.
func Resources(r *runtimeapi.LinuxContainerResources) *api.LinuxResources { return criResources(r) }

// CRIResources returns the CRI form of NRI resources, what UpdateContainerResources
// takes: the fields the CRI has (CPU, cpusets, memory, swap, hugepages, unified), on top
// of base (the container's resources so far, which it does not change; nil for none).
func CRIResources(r *api.LinuxResources, base *runtimeapi.LinuxContainerResources) *runtimeapi.LinuxContainerResources {
	out := &runtimeapi.LinuxContainerResources{}
	if base != nil {
		out = &runtimeapi.LinuxContainerResources{
			CpuPeriod: base.GetCpuPeriod(), CpuQuota: base.GetCpuQuota(), CpuShares: base.GetCpuShares(),
			MemoryLimitInBytes: base.GetMemoryLimitInBytes(), OomScoreAdj: base.GetOomScoreAdj(),
			CpusetCpus: base.GetCpusetCpus(), CpusetMems: base.GetCpusetMems(), HugepageLimits: base.GetHugepageLimits(),
			Unified: maps.Clone(base.GetUnified()), MemorySwapLimitInBytes: base.GetMemorySwapLimitInBytes(),
		}
	}
	if r == nil {
		return out
	}
	if c := r.GetCpu(); c != nil {
		if v := c.GetShares(); v != nil {
			out.CpuShares = int64(v.GetValue())
		}
		if v := c.GetQuota(); v != nil {
			out.CpuQuota = v.GetValue()
		}
		if v := c.GetPeriod(); v != nil {
			out.CpuPeriod = int64(v.GetValue())
		}
		if c.GetCpus() != "" {
			out.CpusetCpus = c.GetCpus()
		}
		if c.GetMems() != "" {
			out.CpusetMems = c.GetMems()
		}
	}
	if m := r.GetMemory(); m != nil {
		if v := m.GetLimit(); v != nil {
			out.MemoryLimitInBytes = v.GetValue()
		}
		if v := m.GetSwap(); v != nil {
			out.MemorySwapLimitInBytes = v.GetValue()
		}
	}
	if len(r.GetHugepageLimits()) > 0 {
		out.HugepageLimits = nil
		for _, h := range r.GetHugepageLimits() {
			out.HugepageLimits = append(out.HugepageLimits, &runtimeapi.HugepageLimit{PageSize: h.GetPageSize(), Limit: h.GetLimit()})
		}
	}
	if len(r.GetUnified()) > 0 {
		if out.Unified == nil {
			out.Unified = map[string]string{}
		}
		maps.Copy(out.Unified, r.GetUnified())
	}
	return out
}

// Adjust applies the plugins' adjustment to spec, in place (through NRI's own spec
// generator, as containerd and CRI-O do).
func Adjust(spec *specs.Spec, adjust *api.ContainerAdjustment) error {
	if adjust == nil {
		return nil
	}
	g := rgen.NewFromSpec(spec)
	if err := nrigen.SpecGenerator(&g).Adjust(adjust); err != nil {
		return fmt.Errorf("%w: apply the adjustment to the spec: %w", ErrPlugin, err)
	}
	return nil
}
