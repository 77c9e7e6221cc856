package spec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Mounts of the spec, all in this file: the standard mounts, the sandbox's files and
// the request's mounts (containerMounts, criMount), and the sources of the request's
// mounts: host paths (created when missing), image volumes and recursive read-only
// mounts.

// ImageVolume is one image volume of a container (a CRI Mount with image set): the image
// mounted read-only at Destination, or only its SubPath.
type ImageVolume struct {
	Destination string // the container path, clean and absolute
	Image       string // the image as the request names it (Mount.image.image)
	SubPath     string // relative to the image's root, clean, no ".."; "" for the root
}

// ImageVolumes checks the image volumes of container config c and returns them, in the
// order of its mounts (a mount whose container path a later mount takes is left out, as
// Spec leaves it out). An image volume must be read-only, must not name a host path too,
// and its image_sub_path must stay inside the image: relative, without "..". Refusals
// wrap ErrInvalidSpec.
func ImageVolumes(c *runtimeapi.ContainerConfig) ([]ImageVolume, error) {
	last := map[string]int{} // container path -> index of the last mount at it
	for i, m := range c.GetMounts() {
		last[path.Clean(m.GetContainerPath())] = i
	}
	var out []ImageVolume
	for i, m := range c.GetMounts() {
		if m.GetImage() == nil {
			continue
		}
		dst := m.GetContainerPath()
		if !path.IsAbs(dst) || HasDotDot(dst) {
			return nil, invalid("image volume container path %q must be absolute without \"..\"", dst)
		}
		dst = path.Clean(dst)
		if last[dst] != i {
			continue
		}
		switch {
		case m.GetImage().GetImage() == "":
			return nil, invalid("image volume %s: no image", dst)
		case m.GetHostPath() != "":
			return nil, invalid("image volume %s: a host path (%q) and an image are mutually exclusive", dst, m.GetHostPath())
		case !m.GetReadonly():
			return nil, invalid("image volume %s: image volumes are read-only; the mount must set readonly", dst)
		}
		sub := m.GetImageSubPath()
		if sub != "" {
			if path.IsAbs(sub) || HasDotDot(sub) {
				return nil, invalid("image volume %s: image sub path %q must be relative without \"..\"", dst, sub)
			}
			if sub = path.Clean(sub); sub == "." {
				sub = ""
			}
		}
		out = append(out, ImageVolume{Destination: dst, Image: m.GetImage().GetImage(), SubPath: sub})
	}
	return out, nil
}

// imageVolumeSource returns the host path an image volume at dst binds: the mounted image
// (roots holds each image volume's mounted root by container path), or the sub path of
// it, resolved inside the image (symbolic links too), which must exist.
func imageVolumeSource(m *runtimeapi.Mount, dst string, roots map[string]string) (string, error) {
	vols, err := ImageVolumes(&runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{m}})
	if err != nil {
		return "", err
	}
	root := roots[dst]
	if !filepath.IsAbs(root) {
		return "", invalid("image volume %s: the image %q is not mounted", dst, m.GetImage().GetImage())
	}
	sub := vols[0].SubPath
	if sub == "" {
		return root, nil
	}
	src, err := securejoin.SecureJoin(root, sub)
	if err != nil {
		return "", invalid("image volume %s: image sub path %q: %v", dst, sub, err)
	}
	if _, err := os.Stat(src); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", invalid("image volume %s: image sub path %q does not exist in image %q", dst, sub, m.GetImage().GetImage())
		}
		return "", fmt.Errorf("image volume %s: image sub path %q: %w", dst, sub, err)
	}
	return src, nil
}

// bindSource returns the host path a bind mount at dst binds: the request's host path,
// with symbolic links followed (the container gets what it points to).
func bindSource(m *runtimeapi.Mount, dst string) (string, error) {
	src := m.GetHostPath()
	if !filepath.IsAbs(src) {
		return "", invalid("mount %s: host path %q is not absolute", dst, src)
	}
	real, err := filepath.EvalSymlinks(src)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", invalid("mount %s: host path %q does not exist", dst, src)
		}
		return "", fmt.Errorf("mount %s: host path %q: %w", dst, src, err)
	}
	return real, nil
}

// recursiveReadOnly checks a mount that asks for recursive_read_only, whose propagation
// option is prop: as the CRI says, it must be read-only and private, and the runtime must
// know the "rro" option (supported: the handler's runtime lists it in its features).
func recursiveReadOnly(m *runtimeapi.Mount, dst, prop string, supported bool) error {
	switch {
	case !m.GetReadonly():
		return invalid("mount %s: a recursive read-only mount must set readonly", dst)
	case prop != "rprivate":
		return invalid("mount %s: a recursive read-only mount must have propagation PRIVATE, not %v", dst, m.GetPropagation())
	case !supported:
		return invalid("mount %s: recursive read-only mounts are not supported by this runtime handler (its runtime's features do not list the \"rro\" mount option)", dst)
	}
	return nil
}

// defaultMaskedPaths are the paths masked in a container whose request names none, as
// moby and containerd 2.x mask them (with the host's thermalThrottlePaths after them).
// /proc/interrupts and the CPUs' thermal_throttle directories tell a container the
// host's thermal events, a side channel (GHSA-6fw5-f8r9-fgfm); powercap's energy counters
// another (GHSA-jq35-85cj-fj4p).
var defaultMaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/interrupts", "/proc/kcore", "/proc/keys",
	"/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
	"/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap",
}

var defaultReadonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// allowedMountOptions are the CRI mount_options (Mount.mount_options, the kubelet's
// VolumeMount.bindMountOptions) a bind mount may carry: those that take something away
// (the API's noexec, nodev and nosuid, and ro) and the access-time ones, which change
// nothing a container could use against the node. Options that would give back what the
// node's file system withholds (exec, dev, suid, rw) are refused (loosenedMountOptions),
// as is every other option (a remount, bind or propagation option is the runtime's to
// choose).
var allowedMountOptions = []string{
	"nosuid", "nodev", "noexec", "ro", "noatime", "nodiratime", "relatime", "norelatime",
	"strictatime", "nostrictatime",
}

// loosenedMountOptions are the options that undo a restriction, with what they undo.
var loosenedMountOptions = map[string]string{
	"suid": "nosuid", "dev": "nodev", "exec": "noexec", "rw": "ro",
}

// mountOptions checks the CRI mount_options of the bind mount at dst and returns them,
// each once, in the order asked. Refusals wrap ErrInvalidSpec.
func mountOptions(dst string, opts []string) ([]string, error) {
	var out []string
	for _, o := range opts {
		if undoes, ok := loosenedMountOptions[o]; ok {
			return nil, invalid("mount %s: mount option %q is refused: it would lift %q where the node's file system sets it (allowed: %s)", dst, o, undoes, strings.Join(allowedMountOptions, ", "))
		}
		if !slices.Contains(allowedMountOptions, o) {
			return nil, invalid("mount %s: unknown or unsupported mount option %q (allowed: %s)", dst, o, strings.Join(allowedMountOptions, ", "))
		}
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out, nil
}

// containerMounts returns the container's mounts (the standard ones, the sandbox's
// files, then the request's, which replace a standard mount at the same destination)
// and the root filesystem propagation the request's mounts need.
func containerMounts(in SpecInput, privileged, readonlyRootfs bool) ([]specs.Mount, string, error) {
	sysOpt := "ro"
	if privileged {
		sysOpt = "rw"
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		sysMount(in, sysOpt),
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", sysOpt}},
	}
	if in.ShmPath != "" {
		if !filepath.IsAbs(in.ShmPath) {
			return nil, "", invalid("shm path %q is not absolute", in.ShmPath)
		}
		mounts = append(mounts, specs.Mount{Destination: "/dev/shm", Type: "bind", Source: in.ShmPath,
			Options: []string{"rbind", "rprivate", "nosuid", "nodev", "noexec", "rw"}})
	} else {
		mounts = append(mounts, specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}})
	}
	for _, f := range []struct{ dst, src string }{{"/etc/resolv.conf", in.ResolvConf}, {"/etc/hosts", in.Hosts}, {"/etc/hostname", in.HostnameFile}} {
		if f.src == "" {
			continue
		}
		if !filepath.IsAbs(f.src) {
			return nil, "", invalid("%s source %q is not absolute", f.dst, f.src)
		}
		fileOpt := "rw"
		if readonlyRootfs || isHostFile(f.src, f.dst) {
			fileOpt = "ro"
		}
		mounts = append(mounts, specs.Mount{Destination: f.dst, Type: "bind", Source: f.src,
			Options: []string{"rbind", "rprivate", fileOpt}})
	}

	var own []specs.Mount
	propagation := ""
	for _, m := range in.Container.GetMounts() {
		om, prop, err := criMount(m, in)
		if err != nil {
			return nil, "", err
		}
		switch {
		case prop == "rshared":
			propagation = "rshared"
		case prop == "rslave" && propagation == "":
			propagation = "rslave"
		}
		own = slices.DeleteFunc(own, func(x specs.Mount) bool { return x.Destination == om.Destination })
		own = append(own, om)
	}
	// Parents before children, whatever order the request used.
	slices.SortStableFunc(own, func(a, b specs.Mount) int {
		return strings.Count(a.Destination, "/") - strings.Count(b.Destination, "/")
	})
	mounts = slices.DeleteFunc(mounts, func(x specs.Mount) bool {
		return slices.ContainsFunc(own, func(o specs.Mount) bool { return o.Destination == x.Destination })
	})
	return append(mounts, own...), propagation, nil
}

// sysMount is the container's /sys: a new sysfs, but for a container in its pod's own
// user namespace on the node's network (user namespace, no network namespace of its
// own), whose root may not mount a sysfs of a network namespace it does not own (the
// kernel's "sysfs: Restrict mounting sysfs"): it gets the node's /sys bound with its
// submounts, as containerd and CRI-O give it (user_namespaces_host_network).
func sysMount(in SpecInput, opt string) specs.Mount {
	if in.Namespaces["user"] != "" && in.Namespaces["net"] == "" {
		return specs.Mount{Destination: "/sys", Type: "bind", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", opt}}
	}
	return specs.Mount{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", opt}}
}

// isHostFile reports whether src, a sandbox file's bind source, is the node's own file at
// the container path dst (the same file, links followed), as the host's /etc/hosts is for
// a pod on the host's network. Such a file is mounted read-only: a container must not
// rewrite the node's /etc/hosts. A pod's own copy (in its sandbox directory) is not the
// node's file and stays writable unless the root filesystem is read-only.
func isHostFile(src, dst string) bool {
	if src == dst {
		return true
	}
	s, err := os.Stat(src)
	if err != nil {
		return false
	}
	d, err := os.Stat(dst)
	return err == nil && os.SameFile(s, d)
}

// criMount checks one requested mount and turns it into a bind mount: of its host path,
// or of its image's mounted root (in.ImageVolumes) for an image volume. In a pod with a
// user namespace of its own (in.Namespaces["user"]) the mount is idmapped: with the
// mount's own uid/gid mappings when it has them, otherwise through the container's user
// namespace (runc 1.2's "idmap" without mappings), so that files keep their host IDs on
// disk and the container's root owns what the host's root owns, as containerd and CRI-O do.
func criMount(m *runtimeapi.Mount, in SpecInput) (specs.Mount, string, error) {
	userns := in.Namespaces["user"] != ""
	dst := m.GetContainerPath()
	if !path.IsAbs(dst) {
		return specs.Mount{}, "", invalid("mount container path %q is not absolute", dst)
	}
	if HasDotDot(dst) {
		return specs.Mount{}, "", invalid("mount container path %q contains \"..\"", dst)
	}
	dst = path.Clean(dst)
	switch {
	case !userns && (len(m.GetUidMappings()) > 0 || len(m.GetGidMappings()) > 0):
		return specs.Mount{}, "", invalid("mount %s: ID-mapped mounts need a pod with its own user namespace", dst)
	case (len(m.GetUidMappings()) > 0) != (len(m.GetGidMappings()) > 0):
		return specs.Mount{}, "", invalid("mount %s: an ID-mapped mount needs both uid and gid mappings", dst)
	}
	var real string
	var err error
	if m.GetImage() != nil {
		real, err = imageVolumeSource(m, dst, in.ImageVolumes)
	} else {
		real, err = bindSource(m, dst)
	}
	if err != nil {
		return specs.Mount{}, "", err
	}
	var prop string
	switch m.GetPropagation() {
	case runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		prop = "rprivate"
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		prop = "rslave"
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		prop = "rshared"
	default:
		return specs.Mount{}, "", invalid("mount %s: unknown propagation %v", dst, m.GetPropagation())
	}
	extra, err := mountOptions(dst, m.GetMountOptions())
	if err != nil {
		return specs.Mount{}, "", err
	}
	opts := []string{"rbind", prop}
	if m.GetReadonly() || slices.Contains(extra, "ro") {
		opts = append(opts, "ro")
	} else {
		opts = append(opts, "rw")
	}
	extra = slices.DeleteFunc(extra, func(o string) bool { return o == "ro" })
	if m.GetRecursiveReadOnly() {
		if err := recursiveReadOnly(m, dst, prop, in.RecursiveReadOnly); err != nil {
			return specs.Mount{}, "", err
		}
		opts = append(opts, "rro")
	}
	opts = append(opts, extra...)
	om := specs.Mount{Destination: dst, Type: "bind", Source: real, Options: opts}
	if userns {
		om.Options = append(om.Options, "idmap")
		om.UIDMappings, om.GIDMappings = linuxIDMaps(m.GetUidMappings()), linuxIDMaps(m.GetGidMappings())
	}
	return om, prop, nil
}

func linuxIDMaps(maps []*runtimeapi.IDMapping) []specs.LinuxIDMapping {
	var out []specs.LinuxIDMapping
	for _, m := range maps {
		out = append(out, specs.LinuxIDMapping{ContainerID: m.GetContainerId(), HostID: m.GetHostId(), Size: m.GetLength()})
	}
	return out
}
