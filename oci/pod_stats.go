package oci

import (
	"fmt"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci/spec"
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
	dir, err := podCgroupDir(parent, systemd)
	if err != nil {
		return CgroupStats{}, err
	}
	st, err := cgroupStatsAt(dir)
	if err != nil {
		return CgroupStats{}, fmt.Errorf("pod cgroup: %w", err)
	}
	return st, nil
}

// SandboxCgroupStats reads the cgroup of a pod's pause process (SandboxCgroup: the
// cgroup crijournal-<sandbox ID> beside its containers'), for a pod without a cgroup of
// its own, whose stats sum what it runs. Zero figures when the cgroup is gone (the pod
// has no pause process).
func SandboxCgroupStats(sandboxID string, sandbox *runtimeapi.PodSandboxConfig, systemd bool) (CgroupStats, error) {
	p, err := SandboxCgroup(sandboxID, sandbox, systemd)
	if err != nil {
		return CgroupStats{}, err
	}
	dir, err := cgroupDir(p)
	if err != nil {
		return CgroupStats{}, fmt.Errorf("pause cgroup %s: %w", p, err)
	}
	st, err := cgroupStatsAt(dir)
	if err != nil {
		return CgroupStats{}, fmt.Errorf("pause cgroup: %w", err)
	}
	return st, nil
}

// ConmonStats reads the cgroup of container id's conmon (the scope or cgroup beside the
// container's own that joinConmonCgroup put it in). Zero figures when it is gone;
// ErrNoCgroup for a container whose cgroup this runtime never recorded.
func (r *Runtime) ConmonStats(id string) (CgroupStats, error) {
	if err := validID(id); err != nil {
		return CgroupStats{}, err
	}
	p := cgroupsPathOf(r.readMeta(id))
	var dir string
	if scope, ok := conmonScope(p, id); ok {
		d, err := scope.Dir()
		if err != nil {
			return CgroupStats{}, fmt.Errorf("conmon of %s: %w", id, err)
		}
		dir = d
	} else if d, ok := conmonCgroup(p, id); ok {
		dir = d
	} else {
		return CgroupStats{}, fmt.Errorf("conmon of %s: %w", id, ErrNoCgroup)
	}
	st, err := cgroupStatsAt(dir)
	if err != nil {
		return CgroupStats{}, fmt.Errorf("conmon of %s: %w", id, err)
	}
	return st, nil
}

// cgroupStatsAt reads the cgroup dir (relative to each hierarchy's root) once, read only,
// through the cgroupfs manager whatever the driver (as Stats reads a container's): zero
// figures when it is not there.
func cgroupStatsAt(dir string) (CgroupStats, error) {
	if spec.HasDotDot(dir) {
		return CgroupStats{}, invalid("cgroup %q contains \"..\"", dir)
	}
	m, err := manager.New(&cgroups.Cgroup{Path: dir, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return CgroupStats{}, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	st := CgroupStats{Timestamp: time.Now()}
	if !podCgroupExists(m) {
		return st, nil
	}
	v2 := cgroups.IsCgroup2UnifiedMode()
	f := cgroupFilesPool.Get().(*cgroupFiles)
	defer cgroupFilesPool.Put(f)
	cs, err := f.readStats(statDirsOf(m, v2))
	if err != nil {
		return CgroupStats{}, fmt.Errorf("cgroup %s: %w", dir, err)
	}
	return convertStats(cs, st.Timestamp, v2), nil
}
