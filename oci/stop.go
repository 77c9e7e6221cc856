package oci

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Stopping a container: the stop signal, the SIGKILL after the timeout, and the waits for
// every process of the container and for conmon's record of the exit.

// killWait bounds the wait for a SIGKILLed container, and for conmon to record an exit.
const killWait = 10 * time.Second

// Stop sends sig to the container's init process and waits up to timeout for it to
// exit, then kills every process of the container with SIGKILL and waits for every one
// of them to exit (without a pid namespace of its own, the others outlive the init). A
// container that never started (created), or a timeout of 0, is killed at once. Stop
// returns once conmon has recorded the exit (ExitStatus answers), or it is clear conmon
// never will. An already stopped container is success; an unknown one is ErrNotFound.
//
// started says whether the caller knows the container was started. A started container
// whose conmon lives and has written no exit file is stopped without asking the runtime
// its state (see runningInit): the stop signal goes through a pidfd, and so does the
// final SIGKILL when the container has a pid namespace of its own (see killAll).
func (r *Runtime) Stop(ctx context.Context, id string, started bool, sig syscall.Signal, timeout time.Duration) error {
	if err := validID(id); err != nil {
		return err
	}
	init, pid, created, err := r.stopTarget(ctx, id, started)
	if err != nil {
		return err
	}
	if init == nil {
		r.waitExitRecorded(ctx, id)
		return nil // already stopped
	}
	defer init.Close()
	if !created && sig != syscall.SIGKILL && timeout > 0 {
		if err := signalPidfd(init, sig); err != nil {
			return fmt.Errorf("stop %s: signal %v: %w", id, sig, err)
		}
		wctx, cancel := context.WithTimeout(ctx, timeout)
		err := waitPidfd(wctx, init)
		cancel()
		if err == nil {
			r.waitExitRecorded(ctx, id)
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("stop %s: %w", id, ctx.Err())
		}
	}
	if err := r.killAll(ctx, id, init, pid, created); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	if err := waitPidfd(wctx, init); err != nil {
		return fmt.Errorf("stop %s: init process %d survived SIGKILL: %w", id, pid, err)
	}
	if err := r.waitCgroupEmpty(wctx, id); err != nil {
		return fmt.Errorf("stop %s: %w", id, err)
	}
	r.waitExitRecorded(ctx, id)
	return nil
}

// waitCgroupEmpty waits, bounded by ctx, until every process in container id's cgroup
// (its subgroups too) has exited, each one through a pidfd. It is for a container whose
// processes have all been sent SIGKILL, so that none can start another: the processes
// of a container without a pid namespace of its own (the node's, or its pod's) do not
// end with its init, and a SIGKILL takes a moment to end a process on a loaded node. A
// cgroup that is gone holds no process; one that was never recorded is not waited for.
func (r *Runtime) waitCgroupEmpty(ctx context.Context, id string) error {
	e, err := r.cgroups.get(id, func() string { return cgroupsPathOf(r.readMeta(id)) })
	if errors.Is(err, ErrNoCgroup) {
		return nil
	}
	if err != nil {
		return err
	}
	pids, err := e.m.GetAllPids()
	if cgroupGone(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("processes of the cgroup: %w", err)
	}
	for _, pid := range pids {
		f, err := openPidfd(pid)
		if err != nil {
			continue // gone
		}
		err = waitPidfd(ctx, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("process %d survived SIGKILL: %w", pid, err)
		}
	}
	return nil
}

// cgroupGone reports whether err says a cgroup is gone: its directory is not there
// (ENOENT), or it was removed while it was read (ENODEV: systemd removes a container's
// scope once its last process exited, and a read of the removed directory's
// cgroup.procs fails so, as the systemd driver's crash matrix saw under load).
func cgroupGone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENODEV)
}

// killAll SIGKILLs every process of container id, whose init process (PID pid) is behind
// the pidfd init. A started container whose init is PID 1 of a pid namespace of its own
// needs that one signal, sent through the pidfd without forking the runtime: the kernel
// kills the rest of the namespace when its init dies, and runc kill (since 1.2) signals
// only the init of such a container too. Any other container (a pod's shared pid
// namespace, the node's, one never started) is killed by the runtime: runc kill --all.
func (r *Runtime) killAll(ctx context.Context, id string, init *os.File, pid int, created bool) error {
	// The PID is read behind the pidfd: while the process has not been reaped its PID
	// is its own, so a look that finds it still alive afterwards was at it.
	if !created && namespacePid(pid) == 1 && !exited(init) {
		if err := signalPidfd(init, syscall.SIGKILL); err != nil {
			return fmt.Errorf("stop %s: kill: %w", id, err)
		}
		return nil
	}
	return r.Kill(ctx, id, syscall.SIGKILL, true)
}

// stopTarget returns a pidfd of the container's init process, its PID and whether the
// container was only created (never started); a nil pidfd when nothing runs. A started
// container with a live conmon is answered without the runtime (runningInit); otherwise
// the runtime is asked twice around opening the pidfd, so that a PID recycled in between
// cannot pass for the container's.
func (r *Runtime) stopTarget(ctx context.Context, id string, started bool) (init *os.File, pid int, created bool, err error) {
	if started {
		if f, pid, ok := r.runningInit(id); ok {
			return f, pid, false, nil
		}
	}
	st, err := r.State(ctx, id)
	if err != nil {
		return nil, 0, false, err
	}
	if st.Status == StatusStopped || st.Pid <= 0 {
		return nil, 0, false, nil
	}
	// Watch the init process through a pidfd taken before any signal, so that a
	// recycled PID cannot fool the wait.
	f, err := openPidfd(st.Pid)
	if err != nil {
		return nil, 0, false, nil // already gone
	}
	st2, err := r.State(ctx, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		f.Close()
		return nil, 0, false, err
	}
	if err != nil || st2.Pid != st.Pid || st2.Status == StatusStopped {
		f.Close()
		return nil, 0, false, nil // it exited between the two looks; the pidfd may be a stranger
	}
	return f, st.Pid, st.Status == StatusCreated, nil
}

// runningInit returns a pidfd of a started container's init process and its PID, when
// that is certain without forking the runtime: conmon lives and has written no exit file
// (Running), and the PID runc wrote at create names, behind the pidfd, a child of that
// conmon. conmon is the subreaper of the container's init; a PID recycled after the init
// died would belong to another parent. ok is false whenever any of it cannot be told.
func (r *Runtime) runningInit(id string) (init *os.File, pid int, ok bool) {
	if !r.Running(id) {
		return nil, 0, false
	}
	pid, err := readPidFile(filepath.Join(r.containerDir(id), "pid"))
	if err != nil {
		return nil, 0, false
	}
	f, err := openPidfd(pid)
	if err != nil {
		return nil, 0, false
	}
	conmon, err := r.ConmonPID(id)
	if err != nil || parentPid(pid) != conmon || !r.Running(id) {
		f.Close()
		return nil, 0, false
	}
	return f, pid, true
}
