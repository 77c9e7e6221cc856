package oci

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Containers in a pod's own user namespace on the node's network (hostUsers: false with
// hostNetwork, the CRI's RuntimeFeatures.user_namespaces_host_network).
//
// Such a container's root has no capability over the node's network namespace, which
// the node's user namespace owns, and the kernel lets only a process with CAP_SYS_ADMIN
// over the current network namespace mount a sysfs (fs/sysfs: "sysfs: Restrict mounting
// sysfs", 3.11). Its /sys is therefore the node's /sys bound read-only (spec.Build does
// so, as containerd (PR 12518) and CRI-O (PR 9634) do). What that needs of the kernel is that a
// process in a new user namespace, in a mount namespace that namespace owns, may bind the
// node's /sys with its submounts and make the bind read-only: user namespaces not
// disabled (user.max_user_namespaces > 0, no security module refusing them) and the
// locked submounts of /sys bound as a whole (a non-recursive bind of a tree with locked
// submounts is refused). ProbeUsernsHostNetwork does exactly that, once, in a child.

// probeArg0 is the argv[0] of the probe's child: this binary, re-executed, which runs
// probeChild from this package's init instead of its main (so that the child is safe in
// any binary that links oci, tests included).
const probeArg0 = "crijournal-probe-userns-sysfs"

func init() {
	if len(os.Args) == 1 && os.Args[0] == probeArg0 {
		if err := probeChild(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
}

// probeChild runs in a new user namespace and a mount namespace it owns: it binds the
// node's /sys over itself, with its submounts, and makes the bind read-only, nosuid,
// nodev and noexec, as runc mounts a container's /sys from the spec.
func probeChild() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make the mounts private: %w", err)
	}
	if err := unix.Mount("/sys", "/sys", "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind /sys in a user namespace: %w", err)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	// The node's atime flags, which a user namespace may not change (locked).
	var st unix.Statfs_t
	if err := unix.Statfs("/sys", &st); err != nil {
		return fmt.Errorf("statfs /sys: %w", err)
	}
	switch {
	case st.Flags&unix.ST_NOATIME != 0:
		flags |= unix.MS_NOATIME
	case st.Flags&unix.ST_RELATIME != 0:
		flags |= unix.MS_RELATIME
	default:
		flags |= unix.MS_STRICTATIME
	}
	if st.Flags&unix.ST_NODIRATIME != 0 {
		flags |= unix.MS_NODIRATIME
	}
	if err := unix.Mount("", "/sys", "", flags, ""); err != nil {
		return fmt.Errorf("make the bind of /sys read-only in a user namespace: %w", err)
	}
	return nil
}

// ProbeUsernsHostNetwork reports whether this kernel lets a container in its own user
// namespace have the node's network namespace (see above): nil when a child in a new
// user namespace (its root mapped to the overflow ID 65534) could bind the node's /sys
// read-only, else why not. The probe runs once; later calls return its answer.
func ProbeUsernsHostNetwork() error { return usernsHostNetwork() }

var usernsHostNetwork = sync.OnceValue(func() error {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{probeArg0}
	cmd.Env = []string{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return fmt.Errorf("user namespaces with the node's network: %s (%w)", msg, err)
		}
		return fmt.Errorf("user namespaces with the node's network: %w", err)
	}
	return nil
})
