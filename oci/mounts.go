package oci

import (
	"errors"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"
)

// HostPathMode is the mode of a missing host path that CreateHostPaths creates.
const HostPathMode = 0o755

// CreateHostPaths creates, as directories (HostPathMode, with their missing parents), the
// host paths of container config c's bind mounts that do not exist, as containerd and
// CRI-O do: a kubelet hostPath volume of type "" relies on it. A host path must be
// absolute and clean (filepath.Clean leaves it as it is: no "..", "." or empty
// component, no trailing slash) to be created; a dangling symbolic link is not followed. It returns the
// directories it created. Refusals wrap ErrInvalidSpec.
//
// The directories are not a journaled step and nothing removes them: a host path belongs
// to the node, not to the container (the kubelet expects a hostPath's directory, and
// whatever the container wrote in it, to outlive the container, and another container
// may bind it meanwhile); containerd and CRI-O leave them too.
func CreateHostPaths(c *runtimeapi.ContainerConfig) ([]string, error) {
	var created []string
	for _, m := range c.GetMounts() {
		src := m.GetHostPath()
		if m.GetImage() != nil || src == "" {
			continue
		}
		if _, err := os.Lstat(src); !errors.Is(err, os.ErrNotExist) {
			continue // there (or unreadable: the spec says why)
		}
		if !filepath.IsAbs(src) || filepath.Clean(src) != src {
			return created, invalid("mount %s: missing host path %q is not absolute and clean, so it is not created", m.GetContainerPath(), src)
		}
		if err := os.MkdirAll(src, HostPathMode); err != nil {
			return created, invalid("mount %s: creating missing host path %q: %v", m.GetContainerPath(), src, err)
		}
		created = append(created, src)
	}
	return created, nil
}

// sysCPU is the sysfs directory of the host's CPUs.
const sysCPU = "/sys/devices/system/cpu"

// thermalThrottlePaths are this host's CPU thermal_throttle directories, read once: the
// daemon's CPUs, like moby's and containerd's, do not change while it runs.
var thermalThrottlePaths = sync.OnceValue(func() []string { return cpuThermalThrottle(sysCPU) })

// cpuThermalThrottle returns the thermal_throttle directory of each possible CPU (the
// list in dir/possible) that has one below dir, a sysfs CPU directory, as the container
// sees it: /sys/devices/system/cpu/cpu<N>/thermal_throttle. Only the x86 thermal driver
// makes them (a virtual machine often has none). A possible list that cannot be read
// gives none, as moby and containerd do.
func cpuThermalThrottle(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "possible"))
	if err != nil {
		return nil
	}
	cpus, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	var out []string
	for _, cpu := range cpus.List() {
		name := "cpu" + strconv.Itoa(cpu) + "/thermal_throttle"
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			out = append(out, path.Join(sysCPU, name))
		}
	}
	return out
}
