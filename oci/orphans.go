package oci

import (
	"context"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Orphans of containers.
//
// The daemon is a child subreaper (BecomeSubreaper): a process of a container that runc
// started for it becomes the daemon's child once runc exits, such as the command of a
// `runc exec --detach`, or a stage of a `runc exec` that failed half way; and a process
// of a container that shares the node's pid namespace becomes the daemon's child when
// its parent and then its conmon (the container's subreaper) exit before it, such as a
// shell's background process killed with the rest of its container. execDetached reaps
// the commands it started; anything else stays a zombie of the daemon. A zombie in a
// container's pid namespace is worse than untidy: the kernel lets the namespace's init
// finish its exit only once every other process of the namespace has been reaped, so the
// container can be neither stopped ("init process survived SIGKILL") nor deleted while
// the daemon lives. One in the node's pid namespace holds its PID for the daemon's life.
// ReapOrphans reaps them.

// awaited holds the PIDs of the exec'd commands whose exit status execDetached collects
// itself: ReapOrphans leaves them alone.
var awaited sync.Map // int -> struct{}

// orphanGrace is how long a zombie must have been one before ReapOrphans reaps it: the
// time execDetached has, after runc exec returns, to read the command's PID and claim it
// in awaited (a command that exits at once is a zombie by then).
const orphanGrace = time.Second

// ReapOrphans reaps, until ctx ends, the zombie children of this process that came to it
// from containers (see containerOrphans), unless execDetached awaits them, once they have
// been zombies for orphanGrace. reaped, if not nil, is called with each PID reaped and
// its PID in the container's pid namespace. The daemon runs it for its whole life, after
// BecomeSubreaper.
//
// The children are looked at once at the start, then at most every interval, and only
// after a child has exited (SIGCHLD) or while a zombie found waits out its grace: a node
// with a hundred pods has a hundred conmons as children, and reading each one's state
// every second cost half a percent of a core on an idle node.
func ReapOrphans(ctx context.Context, interval time.Duration, reaped func(pid, nsPid int)) {
	exited := make(chan os.Signal, 1)
	signal.Notify(exited, unix.SIGCHLD)
	defer signal.Stop(exited)
	t := time.NewTicker(interval)
	defer t.Stop()
	seen := map[int]time.Time{} // zombies found, and when first
	look := true                // a child may have exited since the last look
	for {
		select {
		case <-ctx.Done():
			return
		case <-exited:
			look = true
			continue
		case <-t.C:
		}
		if !look && len(seen) == 0 {
			continue
		}
		look = false
		if len(seen) == 0 && !anyZombie() {
			continue // the children that exited were waited for by their owners
		}
		now := time.Now()
		found := map[int]bool{}
		for pid, nsPid := range containerOrphans() {
			found[pid] = true
			first, ok := seen[pid]
			if !ok {
				seen[pid] = now
				continue
			}
			if now.Sub(first) < orphanGrace {
				continue
			}
			if _, ok := awaited.Load(pid); ok {
				continue
			}
			var ws unix.WaitStatus
			if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil); err == nil && got == pid && reaped != nil {
				reaped(pid, nsPid)
			}
			delete(seen, pid)
		}
		for pid := range seen {
			if !found[pid] {
				delete(seen, pid) // reaped by its owner
			}
		}
	}
}

// anyZombie reports whether a child of this process has exited and not been waited for,
// with one waitid that leaves it so (WNOWAIT). Most SIGCHLDs are of the daemon's own
// commands (runc, CNI plugins), which their owners wait for at once: when no zombie is
// left, containerOrphans' reads of every child's state (three files a child, with a
// hundred conmons as children) are skipped. In a CPU profile of 100 pods coming up four
// at a time those reads were 0.12 s of the daemon's 1.55 s in 60 s (issue 52). A
// failure other than ECHILD (no child at all) says yes, so that the children are looked
// at as before.
func anyZombie() bool {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
		switch err {
		case unix.EINTR:
			continue
		case unix.ECHILD:
			return false
		case nil:
			// With WNOHANG and no child waitable, Linux returns 0 and a si_signo of 0.
			return info.Signo == int32(unix.SIGCHLD)
		default:
			return true
		}
	}
}

// containerOrphans returns the zombie children of this process that came to it from
// containers, each with its PID in its container's pid namespace, from
// /proc/self/task/*/children (an orphan is handed to one of the threads). They are:
//
//   - the zombies in another pid namespace than this process's, but not that
//     namespace's init (a pause process the daemon started as one, which its owner
//     waits for, or a container's init whose conmon died, which Delete reaps);
//   - the zombies in this process's pid namespace (of containers that share the
//     node's) whose session is neither this process's nor one they lead. Every process
//     the daemon starts stays in its session (runc, CNI and NRI plugins) or, started
//     with Setsid, leads a session of its own (conmon, a pause process, runc for a
//     terminal exec); runc makes each container's init and each exec'd command the
//     leader of a new session, which the processes they start inherit. A zombie in a
//     third session that it does not lead was started in a container: nothing of the
//     daemon waits for it.
func containerOrphans() map[int]int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	ownSession, err := unix.Getsid(0)
	if err != nil {
		return nil
	}
	out := map[int]int{}
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if nsPid, ok := containerOrphan(pid, ownSession); ok {
				out[pid] = nsPid
			}
		}
	}
	return out
}

// containerOrphan reports whether the child pid is a zombie that came to this process
// (in session ownSession) from a container (see containerOrphans), and its PID in the
// container's pid namespace.
func containerOrphan(pid, ownSession int) (nsPid int, ok bool) {
	fields := statFields(pid) // state, ppid, pgrp, session, ...
	if len(fields) < 4 || fields[0] != "Z" {
		return 0, false
	}
	if ns := namespacePid(pid); ns != 0 {
		return ns, ns > 1
	}
	session, err := strconv.Atoi(fields[3])
	if err != nil {
		return 0, false
	}
	return pid, session != ownSession && session != pid
}

// namespacePid returns a process's PID in its own pid namespace when that is another
// namespace than this process's (the last of NSpid's values, when there are several),
// or 0.
func namespacePid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "NSpid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0
		}
		n, err := strconv.Atoi(f[len(f)-1])
		if err != nil {
			return 0
		}
		return n
	}
	return 0
}

// await claims pid for its caller's own wait; the returned function gives it up.
func await(pid int) (release func()) {
	awaited.Store(pid, struct{}{})
	return func() { awaited.Delete(pid) }
}
