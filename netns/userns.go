package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// User is the kind of a pod's own user namespace, pinned by PinUser only (a
// multi-threaded process cannot unshare or join a user namespace).
const User Kind = "user"

// IDMap is one range of a user namespace's uid or gid map: Size IDs from
// ContainerID inside map to HostID outside.
type IDMap struct {
	ContainerID, HostID, Size uint32
}

// PinUser creates a user namespace with the given uid and gid maps and, owned
// by it, new namespaces of the given kinds (net, ipc, uts), and pins each,
// the user namespace at PinPath(dir, User, sandboxID). Namespaces owned by
// the pod's user namespace are what lets its containers' root mount sysfs
// and mqueue, and set sysctls of their own network. hostname and lo are set
// as Pin sets them.
//
// The namespaces are made by one child process, binary run as a pause
// process ("<binary> pause <sandboxID>"), cloned into all of them at once;
// the child is killed once they are pinned. A pin that already exists is an
// error (wrapping fs.ErrExist). If PinUser fails part way it removes what it
// made itself. The undo of a pinned set is Unpin of every path.
func PinUser(ctx context.Context, dir, sandboxID string, kinds []Kind, hostname string, uids, gids []IDMap, binary string) (Paths, error) {
	if err := validateID(sandboxID); err != nil {
		return nil, fmt.Errorf("pin user namespace: %w", err)
	}
	if !filepath.IsAbs(dir) || !filepath.IsAbs(binary) {
		return nil, fmt.Errorf("pin user namespace of %s: directory %q, program %q: %w: not absolute paths", sandboxID, dir, binary, ErrInvalid)
	}
	if len(uids) == 0 || len(gids) == 0 {
		return nil, fmt.Errorf("pin user namespace of %s: %w: a uid and a gid map are needed", sandboxID, ErrInvalid)
	}
	flags := unix.CLONE_NEWUSER
	all := []Kind{User}
	for _, k := range kinds {
		switch k {
		case Net, IPC, UTS:
		default:
			return nil, fmt.Errorf("pin user namespace of %s: kind %q: %w: only net, ipc and uts", sandboxID, k, ErrInvalid)
		}
		if flags&k.cloneFlag() != 0 {
			return nil, fmt.Errorf("pin user namespace of %s: kind %q: %w: listed twice", sandboxID, k, ErrInvalid)
		}
		flags |= k.cloneFlag()
		all = append(all, k)
	}
	if flags&unix.CLONE_NEWUTS == 0 {
		hostname = ""
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pin user namespace of %s: %w", sandboxID, err)
	}
	paths := make(Paths, len(all))
	for _, k := range all {
		paths[k] = PinPath(dir, k, sandboxID)
		if err := os.MkdirAll(filepath.Dir(paths[k]), 0o755); err != nil {
			return nil, fmt.Errorf("pin user namespace of %s: %w", sandboxID, err)
		}
	}

	created, err := pinUser(flags, all, paths, hostname, uids, gids, binary, sandboxID)
	if err == nil {
		return paths, nil
	}
	errs := []error{fmt.Errorf("pin user namespace of %s: %w", sandboxID, err)}
	undoCtx := context.WithoutCancel(ctx)
	for i := len(created) - 1; i >= 0; i-- {
		if err := Unpin(undoCtx, created[i]); err != nil {
			errs = append(errs, fmt.Errorf("undo: %w", err))
		}
	}
	return nil, errors.Join(errs...)
}

func sysProcIDMap(maps []IDMap) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(maps))
	for i, m := range maps {
		out[i] = syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}

// pinUser starts the child that makes the namespaces, pins them from its
// /proc/<pid>/ns, sets the host name and lo, and kills the child. It returns
// the pin files it created.
func pinUser(flags int, kinds []Kind, paths Paths, hostname string, uids, gids []IDMap, binary, sandboxID string) ([]string, error) {
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer devNull.Close()
	// The child runs as the namespace's root, a host ID that may not reach binary
	// through directories only the host's root may enter: /proc/self/exe of the
	// forked child is binary itself, reached without walking its directories, when
	// binary is this process's own program (the daemon's pause binary is).
	path := binary
	if self, err := os.Executable(); err == nil && self == binary {
		path = "/proc/self/exe"
	}
	cmd := &exec.Cmd{
		Path: path, Args: []string{binary, pauseArg, sandboxID}, Env: []string{}, Dir: "/",
		Stdin: devNull, Stdout: devNull, Stderr: devNull,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 uintptr(flags),
			UidMappings:                sysProcIDMap(uids),
			GidMappings:                sysProcIDMap(gids),
			GidMappingsEnableSetgroups: true,
			Setsid:                     true,
		},
	}
	primeForkChecks()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s in new namespaces: %w", binary, err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	var created []string
	nsDir := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/"
	for _, k := range kinds {
		p := paths[k]
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return created, fmt.Errorf("create pin file: %w", err)
		}
		created = append(created, p)
		if err := f.Close(); err != nil {
			return created, fmt.Errorf("create pin file: %w", err)
		}
		if err := unix.Mount(nsDir+string(k), p, "", unix.MS_BIND, ""); err != nil {
			return created, fmt.Errorf("bind mount %s on %s: %w", nsDir+string(k), p, err)
		}
	}
	if hostname == "" && flags&unix.CLONE_NEWNET == 0 {
		return created, nil
	}
	// The host name and lo are set from a thread that joins the new UTS and network
	// namespaces (the daemon's root may: they belong to a child of its user namespace).
	var setupErr error
	onDisposableThread(func() { setupErr = setupPinned(paths, hostname) })
	return created, setupErr
}

// setupPinned joins the pinned UTS and network namespaces on the calling
// (disposable) thread to set the host name and bring lo up.
func setupPinned(paths Paths, hostname string) error {
	for _, s := range []struct {
		kind Kind
		flag int
		do   func() error
	}{
		{UTS, unix.CLONE_NEWUTS, func() error { return unix.Sethostname([]byte(hostname)) }},
		{Net, unix.CLONE_NEWNET, loopbackUp},
	} {
		p, ok := paths[s.kind]
		if !ok || (s.kind == UTS && hostname == "") {
			continue
		}
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s: %w", p, err)
		}
		err = unix.Setns(fd, s.flag)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("join %s: %w", p, err)
		}
		if err := s.do(); err != nil {
			return fmt.Errorf("in %s: %w", p, err)
		}
	}
	return nil
}
