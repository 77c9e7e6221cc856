package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Reasons of an exit (Exit.Reason), as the kubelet reads them.
const (
	ReasonCompleted = "Completed"
	ReasonError     = "Error"
	// ReasonOOMKilled: conmon saw the container's cgroup run out of memory.
	ReasonOOMKilled = "OOMKilled"
	// ReasonUnknown is the reason of an exit concluded without conmon's word: the
	// runtime definitely lost the container (a reboot), or conmon died without writing
	// the exit file.
	ReasonUnknown = "ContainerStatusUnknown"
)

// Exit is what Runtime.Exit decides about a container: that it has ended, and how, or
// that it has not.
type Exit struct {
	// Exited is true once the container has ended; Code, At and Reason say how.
	Exited bool
	Code   int
	At     time.Time
	Reason string
	// Running is true, while the container has not ended, when its process runs (or
	// is paused); false for a container created and never started.
	Running bool
}

// Exit decides whether and how a container ended: from conmon's exit file, or as
// ReasonUnknown (code 255, now) when the runtime definitely does not know the
// container (ErrNotFound: a reboot) or has it stopped while conmon never wrote an exit
// file. started says whether the caller knows the container was started. Any other
// failure to learn the container's state (the runtime binary missing or failing, a
// timeout) is returned: it says nothing about the container.
//
// A started container whose conmon lives and has written no exit file is running
// (Running): that is answered from a pidfd, without asking the runtime, so that polling
// forks nothing. The runtime is asked only when that cannot tell: a container not known
// to be started, or one whose conmon is gone without an exit file. Its queries run
// under contexts of their own, bounded by queryTimeout, that keep ctx's values but not
// its cancellation (as State's).
func (r *Runtime) Exit(ctx context.Context, id string, started bool) (Exit, error) {
	if started && r.Running(id) {
		return Exit{Running: true}, nil
	}
	code, at, ok, err := r.ExitStatus(id)
	if err != nil {
		return Exit{}, err
	}
	reason := ""
	if !ok {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queryTimeout)
		defer cancel()
		st, serr := r.State(qctx, id)
		switch {
		case errors.Is(serr, ErrNotFound):
			// The runtime lost it (a reboot): whatever it was, it no longer runs.
			code, at, reason = 255, time.Now(), ReasonUnknown
		case serr != nil:
			return Exit{}, fmt.Errorf("container %s: state unknown: %w", id, serr)
		case st.Status != StatusStopped:
			// Still alive. Running without started: started by a caller that did not
			// live to record it.
			return Exit{Running: st.Status == StatusRunning || st.Status == StatusPaused}, nil
		case !started:
			return Exit{}, nil // created, never started
		default:
			// Stopped: runc says so as soon as the init process is dead, a moment before
			// conmon has reaped it and written the exit file. Wait for conmon.
			if code, at, ok, err = r.AwaitExit(qctx, id); err != nil {
				return Exit{}, err
			}
			if !ok {
				code, at, reason = 255, time.Now(), ReasonUnknown
			}
		}
	}
	switch {
	case reason != "":
	case r.OOMKilled(id):
		reason = ReasonOOMKilled
	case code != 0:
		reason = ReasonError
	default:
		reason = ReasonCompleted
	}
	return Exit{Exited: true, Code: code, At: at, Reason: reason}, nil
}

// ExitStatus returns the exit code conmon recorded for a container and when (the
// exit file's modification time). ok is false while no exit is recorded. Exit files
// live in StateDir, so they survive a daemon restart; a container killed by a signal
// has code 128+signal.
func (r *Runtime) ExitStatus(id string) (code int, exitedAt time.Time, ok bool, err error) {
	if err := validID(id); err != nil {
		return 0, time.Time{}, false, err
	}
	f, err := os.Open(r.exitFile(id))
	if errors.Is(err, os.ErrNotExist) {
		return 0, time.Time{}, false, nil
	}
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("exit status of %s: %w", id, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("exit status of %s: %w", id, err)
	}
	b := make([]byte, 32)
	n, _ := f.Read(b)
	code, err = strconv.Atoi(strings.TrimSpace(string(b[:n])))
	if err != nil {
		return 0, time.Time{}, false, fmt.Errorf("exit status of %s: bad exit file %q", id, b[:n])
	}
	// Running no longer needs the conmon's pidfd: the exit file answers.
	r.conmons.forget(id, nil)
	return code, st.ModTime(), true, nil
}

// AwaitExit is ExitStatus for a container the runtime says has stopped: conmon writes
// the exit file only after it has reaped the container, a moment after runc already
// answers "stopped", so it waits (at most killWait, and while ctx lasts) as long as the
// container's conmon lives. ok is false when no exit file came: conmon is gone (killed)
// without writing one, or the wait ran out.
func (r *Runtime) AwaitExit(ctx context.Context, id string) (code int, exitedAt time.Time, ok bool, err error) {
	if err := validID(id); err != nil {
		return 0, time.Time{}, false, err
	}
	r.waitExitRecorded(ctx, id)
	return r.ExitStatus(id)
}

// OOMKilled reports whether conmon saw the container's cgroup run out of memory.
func (r *Runtime) OOMKilled(id string) bool {
	return validID(id) == nil && exists(filepath.Join(r.containerDir(id), "oom"))
}

// Exited lists the IDs that have an exit file, for a scan at start-up.
func (r *Runtime) Exited() ([]string, error) {
	entries, err := os.ReadDir(r.exitsDir())
	if err != nil {
		return nil, fmt.Errorf("list exit files: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if validID(e.Name()) == nil && e.Type().IsRegular() {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// WatchExits calls onExit with a container's ID when conmon writes its exit file.
// It watches the exits directory with inotify (no polling), and blocks until ctx
// ends (then it returns nil) or the watch fails. Once the watch is in place it first
// reports every exit file already there, so that nothing is missed between the
// daemon's start and the watch (or while the daemon was down); onExit may therefore
// see an ID more than once and must be idempotent; it is also called for a container
// that Delete is removing, whose exit file may be gone when onExit looks. onExit runs on WatchExits'
// goroutine: a slow onExit delays the next report, never loses it (the kernel queues
// events; on queue overflow the directory is scanned again).
func (r *Runtime) WatchExits(ctx context.Context, onExit func(id string)) error {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("watch exits: inotify: %w", err)
	}
	// Non-blocking, so the file is read through the netpoller and Close ends a Read.
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	// conmon writes the exit file to a temporary name and renames it (IN_MOVED_TO);
	// IN_CLOSE_WRITE covers a writer that writes in place.
	if _, err := unix.InotifyAddWatch(fd, r.exitsDir(), unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE); err != nil {
		return fmt.Errorf("watch exits: watch %s: %w", r.exitsDir(), err)
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()

	scan := func() error {
		ids, err := r.Exited()
		if err != nil {
			return err
		}
		for _, id := range ids {
			onExit(id)
		}
		return nil
	}
	if err := scan(); err != nil {
		return err
	}
	buf := make([]byte, 64*1024)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch exits: read: %w", err)
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&unix.IN_Q_OVERFLOW != 0:
				if err := scan(); err != nil {
					return err
				}
			case ev.Mask&unix.IN_IGNORED != 0:
				return fmt.Errorf("watch exits: %s was removed", r.exitsDir())
			default:
				name := strings.TrimRight(string(nameBytes), "\x00")
				// Temporary files have a dot in their name; IDs cannot.
				if validID(name) == nil {
					onExit(name)
				}
			}
		}
	}
}

// Processes, through pidfds: a pidfd names one process for good (a recycled PID
// cannot be confused with it) and becomes readable when the process exits, which
// the Go netpoller can wait for without tying up a thread.

// openPidfd opens a non-blocking pidfd for pid.
func openPidfd(pid int) (*os.File, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid)), nil
}

// pollExited reports whether the process behind a pidfd has exited.
func pollExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents != 0
}

// exited reports whether the process behind f has exited.
func exited(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return true
	}
	var done bool
	if err := rc.Control(func(fd uintptr) { done = pollExited(int(fd)) }); err != nil {
		return true
	}
	return done
}

// waitPidfd waits until the process behind f exits or ctx ends.
func waitPidfd(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = f.SetReadDeadline(time.Unix(1, 0))
		close(fired)
	})
	defer func() {
		if !stop() {
			<-fired // leave no deadline behind for the next wait
		}
	}()
	err = rc.Read(func(fd uintptr) bool { return pollExited(int(fd)) })
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	return nil
}

// reapPidfd reaps the process behind f if it is an exited child of this process;
// otherwise (not our child, still running, already reaped) it does nothing.
func reapPidfd(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		var info unix.Siginfo
		_ = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
	})
}

// reapChild reaps the child pid when it exits, from a goroutine parked in the
// netpoller; the goroutine ends with the child.
func reapChild(pid int) error {
	f, err := openPidfd(pid)
	if err != nil {
		return err
	}
	go func() {
		defer f.Close()
		if waitPidfd(context.Background(), f) == nil {
			reapPidfd(f)
		}
	}()
	return nil
}

// signalPidfd sends sig to the process behind f; a process that has exited is not an
// error.
func signalPidfd(f *os.File, sig unix.Signal) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return err
	}
	if errors.Is(serr, unix.ESRCH) {
		return nil
	}
	return serr
}

// parentPid returns the parent PID of a process from /proc/<pid>/stat, or -1 when that
// cannot be read (the process is gone).
func parentPid(pid int) int {
	fields := statFields(pid)
	if len(fields) < 2 {
		return -1
	}
	ppid, err := strconv.Atoi(fields[1])
	if err != nil {
		return -1
	}
	return ppid
}

// statFields returns the fields of /proc/<pid>/stat after the command name (state, ppid,
// ...), or nil when the process is gone.
func statFields(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// descendants returns the PIDs of every descendant of pid, parents before children,
// from the parent PIDs in /proc/<pid>/stat.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid := parentPid(p); ppid >= 0 {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	seen := map[int]bool{pid: true}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
				queue = append(queue, c)
			}
		}
	}
	return out
}

// killTree SIGKILLs the process behind rootFd (PID root) and all its descendants,
// waits for every one of them to exit, and reaps those that are (or became, this
// process being a subreaper) children of this process, so none is left a zombie. The
// root itself is reaped only if reapRoot is set (an os/exec command must be reaped by
// its Wait).
func killTree(ctx context.Context, root int, rootFd *os.File, reapRoot bool) error {
	procs := []*os.File{rootFd}
	for _, p := range descendants(root) {
		if f, err := openPidfd(p); err == nil {
			defer f.Close()
			procs = append(procs, f)
		}
	}
	var errs []error
	for _, f := range procs {
		if err := signalPidfd(f, unix.SIGKILL); err != nil {
			errs = append(errs, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	// Every process of the tree has exited before any is reaped: by then each orphan
	// has been handed to its new parent.
	for _, f := range procs {
		if err := waitPidfd(wctx, f); err != nil {
			errs = append(errs, fmt.Errorf("%s survived SIGKILL: %w", f.Name(), err))
		}
	}
	for i, f := range procs {
		if i > 0 || reapRoot {
			reapPidfd(f)
		}
	}
	return errors.Join(errs...)
}
