package spec

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Devices of the CRI request (Container.devices) and of privileged containers. CDI
// devices are in package oci (cdi.go).

// criDevice turns a requested device into a spec device and its cgroup rule.
func criDevice(d *runtimeapi.Device) (specs.LinuxDevice, specs.LinuxDeviceCgroup, error) {
	dst := d.GetContainerPath()
	if !path.IsAbs(dst) || HasDotDot(dst) {
		return specs.LinuxDevice{}, specs.LinuxDeviceCgroup{}, invalid("device container path %q must be absolute without \"..\"", dst)
	}
	perms := d.GetPermissions()
	if perms == "" {
		perms = "rwm"
	}
	if strings.Trim(perms, "rwm") != "" {
		return specs.LinuxDevice{}, specs.LinuxDeviceCgroup{}, invalid("device %s: permissions %q are not a subset of \"rwm\"", dst, perms)
	}
	dev, err := deviceFromPath(d.GetHostPath())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, errNotDevice) {
			return specs.LinuxDevice{}, specs.LinuxDeviceCgroup{}, invalid("device %s: %v", dst, err)
		}
		return specs.LinuxDevice{}, specs.LinuxDeviceCgroup{}, err
	}
	dev.Path = path.Clean(dst)
	major, minor := dev.Major, dev.Minor
	return dev, specs.LinuxDeviceCgroup{Allow: true, Type: dev.Type, Major: &major, Minor: &minor, Access: perms}, nil
}

var errNotDevice = errors.New("not a device")

// deviceFromPath describes the device node at path (following links).
func deviceFromPath(p string) (specs.LinuxDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		return specs.LinuxDevice{}, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	var typ string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		typ = "c"
	case unix.S_IFBLK:
		typ = "b"
	default:
		return specs.LinuxDevice{}, fmt.Errorf("%s: %w", p, errNotDevice)
	}
	mode := os.FileMode(st.Mode & 0o777)
	uid, gid := st.Uid, st.Gid
	return specs.LinuxDevice{
		Path: p, Type: typ,
		Major: int64(unix.Major(uint64(st.Rdev))), Minor: int64(unix.Minor(uint64(st.Rdev))),
		FileMode: &mode, UID: &uid, GID: &gid,
	}, nil
}

// HostDevices lists the device nodes under /dev for a privileged container, leaving
// out what the container gets anyway (pts, shm, mqueue) and the console, as
// containerd does.
func HostDevices() ([]specs.LinuxDevice, error) {
	var out []specs.LinuxDevice
	err := filepath.WalkDir("/dev", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if p == "/dev" {
				return err
			}
			return nil
		}
		if d.IsDir() {
			switch d.Name() {
			case "pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev":
				return filepath.SkipDir
			}
			return nil
		}
		if d.Name() == "console" || d.Type()&os.ModeDevice == 0 {
			return nil
		}
		dev, err := deviceFromPath(p)
		if err != nil {
			return nil // gone or changed since the walk saw it
		}
		out = append(out, dev)
		return nil
	})
	return out, err
}
