// Package pause is the pause process: PID 1 of a pod's shared pid namespace, the
// program cmd/crijournal-pause. The daemon starts it (see netns.StartPause and
// netns.PinUser) in new pid and mount namespaces, in the pod's network, IPC and UTS
// namespaces (those the pod does not share with the node) and, for a pod with its own
// user namespace, in that user namespace. Once the daemon has placed it in its cgroup,
// with the oom_score_adj of a pause container (see [EnvPlacedFD]), it unshares a cgroup
// namespace of its own, rooted there, as runc gives a pause container one. It owns
// nothing else.
//
// A container of the pod sees the pause process as its PID 1, and anything it can
// reach through /proc/1 (root, cwd, fds, the network of /proc/1/net) is the pause
// process's. So before it does anything else the pause process confines itself ([Main]):
//
//   - its mount namespace holds one mount, an empty read-only tmpfs, as its root and
//     working directory: every mount it inherited from the node is detached;
//   - it runs as an unprivileged user (the pod's run_as_user and run_as_group, or
//     65535 as the Kubernetes pause image does), with no supplementary groups;
//   - it keeps no capability (effective, permitted, inheritable, ambient or bounding),
//     on every thread;
//   - no new privileges, and a seccomp filter that allows only the system calls the
//     program makes (see filter.go), on every thread.
//
// It then reports on file descriptor [ReadyFD] that it is confined, or why it could
// not be (and exits with status 1): the daemon does not hand the pid namespace to a
// container before. From then on it reaps every child it is handed (orphans of the
// pod's containers) and exits with status 0 on SIGTERM or SIGINT, as the Kubernetes
// pause image does.
//
// A sleeping Go program keeps a few MiB of memory; the pause process of every pod
// should keep under one. So once confined, when the daemon passes it the sleeper
// (cmd/crijournal-pause-sleep, a small static C program installed beside the pause
// program, see [SleeperPath] and [EnvSleeperFD]), the Go program executes it as its
// last act: its namespaces, root, user, capabilities (none, even for uid 0: an exec
// gives a process no more than its bounding set, which is empty), no-new-privileges and
// seccomp filter carry over, and the sleeper reports ready on [ReadyFD] and does what
// the Go loop does, with the same signals and exit statuses. Without a sleeper the Go
// program reports ready and loops itself, as it always did; with one that it cannot
// execute it reports the error.
//
// The program must be built without cgo: a Go program's threads exist before main
// runs, and capabilities and no-new-privileges are per thread, which only
// syscall.AllThreadsSyscall (unavailable with cgo) changes on every thread.
package pause

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	// Arg is the pause program's first argument; the second is the sandbox ID, a
	// label that ps shows and that lets the daemon recognise its pause processes.
	Arg = "pause"
	// EnvUser names the environment variable that carries "<uid>:<gid>", the user
	// the pause process runs as once confined. Missing, it is [DefaultUser].
	EnvUser = "CRIJOURNAL_PAUSE_USER"
	// EnvStarterMountNS names the environment variable that carries the starter's
	// mount namespace ("<dev>:<inode>" of its /proc/thread-self/ns/mnt): the pause
	// process refuses to confine itself in that namespace, the node's, whose mounts it
	// would otherwise detach. Missing, it refuses too.
	EnvStarterMountNS = "CRIJOURNAL_PAUSE_STARTER_MNTNS"
	// ReadyFD is the file descriptor on which the pause process writes [Ready] once it
	// is confined, or an error message (then it exits with status 1), and closes it.
	ReadyFD = 3
	// Ready is what the pause process writes on ReadyFD once it is confined.
	Ready = "ready\n"
	// EnvSleeperFD names the environment variable that carries the file descriptor
	// (above ReadyFD) of the sleeper, which the pause process executes once confined.
	// Missing, the Go program stays and waits for signals itself.
	EnvSleeperFD = "CRIJOURNAL_PAUSE_SLEEPER_FD"
	// EnvPlacedFD names the environment variable that carries the file descriptor
	// (above ReadyFD) of the pipe on which the starter writes [Placed], and closes it,
	// once the process is placed: in its cgroup, with its oom_score_adj. The process
	// waits for it before it confines itself, then unshares its cgroup namespace,
	// rooted at that cgroup. Anything else (EOF: the starter gave up) is an error.
	// Missing, the process does not wait and keeps its starter's cgroup namespace.
	EnvPlacedFD = "CRIJOURNAL_PAUSE_PLACED_FD"
	// Placed is what the starter writes on the EnvPlacedFD pipe once the process is
	// placed.
	Placed = "placed\n"
	// SleeperName is the sleeper's file name (cmd/crijournal-pause-sleep), beside the
	// pause program (see SleeperPath).
	SleeperName = "crijournal-pause-sleep"
)

// SleeperPath returns where the sleeper of the pause program at program is: beside it.
func SleeperPath(program string) string {
	return filepath.Join(filepath.Dir(program), SleeperName)
}

// DefaultUser is the uid and gid of the Kubernetes pause image (65535, "nobody" of
// many images): the pause process's user when the pod names none.
const DefaultUser = 65535

// rootDir is where the pause process mounts the tmpfs that becomes its root before it
// pivots into it. Any directory of the node's tree would do (the mount is in the pause
// process's own namespace and is gone with the node's tree); /proc is one every node has.
const rootDir = "/proc"

// init names the process after its program, as ps shows it: the daemon executes it
// through /proc/self/fd/<n>, which would name it "<n>". It runs on the main thread,
// whose name is the process's.
func init() {
	if name, err := unix.BytePtrFromString(filepath.Base(os.Args[0])); err == nil {
		_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(name)), 0, 0, 0)
	}
}

// Main is the pause program: it confines the process, then executes the sleeper if it
// was given one, or reports on ReadyFD and reaps children until SIGTERM or SIGINT. It
// returns the exit status.
func Main() int {
	// The handlers first: a signal sent while the process confines itself is not lost.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT)
	// SIGHUP last: once /proc/<pid>/status shows it ignored, so are the others. The
	// kernel shields a namespace's init only from signals it has no handler for, and
	// the Go runtime would turn these into an exit, which kills every process of the pod.
	signal.Ignore(unix.SIGQUIT, unix.SIGABRT, unix.SIGHUP)

	ready := os.NewFile(ReadyFD, "ready")
	sleeper, err := parseFD(EnvSleeperFD, os.Getenv(EnvSleeperFD))
	placed := -1
	if err == nil {
		placed, err = parseFD(EnvPlacedFD, os.Getenv(EnvPlacedFD))
	}
	if err == nil {
		err = confine(os.Getenv(EnvUser), os.Getenv(EnvStarterMountNS), placed, sleeper)
	}
	// The sleeper would not see a SIGTERM or SIGINT the handler took meanwhile: the Go
	// program stays to act on it. (One that comes between this look and the exec is
	// lost; the daemon sends none: it kills with SIGKILL.)
	stopped := false
	if err == nil && sleeper >= 0 {
		if stopped = stopRequested(sigs); !stopped {
			err = execSleeper(sleeper) // returns only if it failed
		}
	}
	if err != nil {
		fmt.Fprintf(ready, "pause process: %v\n", err)
		return 1
	}
	if _, err := ready.WriteString(Ready); err != nil {
		return 1
	}
	ready.Close()
	if stopped {
		return 0
	}

	reapChildren() // anything that died before the handler was there
	for sig := range sigs {
		if sig != unix.SIGCHLD {
			signal.Stop(sigs)
			return 0
		}
		reapChildren()
	}
	return 0
}

// stopRequested takes the signals the handler holds and reports whether one of them is
// SIGTERM or SIGINT.
func stopRequested(sigs <-chan os.Signal) bool {
	for {
		select {
		case sig := <-sigs:
			if sig != unix.SIGCHLD {
				return true
			}
		default:
			return false
		}
	}
}

// reapChildren waits for every child that has exited, without blocking.
func reapChildren() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
	}
}

// confine does what the package's doc lists, in an order where each step still has the
// privilege it needs: the cgroup namespace (once placed) and the root first (mounts),
// then the user and capabilities, then no-new-privileges and the seccomp filter.
// placed, if not -1, is the file descriptor of the pipe on which the starter says the
// process is placed (see EnvPlacedFD). sleeper, if not -1, is the sleeper's file
// descriptor, which it keeps open (close-on-exec).
func confine(user, starterMountNS string, placed, sleeper int) error {
	uid, gid, err := parseUser(user)
	if err != nil {
		return err
	}
	if err := checkOwnNamespaces(starterMountNS); err != nil {
		return err
	}
	if placed >= 0 {
		if err := waitPlaced(placed); err != nil {
			return err
		}
		if err := unshareCgroupNamespace(); err != nil {
			return err
		}
	}
	if err := closeInheritedFiles(sleeper); err != nil {
		return fmt.Errorf("close inherited files: %w", err)
	}
	if err := emptyRoot(); err != nil {
		return err
	}
	if err := dropPrivileges(uid, gid); err != nil {
		return err
	}
	return installFilter()
}

// closeInheritedFiles closes every file but stdin, stdout, stderr, ReadyFD and sleeper
// (the daemon may pass the program's own file as fd 4 to exec it), and makes sleeper
// close-on-exec: the sleeper's program keeps no file but the first four.
func closeInheritedFiles(sleeper int) error {
	if sleeper < 0 {
		return unix.CloseRange(ReadyFD+1, ^uint(0), 0)
	}
	if sleeper > ReadyFD+1 {
		if err := unix.CloseRange(ReadyFD+1, uint(sleeper-1), 0); err != nil {
			return err
		}
	}
	if err := unix.CloseRange(uint(sleeper+1), ^uint(0), 0); err != nil {
		return err
	}
	_, err := unix.FcntlInt(uintptr(sleeper), unix.F_SETFD, unix.FD_CLOEXEC)
	return err
}

// parseFD parses the value s of the environment variable name (EnvSleeperFD or
// EnvPlacedFD): a file descriptor above ReadyFD, or -1 for "" (none).
func parseFD(name, s string) (int, error) {
	if s == "" {
		return -1, nil
	}
	fd, err := strconv.Atoi(s)
	if err != nil || fd <= ReadyFD {
		return -1, fmt.Errorf("%s=%q: want a file descriptor above %d", name, s, ReadyFD)
	}
	return fd, nil
}

// waitPlaced reads the pipe at fd until the starter closes it, and closes it: the
// starter writes Placed once the process is placed (see EnvPlacedFD).
func waitPlaced(fd int) error {
	f := os.NewFile(uintptr(fd), "placed")
	defer f.Close()
	msg, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return fmt.Errorf("wait to be placed: %w", err)
	}
	if string(msg) != Placed {
		return fmt.Errorf("wait to be placed: the starter wrote %q and closed the pipe, want %q", msg, Placed)
	}
	return nil
}

// unshareCgroupNamespace moves every thread of the process into one new cgroup
// namespace, rooted at the process's cgroups. A namespace belongs to a thread: the
// calling thread makes it, and every thread (the Go runtime's, and so the one that may
// execute the sleeper) joins it.
func unshareCgroupNamespace() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("unshare the cgroup namespace: %w", err)
	}
	fd, err := unix.Open("/proc/thread-self/ns/cgroup", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open the new cgroup namespace: %w", err)
	}
	defer unix.Close(fd)
	if err := allThreads(unix.SYS_SETNS, uintptr(fd), unix.CLONE_NEWCGROUP, 0); err != nil {
		return fmt.Errorf("join the new cgroup namespace on every thread: %w", err)
	}
	return nil
}

// execSleeper replaces the program with the sleeper open at fd, with the same
// arguments (the daemon recognises its pause processes by them) and no environment.
// The root is empty by now: the sleeper is executed through its file descriptor, and
// the filter allows execveat (see filter.go). It returns only if the exec failed.
func execSleeper(fd int) error {
	argv, err := syscall.SlicePtrFromStrings(os.Args)
	if err != nil {
		return fmt.Errorf("execute the sleeper: %w", err)
	}
	envv := []*byte{nil}
	empty, err := unix.BytePtrFromString("")
	if err != nil {
		return fmt.Errorf("execute the sleeper: %w", err)
	}
	_, _, errno := unix.Syscall6(unix.SYS_EXECVEAT, uintptr(fd), uintptr(unsafe.Pointer(empty)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])), unix.AT_EMPTY_PATH, 0)
	return fmt.Errorf("execute the sleeper: %w", errno)
}

// checkOwnNamespaces refuses to go on unless the process is PID 1 of its pid namespace
// and in a mount namespace other than its starter's (see EnvStarterMountNS): confine
// changes the mounts of its mount namespace, which must not be the node's.
func checkOwnNamespaces(starterMountNS string) error {
	if os.Getpid() != 1 {
		return errors.New("not PID 1 of a pid namespace of its own: refusing to run")
	}
	if starterMountNS == "" {
		return fmt.Errorf("%s is not set: refusing to change mounts that may be the node's", EnvStarterMountNS)
	}
	own, err := MountNamespace("/proc/thread-self/ns/mnt")
	if err != nil {
		return err
	}
	if own == starterMountNS {
		return errors.New("in its starter's mount namespace, not one of its own: refusing to change the node's mounts")
	}
	return nil
}

// MountNamespace names the mount namespace at path (a /proc/.../ns/mnt link) as
// EnvStarterMountNS carries it: "<dev>:<inode>".
func MountNamespace(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return "", fmt.Errorf("mount namespace: %w", err)
	}
	return strconv.FormatUint(st.Dev, 10) + ":" + strconv.FormatUint(st.Ino, 10), nil
}

// parseUser parses EnvUser's value ("" is DefaultUser).
func parseUser(s string) (uid, gid int, err error) {
	if s == "" {
		return DefaultUser, DefaultUser, nil
	}
	u, g, ok := strings.Cut(s, ":")
	u32, err1 := strconv.ParseUint(u, 10, 32)
	g32, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%s=%q: want <uid>:<gid>", EnvUser, s)
	}
	return int(u32), int(g32), nil
}

// emptyRoot makes an empty read-only tmpfs the process's root and working directory
// and detaches every other mount of its mount namespace (a copy of the node's, made
// when the daemon cloned the process into it).
func emptyRoot() error {
	steps := []struct {
		what string
		do   func() error
	}{
		// Nothing the process does to its mounts reaches the node's.
		{"make the mounts private", func() error { return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "") }},
		{"mount the empty root", func() error {
			return unix.Mount("tmpfs", rootDir, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
				"size=4k,nr_inodes=4,mode=0555")
		}},
		{"enter the empty root", func() error { return unix.Chdir(rootDir) }},
		// pivot_root(".", ".") stacks the old root on the new one; unmounting "." then
		// detaches the old root with every mount under it.
		{"pivot into the empty root", func() error { return unix.PivotRoot(".", ".") }},
		{"detach the node's mounts", func() error { return unix.Unmount(".", unix.MNT_DETACH) }},
		{"enter the empty root", func() error { return unix.Chdir("/") }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
	}
	return nil
}

// dropPrivileges makes the process run as uid and gid with no supplementary group and
// no capability, and sets no-new-privileges, on every thread. A uid of 0 (a pod that
// asks to run as root, or a user namespace that maps no other) keeps the user but not
// its capabilities.
func dropPrivileges(uid, gid int) error {
	// The bounding set first: dropping from it takes CAP_SETPCAP.
	for c := 0; c <= 63; c++ {
		err := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil {
		return fmt.Errorf("clear the ambient capabilities: %w", err)
	}
	// syscall's setters change every thread.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("drop supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(gid, gid, gid); err != nil {
		return fmt.Errorf("set gid %d: %w", gid, err)
	}
	if err := syscall.Setresuid(uid, uid, uid); err != nil {
		return fmt.Errorf("set uid %d: %w", uid, err)
	}
	// A uid other than 0 has no capability left; 0 still has them all.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&none[0])), 0); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if err := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); err != nil {
		return fmt.Errorf("set no new privileges: %w", err)
	}
	return nil
}

// allThreads makes a system call on every thread of the process.
func allThreads(trap, a1, a2, a3 uintptr) error {
	_, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3)
	if errno == syscall.ENOTSUP {
		return fmt.Errorf("%w: the pause program must be built without cgo (CGO_ENABLED=0)", errno)
	}
	if errno != 0 {
		return errno
	}
	return nil
}
