package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// User is the kind of a pod's own user namespace, pinned by PinUser only (a
// multi-threaded process cannot unshare or join a user namespace).
const User Kind = "user"

// IDMap is one range of a user namespace's uid or gid map: Size IDs from
// ContainerID inside map to HostID outside. It is the OCI spec's type, as
// storage.IDMap is, so that one mapping serves both.
type IDMap = specs.LinuxIDMapping

// PinUser creates a user namespace with the given uid and gid maps and, owned
// by it, new namespaces of the given kinds (net, ipc, uts and optionally pid),
// and pins each, the user namespace at PinPath(dir, User, sandboxID).
// Namespaces owned by the pod's user namespace are what lets its containers'
// root mount sysfs, mqueue and proc, and set sysctls of their own network.
// hostname and lo are set as Pin sets them.
//
// The namespaces are made by one child process, the pause program prog
// ("<program> pause <sandboxID>", see package internal/pause), cloned into all
// of them at once and always into new pid and mount namespaces, as the pid
// namespace's init. It is pinned once it reports that it is confined. With PID
// among kinds the child stays, as the pause process of the pod's shared pid
// namespace (as StartPause's does), in prog's cgroup and a cgroup namespace of
// its own rooted there, with prog's oom_score_adj, and its PID is returned;
// otherwise it is killed once the namespaces are pinned and the PID returned
// is 0. Either way
// a child left by a crash is found by StopPause (PID 1 of another pid
// namespace running "pause <sandboxID>"). A pin that already exists is an
// error (wrapping fs.ErrExist). If PinUser fails part way it removes what it
// made itself. The undo of a pinned set is StopPause of PinPath(dir, PID,
// sandboxID), then RemoveCgroup of prog's cgroup, then Unpin of every path (see
// UserPinStep).
func PinUser(ctx context.Context, dir, sandboxID string, kinds []Kind, hostname string, uids, gids []IDMap, prog PauseProgram) (Paths, int, error) {
	if err := validateID(sandboxID); err != nil {
		return nil, 0, fmt.Errorf("pin user namespace: %w", err)
	}
	if !filepath.IsAbs(dir) {
		return nil, 0, fmt.Errorf("pin user namespace of %s: directory %q: %w: not an absolute path", sandboxID, dir, ErrInvalid)
	}
	if err := prog.validate(); err != nil {
		return nil, 0, fmt.Errorf("pin user namespace of %s: %w", sandboxID, err)
	}
	if len(uids) == 0 || len(gids) == 0 {
		return nil, 0, fmt.Errorf("pin user namespace of %s: %w: a uid and a gid map are needed", sandboxID, ErrInvalid)
	}
	flags := unix.CLONE_NEWUSER | unix.CLONE_NEWPID
	all := []Kind{User}
	keep := false
	for _, k := range kinds {
		switch k {
		case Net, IPC, UTS:
		case PID:
			if keep {
				return nil, 0, fmt.Errorf("pin user namespace of %s: kind %q: %w: listed twice", sandboxID, k, ErrInvalid)
			}
			keep = true
			all = append(all, k)
			continue
		default:
			return nil, 0, fmt.Errorf("pin user namespace of %s: kind %q: %w: only net, ipc, uts and pid", sandboxID, k, ErrInvalid)
		}
		if flags&k.cloneFlag() != 0 {
			return nil, 0, fmt.Errorf("pin user namespace of %s: kind %q: %w: listed twice", sandboxID, k, ErrInvalid)
		}
		flags |= k.cloneFlag()
		all = append(all, k)
	}
	if flags&unix.CLONE_NEWUTS == 0 {
		hostname = ""
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("pin user namespace of %s: %w", sandboxID, err)
	}
	paths := make(Paths, len(all))
	for _, k := range all {
		paths[k] = PinPath(dir, k, sandboxID)
		if err := os.MkdirAll(filepath.Dir(paths[k]), 0o755); err != nil {
			return nil, 0, fmt.Errorf("pin user namespace of %s: %w", sandboxID, err)
		}
	}

	created, pid, err := pinUser(ctx, flags, all, paths, hostname, uids, gids, prog, sandboxID, keep)
	if err == nil {
		return paths, pid, nil
	}
	errs := []error{fmt.Errorf("pin user namespace of %s: %w", sandboxID, err)}
	undoCtx := context.WithoutCancel(ctx)
	for i := len(created) - 1; i >= 0; i-- {
		if err := Unpin(undoCtx, created[i]); err != nil {
			errs = append(errs, fmt.Errorf("undo: %w", err))
		}
	}
	return nil, 0, errors.Join(errs...)
}

func sysProcIDMap(maps []IDMap) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(maps))
	for i, m := range maps {
		out[i] = syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}

// pinUser starts the child that makes the namespaces, a pause process (see
// newPauseStart), waits until it is confined, pins the namespaces from its
// /proc/<pid>/ns and sets the host name and lo. It kills the child unless keep is set
// and all went well; a kept child is put in prog's cgroup, with prog's oom_score_adj,
// and reaped when it exits (see reapWhenExited). It returns the pin files it created and the kept child's PID.
func pinUser(ctx context.Context, flags int, kinds []Kind, paths Paths, hostname string, uids, gids []IDMap, prog PauseProgram, sandboxID string, keep bool) (created []string, pid int, err error) {
	start, err := newPauseStart(prog, sandboxID, &syscall.SysProcAttr{
		Cloneflags:                 uintptr(flags),
		UidMappings:                sysProcIDMap(uids),
		GidMappings:                sysProcIDMap(gids),
		GidMappingsEnableSetgroups: true,
		// The root of the new user namespace, which owns its new mount namespace: a
		// clone keeps the caller's host IDs, unmapped there, which exec would leave
		// without the capabilities the process needs to confine itself.
		Credential: &syscall.Credential{Uid: 0, Gid: 0},
	})
	if err != nil {
		return nil, 0, err
	}
	defer start.close()
	cmd := start.cmd
	primeForkChecks()
	if err := cmd.Start(); err != nil {
		return nil, 0, fmt.Errorf("start %s in new namespaces: %w", prog.Path, err)
	}
	joined := false
	defer func() {
		if keep && err == nil {
			pid = cmd.Process.Pid
			reapWhenExited(cmd)
			return
		}
		// The init of its pid namespace: SIGKILL from here ends it (and the namespace).
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if joined {
			if rerr := RemoveCgroup(prog.Cgroup); rerr != nil {
				err = errors.Join(err, fmt.Errorf("undo: %w", rerr))
			}
		}
	}()
	if keep {
		joined = prog.Cgroup != "" // Apply may create the cgroup and then fail
		if err := prog.place(cmd.Process.Pid); err != nil {
			return nil, 0, err
		}
	}
	start.place()
	if err := start.waitReady(ctx); err != nil {
		return nil, 0, err
	}
	created, err = pinFrom("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/", kinds, paths)
	if err != nil || (hostname == "" && flags&unix.CLONE_NEWNET == 0) {
		return created, 0, err
	}
	// The host name and lo are set from a thread that joins the new UTS and network
	// namespaces (the daemon's root may: they belong to a child of its user namespace).
	onDisposableThread(func() { err = setupPinned(paths, hostname) })
	return created, 0, err
}

// setupPinned joins the pinned UTS and network namespaces on the calling
// (disposable) thread to set the host name and bring lo up.
func setupPinned(paths Paths, hostname string) error {
	for _, s := range []struct {
		kind Kind
		do   func() error
	}{
		{UTS, func() error { return unix.Sethostname([]byte(hostname)) }},
		{Net, loopbackUp},
	} {
		p, ok := paths[s.kind]
		if !ok || (s.kind == UTS && hostname == "") {
			continue
		}
		if err := enter(p, s.kind); err != nil {
			return err
		}
		if err := s.do(); err != nil {
			return fmt.Errorf("in %s: %w", p, err)
		}
	}
	return nil
}
