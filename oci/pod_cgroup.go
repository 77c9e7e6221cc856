package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	sdcgroups "github.com/opencontainers/cgroups/systemd"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci/spec"
	"github.com/crijournal/crijournal/units"
)

// The pod-level resources of UpdatePodSandboxResources: the limits of a pod's own
// cgroup, its cgroup_parent (the kubelet's pod<uid> cgroup or slice), which holds its
// containers' cgroups and its pause process's.

// ErrNoPodCgroup is returned by SetPodResources for a pod that has no cgroup of its own
// to set: it names no cgroup_parent (its containers share DefaultCgroupParent, or
// units.DefaultSlice, with every such pod), or its cgroup does not exist (yet).
var ErrNoPodCgroup = errors.New("pod has no cgroup of its own")

// CPU figures of the kernel and the kubelet (pkg/kubelet/cm): shares per CPU, the
// least shares, and the bounds of a CFS period and the least quota, in microseconds.
const (
	sharesPerCPU    = 1024
	minShares       = 2
	minCFSPeriod    = 1000
	maxCFSPeriod    = 1000000
	minCFSQuota     = 1000
	milliCPUPerCPU  = 1000
	unlimitedQuotaV = -1
)

// PodResources adds up a pod's overhead and the sum of its containers' resources, as
// UpdatePodSandboxResources gives them, into the limits of the pod's cgroup, as the
// kubelet adds them up for that cgroup (pkg/kubelet/cm ResourceConfigForPod): CPU
// shares by their millicores (the kubelet's rounding), the CFS quota of both over the
// resources' period (a resources quota of zero leaves the quota as it is, a negative
// one lifts it, with the overhead's), the memory limit of both (zero: left as it is).
// Other fields (cpusets, hugepages, unified, swap) are left as they are: the pod-level
// resize of the kubelet changes CPU and memory only. Nonsense (negative figures, a
// period outside the kernel's 1 ms to 1 s, a positive quota under 1 ms, figures that
// overflow) wraps ErrInvalidSpec; so does a request with neither part.
func PodResources(overhead, resources *runtimeapi.LinuxContainerResources) (*cgroups.Resources, error) {
	if overhead == nil && resources == nil {
		return nil, invalid("neither overhead nor resources given: nothing to update")
	}
	for _, r := range []struct {
		name string
		r    *runtimeapi.LinuxContainerResources
	}{{"overhead", overhead}, {"resources", resources}} {
		switch {
		case r.r.GetCpuShares() < 0:
			return nil, invalid("%s: negative cpu_shares %d", r.name, r.r.GetCpuShares())
		case r.r.GetMemoryLimitInBytes() < 0:
			return nil, invalid("%s: negative memory_limit_in_bytes %d", r.name, r.r.GetMemoryLimitInBytes())
		case r.r.GetCpuPeriod() != 0 && (r.r.GetCpuPeriod() < minCFSPeriod || r.r.GetCpuPeriod() > maxCFSPeriod):
			return nil, invalid("%s: cpu_period %d µs is outside the kernel's %d to %d", r.name, r.r.GetCpuPeriod(), minCFSPeriod, maxCFSPeriod)
		case r.r.GetCpuQuota() > 0 && r.r.GetCpuQuota() < minCFSQuota:
			return nil, invalid("%s: cpu_quota %d µs is under the kernel's least, %d", r.name, r.r.GetCpuQuota(), minCFSQuota)
		}
	}
	res := &cgroups.Resources{SkipDevices: true}
	if overhead.GetCpuShares() != 0 || resources.GetCpuShares() != 0 {
		milli := sharesToMilliCPU(resources.GetCpuShares()) + sharesToMilliCPU(overhead.GetCpuShares())
		res.CpuShares = milliCPUToShares(milli)
	}
	period := resources.GetCpuPeriod()
	if period == 0 {
		period = overhead.GetCpuPeriod()
	}
	switch q := resources.GetCpuQuota(); {
	case q > 0:
		total := q
		if oq := overhead.GetCpuQuota(); oq > 0 {
			// The overhead's quota over the resources' period.
			if op := overhead.GetCpuPeriod(); op > 0 && period > 0 && op != period {
				oq = int64(math.Ceil(float64(oq) * float64(period) / float64(op)))
			}
			if total > math.MaxInt64-oq {
				return nil, invalid("cpu_quota %d + %d overflows", q, oq)
			}
			total += oq
		}
		res.CpuQuota = total
		res.CpuPeriod = uint64(period)
	case q < 0:
		res.CpuQuota = unlimitedQuotaV
		res.CpuPeriod = uint64(period)
	}
	if m := resources.GetMemoryLimitInBytes(); m > 0 {
		o := overhead.GetMemoryLimitInBytes()
		if m > math.MaxInt64-o {
			return nil, invalid("memory_limit_in_bytes %d + %d overflows", m, o)
		}
		res.Memory = m + o
	}
	return res, nil
}

// sharesToMilliCPU is the kubelet's SharesToMilliCPU: the millicores shares stand for.
func sharesToMilliCPU(shares int64) int64 {
	if shares < minShares {
		return 0
	}
	return int64(math.Ceil(float64(shares*milliCPUPerCPU) / float64(sharesPerCPU)))
}

// milliCPUToShares is the kubelet's MilliCPUToShares: the shares of millicores, at least
// minShares.
func milliCPUToShares(milli int64) uint64 {
	if milli <= 0 {
		return minShares
	}
	return uint64(max(milli*sharesPerCPU/milliCPUPerCPU, minShares))
}

// SetPodResources sets res on the cgroup of a pod whose cgroup_parent is parent: with
// the cgroupfs driver the cgroupfs directory parent (in every v1 hierarchy), with the
// systemd driver (systemd true) the slice parent names (see units.SliceName), through
// systemd's unit properties and the cgroup files, as the library runc and the kubelet
// use does. A pod without a cgroup_parent, or whose cgroup does not exist, gives
// ErrNoPodCgroup; a parent that is not a cgroup path or slice, ErrInvalidSpec.
func SetPodResources(ctx context.Context, parent string, systemd bool, res *cgroups.Resources) error {
	if parent == "" {
		return fmt.Errorf("%w: it names no cgroup_parent, so its containers' cgroups are in the one every such pod shares", ErrNoPodCgroup)
	}
	res = withCPUWeight(res, cgroups.IsCgroup2UnifiedMode())
	if systemd {
		name, err := units.SliceName(parent)
		if err != nil {
			return invalid("cgroup parent %q is not a systemd slice: %v", parent, err)
		}
		if err := units.SetSlice(ctx, name, res); err != nil {
			if errors.Is(err, units.ErrNotActive) {
				return fmt.Errorf("%w: %w", ErrNoPodCgroup, err)
			}
			return err
		}
		return nil
	}
	if _, err := spec.CgroupsPath(parent, "x", false); err != nil {
		return err
	}
	m, err := manager.New(&cgroups.Cgroup{Path: parent, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return fmt.Errorf("pod cgroup %s: %w", parent, err)
	}
	if !podCgroupExists(m) {
		return fmt.Errorf("%w: %s does not exist (the kubelet makes it, or the runtime with the pod's first container)", ErrNoPodCgroup, parent)
	}
	if err := m.Set(res); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s: %w", ErrNoPodCgroup, parent, err)
		}
		return fmt.Errorf("set the limits of pod cgroup %s: %w", parent, err)
	}
	return nil
}

// withCPUWeight returns res with, on cgroup v2 (unified), the CPU weight its CPU shares
// convert to (the library's conversion, the one runc and the kubelet use): the library's
// v2 drivers write cpu.weight (or systemd's CPUWeight) from CpuWeight only and leave the
// conversion to their caller. res itself is not changed.
func withCPUWeight(res *cgroups.Resources, unified bool) *cgroups.Resources {
	if !unified || res.CpuShares == 0 || res.CpuWeight != 0 {
		return res
	}
	c := *res
	c.CpuWeight = cgroups.ConvertCPUSharesToCgroupV2Value(res.CpuShares)
	return &c
}

// podCgroupExists reports whether the cgroup of m is there: its unified directory, or
// on cgroup v1 its cpu and memory directories (the ones SetPodResources writes).
func podCgroupExists(m cgroups.Manager) bool {
	if cgroups.IsCgroup2UnifiedMode() {
		return cgroups.PathExists(m.Path(""))
	}
	for _, c := range []string{"cpu", "memory"} {
		if p := m.Path(c); p != "" && !cgroups.PathExists(p) {
			return false
		}
	}
	return true
}

// PodPSI reads the pressure stall information of a pod's own cgroup, its cgroup_parent
// (a cgroupfs path, or with systemd true a slice): what PodSandboxStats reports as the
// pod's CPU, memory and I/O pressure, which cannot be summed from its containers'. It is
// empty on cgroup v1 (no pressure files) and for a pod without a cgroup_parent, whose
// containers share theirs with other pods; a missing cgroup or file leaves its figure nil.
func PodPSI(parent string, systemd bool) (PSI, error) {
	if parent == "" || !cgroups.IsCgroup2UnifiedMode() {
		return PSI{}, nil
	}
	dir, err := podCgroupDir(parent, systemd)
	if err != nil {
		return PSI{}, err
	}
	return podPSI(unifiedRoot, dir)
}

// podCgroupDir is the cgroup directory of a pod's cgroup_parent: the path itself with the
// cgroupfs driver, the slice's expanded path with the systemd one.
func podCgroupDir(parent string, systemd bool) (string, error) {
	if !systemd {
		return parent, nil
	}
	name, err := units.SliceName(parent)
	if err != nil {
		return "", invalid("cgroup parent %q is not a systemd slice: %v", parent, err)
	}
	dir, err := sdcgroups.ExpandSlice(name)
	if err != nil {
		return "", invalid("cgroup parent %q: %v", parent, err)
	}
	return dir, nil
}

// unifiedRoot is where the cgroup v2 hierarchy is mounted.
const unifiedRoot = "/sys/fs/cgroup"

// podPSI reads the pressure files of the cgroup dir below root.
func podPSI(root, dir string) (PSI, error) {
	if spec.HasDotDot(dir) {
		return PSI{}, invalid("cgroup %q contains \"..\"", dir)
	}
	f := cgroupFilesPool.Get().(*cgroupFiles)
	defer cgroupFilesPool.Put(f)
	cs := cgroups.NewStats()
	if err := readPSI(f, filepath.Join(root, dir), cs); err != nil {
		return PSI{}, err
	}
	return PSI{CPU: cs.CpuStats.PSI, Memory: cs.MemoryStats.PSI, IO: cs.BlkioStats.PSI}, nil
}
