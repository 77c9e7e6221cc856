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

// Orphans of containers' pid namespaces.
//
// The daemon is a child subreaper (BecomeSubreaper): a process of a container that runc
// started for it becomes the daemon's child once runc exits, such as the command of a
// `runc exec --detach`, or a stage of a `runc exec` that failed half way. execDetached
// reaps the commands it started; anything else stays a zombie of the daemon. A zombie in
// a container's pid namespace is worse than untidy: the kernel lets the namespace's init
// finish its exit only once every other process of the namespace has been reaped, so the
// container can be neither stopped ("init process survived SIGKILL") nor deleted while
// the daemon lives. ReapOrphans reaps them.

// awaited holds the PIDs of the exec'd commands whose exit status execDetached collects
// itself: ReapOrphans leaves them alone.
var awaited sync.Map // int -> struct{}

// orphanGrace is how long a zombie must have been one before ReapOrphans reaps it: the
// time execDetached has, after runc exec returns, to read the command's PID and claim it
// in awaited (a command that exits at once is a zombie by then).
const orphanGrace = time.Second

// ReapOrphans reaps, until ctx ends, the zombie children of this process that belong to
// another pid namespace than its own (a container's) and are not that namespace's init (a
// pause process the daemon started as one, which its owner waits for), unless
// execDetached awaits them, once they have been zombies for orphanGrace. reaped, if not
// nil, is called with each PID reaped and its PID in the container's namespace. The
// daemon runs it for its whole life, after BecomeSubreaper.
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
		now := time.Now()
		found := map[int]bool{}
		for _, pid := range containerZombies() {
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
			nsPid := namespacePid(pid)
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

// containerZombies lists the zombie children of this process that live in another pid
// namespace and are not its init, from /proc/self/task/*/children (an orphan is handed
// to one of the threads).
func containerZombies() []int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil || !zombie(pid) {
				continue
			}
			if ns := namespacePid(pid); ns > 1 {
				out = append(out, pid)
			}
		}
	}
	return out
}

// zombie reports whether a process has exited and waits to be reaped.
func zombie(pid int) bool {
	fields := statFields(pid)
	return len(fields) > 0 && fields[0] == "Z"
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
