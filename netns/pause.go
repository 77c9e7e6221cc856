package netns

// # Shared pid namespaces
//
// A pid namespace cannot be pinned like the others: unshare(CLONE_NEWPID)
// does not move the caller, a pid namespace cannot be pinned before its init
// (PID 1) exists, and one whose init has died takes no new processes. A pod
// that shares one pid namespace among its containers therefore gets a pause
// process as the namespace's init ([StartPause]), and the namespace is pinned
// at <dir>/pidns/<sandboxID> so that containers join it by path.
//
// The pause process is PID 1 of the pod's containers that share its pid
// namespace: whatever they read of /proc/1 (its network in /proc/1/net, its
// namespaces in /proc/1/ns) must be the pod's, not the node's. So it is
// started in the pod's pinned network, IPC and UTS namespaces, those the pod
// does not share with the node, and takes a cgroup namespace of its own once
// it is in its cgroup (see pauseproc.go).
//
// The pause process is `<program> pause <sandboxID>` (the pause program, see
// pauseproc.go), forked from a disposable
// thread that unshared its pid namespace for children, then the namespace is
// pinned. [StopPause] finds the process through the pin (PID 1 of the pinned
// namespace) and, when there is no pin (a crash between the start and the
// pin), by its command line: PID 1 of a pid namespace other than the caller's,
// running "pause <sandboxID>", the sandbox ID being the pin's file name. Both
// are known before the step acts, so an undo finds the process whatever moment
// a crash picked. A remembered PID is never trusted: it may have been recycled.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/crijournal/crijournal/internal/pause"
	"golang.org/x/sys/unix"
)

// pauseStopWait bounds how long StopPause waits for the pause process to die
// after SIGKILL. Its death waits for every other process of the namespace to
// be reaped, which a process stuck in the kernel can hold up; StopPause then
// fails, keeps the pin (the handle on the process) and can be retried.
const pauseStopWait = 10 * time.Second

// StartPause creates a new pid namespace with a pause process as its init and
// pins it at PinPath(dir, PID, sandboxID). The process runs the pause program
// prog (see newPauseStart) in a mount namespace of its own, in the sandbox's
// namespaces of the kinds join (net, ipc, uts: pinned by Pin at PinPath(dir,
// kind, sandboxID) before; the caller's for the kinds not listed), in prog's
// cgroup and a cgroup namespace of its own rooted there, with prog's
// oom_score_adj, and StartPause returns once it reports that it is confined. It has no
// parent-death signal: like a container, it outlives a restart of the daemon.
// The caller's process reaps it if it dies while the caller runs.
//
// StartPause returns the pin's path and the process's PID (in the caller's pid
// namespace). A pin that already exists is an error (wrapping fs.ErrExist) and
// is left alone. If StartPause fails part way it removes what it made itself
// (the process, the pin and the cgroup), so a failed StartPause leaves nothing
// behind. ctx bounds the wait for the process to confine itself.
func StartPause(ctx context.Context, dir, sandboxID string, join []Kind, prog PauseProgram) (path string, pid int, err error) {
	if err := validateID(sandboxID); err != nil {
		return "", 0, fmt.Errorf("start pause process: %w", err)
	}
	if !filepath.IsAbs(dir) {
		return "", 0, fmt.Errorf("start pause process of %s: directory %q: %w: not an absolute path", sandboxID, dir, ErrInvalid)
	}
	if err := prog.validate(); err != nil {
		return "", 0, fmt.Errorf("start pause process of %s: %w", sandboxID, err)
	}
	joined := make(Paths, len(join))
	for _, k := range join {
		if k != Net && k != IPC && k != UTS {
			return "", 0, fmt.Errorf("start pause process of %s: kind %q: %w: only net, ipc and uts are joined", sandboxID, k, ErrInvalid)
		}
		if _, ok := joined[k]; ok {
			return "", 0, fmt.Errorf("start pause process of %s: kind %q: %w: listed twice", sandboxID, k, ErrInvalid)
		}
		joined[k] = PinPath(dir, k, sandboxID)
	}
	if err := ctx.Err(); err != nil {
		return "", 0, fmt.Errorf("start pause process of %s: %w", sandboxID, err)
	}
	path = PinPath(dir, PID, sandboxID)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", 0, fmt.Errorf("start pause process of %s: %w", sandboxID, err)
	}
	// No Pdeathsig: it would also fire when the forking thread dies, which it does at
	// once (see onDisposableThread). The thread makes the new pid namespace.
	start, err := newPauseStart(prog, sandboxID, &syscall.SysProcAttr{})
	if err != nil {
		return "", 0, fmt.Errorf("start pause process of %s: %w", sandboxID, err)
	}
	defer start.close()
	cmd := start.cmd

	primeForkChecks()
	var res struct {
		created bool
		err     error
	}
	onDisposableThread(func() {
		res.created, res.err = startPauseOnThisThread(path, cmd, joined)
	})
	if cmd.Process != nil {
		// The process is the caller's child until the caller dies: reap it.
		pid = cmd.Process.Pid
		reapWhenExited(cmd)
	}
	if res.err == nil {
		res.err = prog.place(pid)
	}
	if res.err == nil {
		start.place()
		res.err = start.waitReady(ctx)
	}
	if res.err == nil {
		var pin nsID
		if pin, res.err = statPin(path); res.err == nil && !(pauseMatcher{pin: &pin}).matches(pid) {
			res.err = fmt.Errorf("process %d is not PID 1 of the pinned pid namespace", pid)
		}
		if res.err == nil {
			return path, pid, nil
		}
	}
	errs := []error{fmt.Errorf("start pause process of %s: %w", sandboxID, res.err)}
	if res.created {
		// The undo must run even if ctx is done.
		if err := StopPause(context.WithoutCancel(ctx), path, pid); err != nil {
			errs = append(errs, fmt.Errorf("undo: %w", err))
		} else if prog.Cgroup != "" {
			if err := RemoveCgroup(prog.Cgroup); err != nil {
				errs = append(errs, fmt.Errorf("undo: %w", err))
			}
		}
	}
	return "", 0, errors.Join(errs...)
}

// primeForkChecks makes the os package run, on the calling thread, its
// one-time check that clone(CLONE_PIDFD) works, which forks a child that exits
// at once. Run on the thread that unshared its pid namespace, that child would
// become the namespace's init and die with it, and the pause process could
// then not be forked into it (ENOMEM).
var primeForkChecks = sync.OnceFunc(func() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Release()
	}
})

// reapWhenExited reaps the started cmd when it exits, from a goroutine parked
// in the netpoller on a pidfd rather than from one blocked in wait (which
// would hold an OS thread for each pod for as long as the pod lives).
func reapWhenExited(cmd *exec.Cmd) {
	pid := cmd.Process.Pid
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		go func() { _ = cmd.Wait() }()
		return
	}
	_ = cmd.Process.Release() // its own handle; the child is not reaped by it
	f := os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid))
	go func() {
		defer f.Close()
		rc, err := f.SyscallConn()
		if err != nil {
			return
		}
		// A pidfd reads ready once the process has exited.
		if err := rc.Read(func(fd uintptr) bool { return pidfdExited(int(fd)) }); err != nil {
			return
		}
		_ = rc.Control(func(fd uintptr) {
			var info unix.Siginfo
			_ = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
		})
	}()
}

// pidfdExited reports whether the process behind a pidfd has exited.
func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents != 0
}

// startPauseOnThisThread does the work of StartPause on a locked thread that
// will die afterwards: a new pid namespace for the thread's children, the
// pinned namespaces join entered, the process forked from this thread into
// them (as PID 1 of the new pid namespace), then the pin. It reports whether
// it created the pin file (the undo is then the caller's).
func startPauseOnThisThread(path string, cmd *exec.Cmd, join Paths) (bool, error) {
	if err := unix.Unshare(unix.CLONE_NEWPID); err != nil {
		return false, fmt.Errorf("unshare: %w", err)
	}
	for _, k := range []Kind{Net, IPC, UTS} {
		if p, ok := join[k]; ok {
			if err := enter(p, k); err != nil {
				return false, err
			}
		}
	}
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return false, fmt.Errorf("create pin file: %w", err)
	}
	if err := f.Close(); err != nil {
		return true, fmt.Errorf("create pin file: %w", err)
	}
	// exec.Cmd.Start forks on the calling thread, which is locked to this
	// goroutine: the child lands in the thread's namespaces, and in the new pid
	// namespace as its PID 1. Only then
	// can the namespace be pinned (the kernel hides a pid namespace that has
	// no init yet).
	if err := cmd.Start(); err != nil {
		return true, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	const src = "/proc/thread-self/ns/pid_for_children"
	if err := unix.Mount(src, path, "", unix.MS_BIND, ""); err != nil {
		return true, fmt.Errorf("bind mount %s on %s: %w", src, path, err)
	}
	return true, nil
}

// StopPause kills the pause process of the pid namespace pinned at path,
// waits until it is gone, and removes the pin. It is idempotent: no pin and no
// process, or a process that is already gone (or a zombie nobody has reaped
// yet), is success, and only the pin is removed.
//
// The process killed is found as PID 1 of the pinned namespace, or as PID 1
// of a pid namespace other than the caller's whose command line is
// "<binary> pause <sandboxID>", sandboxID being the pin's file name: the pin
// is missing after a crash between the start of the process and the pin.
// pid, when not 0, is a hint (StartPause's answer) that is tried first; a pid
// that is neither (a recycled PID, a stranger) is never signalled. The kill
// goes through a pidfd taken before the check, so the PID cannot be recycled
// between the check and the signal. Killing the init of a
// pid namespace kills every process in it, and the init dies only once all of
// them are reaped: if it is not gone within 10 seconds StopPause fails and
// keeps the pin, so that a retry finds it.
func StopPause(ctx context.Context, path string, pid int) error {
	if err := checkPinPath(path); err != nil {
		return fmt.Errorf("stop pause process: %w", err)
	}
	if filepath.Base(filepath.Dir(path)) != string(PID)+"ns" {
		return fmt.Errorf("stop pause process: pin path %q: %w: not in a pidns directory", path, ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop pause process of %s: %w", path, err)
	}
	m := pauseMatcher{sandboxID: filepath.Base(path)}
	if IsPinned(path) {
		pin, err := statPin(path)
		if err != nil {
			return fmt.Errorf("stop pause process of %s: %w", path, err)
		}
		m.pin = &pin
	}
	self, err := statPin("/proc/self/ns/pid")
	if err != nil {
		return fmt.Errorf("stop pause process of %s: %w", path, err)
	}
	m.self = self
	if err := m.kill(ctx, pid); err != nil {
		return fmt.Errorf("stop pause process of %s: %w", path, err)
	}
	return Unpin(ctx, path)
}

// PauseAlive reports whether path is a pinned pid namespace whose init (the
// pause process) is alive.
func PauseAlive(path string) bool {
	return PausePID(path) > 0
}

// PausePID returns the PID (in the caller's pid namespace) of the pause process
// whose pid namespace is pinned at path, or 0 when none is alive.
func PausePID(path string) int {
	if !IsPinned(path) {
		return 0
	}
	pin, err := statPin(path)
	if err != nil {
		return 0
	}
	m := pauseMatcher{pin: &pin}
	return m.find(0)
}

// nsID identifies a namespace: the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

// statPin returns the identity of the namespace at path (a pin or a
// /proc/<pid>/ns link).
func statPin(path string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return nsID{st.Dev, st.Ino}, nil
}

// pauseMatcher recognises the pause process of one sandbox.
type pauseMatcher struct {
	pin       *nsID  // the pinned namespace, if there is a pin
	self      nsID   // the caller's pid namespace: never the pause's
	sandboxID string // "" to match by the pin only
}

// kill kills the pause process (trying hint first) and waits until it has
// exited; when none is found it returns nil.
func (m pauseMatcher) kill(ctx context.Context, hint int) error {
	deadline := time.Now().Add(pauseStopWait)
	for {
		pid := m.find(hint)
		if pid == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pause process %d still runs %v after SIGKILL", pid, pauseStopWait)
		}
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue // gone meanwhile: look again
		}
		if err != nil {
			return fmt.Errorf("pidfd_open %d: %w", pid, err)
		}
		err = m.killAndWait(ctx, fd, pid, deadline)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
}

// killAndWait sends SIGKILL through fd to pid, once pid is checked to be the
// pause process (after the pidfd was taken: the check then speaks of the
// process the pidfd holds, or that process is gone and the signal fails), and
// waits until it has exited.
func (m pauseMatcher) killAndWait(ctx context.Context, fd, pid int, deadline time.Time) error {
	if !m.matches(pid) {
		return nil // exited (or a zombie) since find saw it
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill pause process %d: %w", pid, err)
	}
	// A pidfd polls readable once the process has exited (a zombie included).
	for {
		wait := min(time.Until(deadline), 100*time.Millisecond)
		if wait <= 0 {
			return fmt.Errorf("pause process %d still runs %v after SIGKILL: a process of its pid namespace is not reaped", pid, pauseStopWait)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, int(wait.Milliseconds())+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("wait for pause process %d: %w", pid, err)
		}
		if n > 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for pause process %d: %w", pid, err)
		}
	}
}

// find returns the PID of the live pause process, or 0 if there is none.
// hint, if not 0, is checked first.
func (m pauseMatcher) find(hint int) int {
	if hint > 0 && m.matches(hint) {
		return hint
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == hint {
			continue
		}
		if m.matches(pid) {
			return pid
		}
	}
	return 0
}

// matches reports whether pid is the live (not zombie) pause process: PID 1 of
// the pinned pid namespace, or PID 1 of a pid namespace other than the
// caller's running "pause <sandboxID>".
func (m pauseMatcher) matches(pid int) bool {
	proc := "/proc/" + strconv.Itoa(pid)
	ns, err := statPin(proc + "/ns/pid")
	if err != nil {
		return false
	}
	byPin := m.pin != nil && ns == *m.pin
	if !byPin && (m.sandboxID == "" || ns == m.self) {
		return false
	}
	if !isLiveInit(proc) {
		return false
	}
	if byPin {
		return true
	}
	cmdline, err := os.ReadFile(proc + "/cmdline")
	if err != nil {
		return false
	}
	args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")
	return len(args) == 3 && args[1] == pause.Arg && args[2] == m.sandboxID
}

// isLiveInit reports whether the process at proc (/proc/<pid>) is not a zombie
// and is PID 1 of its own pid namespace.
func isLiveInit(proc string) bool {
	b, err := os.ReadFile(proc + "/status")
	if err != nil {
		return false
	}
	var state, nspid string
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			state = strings.TrimSpace(v)
		} else if v, ok := strings.CutPrefix(line, "NSpid:"); ok {
			nspid = v
		}
	}
	if state == "" || state[0] == 'Z' || state[0] == 'X' {
		return false
	}
	ids := strings.Fields(nspid)
	return len(ids) > 1 && ids[len(ids)-1] == "1"
}

// WatchPause calls onExit once the pause process holding the pid namespace pinned at path
// exits, so that its sandbox can be reported not ready without polling. It finds the
// process through the pin (as PauseAlive does), so it also works for a pause process
// started before a daemon restart, and waits on a pidfd in a goroutine until the process
// exits or ctx ends. When no pause process is alive it calls onExit at once.
func WatchPause(ctx context.Context, path string, onExit func()) error {
	if !IsPinned(path) {
		onExit()
		return nil
	}
	pin, err := statPin(path)
	if err != nil {
		return fmt.Errorf("watch pause process of %s: %w", path, err)
	}
	pid := pauseMatcher{pin: &pin}.find(0)
	if pid == 0 {
		onExit()
		return nil
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		onExit()
		return nil
	}
	if err != nil {
		return fmt.Errorf("watch pause process %d: pidfd_open: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid))
	go func() {
		defer f.Close()
		exited := make(chan struct{})
		go func() {
			defer close(exited)
			rc, err := f.SyscallConn()
			if err != nil {
				return
			}
			// A pidfd reads ready once the process has exited; the read fails when f
			// is closed (ctx ended).
			_ = rc.Read(func(fd uintptr) bool { return pidfdExited(int(fd)) })
		}()
		select {
		case <-exited:
			if ctx.Err() == nil {
				onExit()
			}
		case <-ctx.Done():
			f.Close()
			<-exited
		}
	}()
	return nil
}
