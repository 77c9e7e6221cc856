package oci

import (
	"fmt"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	sdcgroups "github.com/opencontainers/cgroups/systemd"

	"github.com/crijournal/crijournal/oci/spec"
	"github.com/crijournal/crijournal/units"
)

// PodStats reads a pod's own cgroup, its cgroup_parent (a cgroupfs path, or with systemd
// true a slice), as containerd reads a sandbox's stats from it: the CPU time, memory and
// processes of everything the pod runs, its containers and what runs beside them in the
// pod's cgroup (the pause process, each container's conmon: see SandboxCgroup and
// joinConmonCgroup), and the pod's memory limit. ErrNoPodCgroup for a pod without a
// cgroup_parent, whose cgroup is shared with other pods; zero figures when the cgroup
// is gone.
func PodStats(parent string, systemd bool) (CgroupStats, error) {
	if parent == "" {
		return CgroupStats{}, ErrNoPodCgroup
	}
	dir := parent
	if systemd {
		name, err := units.SliceName(parent)
		if err != nil {
			return CgroupStats{}, invalid("cgroup parent %q is not a systemd slice: %v", parent, err)
		}
		if dir, err = sdcgroups.ExpandSlice(name); err != nil {
			return CgroupStats{}, invalid("cgroup parent %q: %v", parent, err)
		}
	}
	if spec.HasDotDot(dir) {
		return CgroupStats{}, invalid("cgroup %q contains \"..\"", dir)
	}
	// Read only, through the cgroupfs manager whatever the driver (as Stats reads a
	// container's).
	m, err := manager.New(&cgroups.Cgroup{Path: dir, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return CgroupStats{}, fmt.Errorf("pod cgroup %s: %w", dir, err)
	}
	st := CgroupStats{Timestamp: time.Now()}
	if !podCgroupExists(m) {
		return st, nil
	}
	v2 := cgroups.IsCgroup2UnifiedMode()
	d := statDirsOf(m, v2)
	f := cgroupFilesPool.Get().(*cgroupFiles)
	defer cgroupFilesPool.Put(f)
	cs, err := f.readStats(d)
	if err != nil {
		return CgroupStats{}, fmt.Errorf("pod cgroup %s: %w", dir, err)
	}
	return convertStats(cs, st.Timestamp, v2), nil
}
