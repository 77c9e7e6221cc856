package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// killWriters kills every process that has a file or its working directory under dir
// (a CRIU, or the runtime that started it, still dumping into a work directory whose
// daemon was killed: they outlive it), and waits until they are gone, so that the undo
// does not remove the directory while something still writes into it.
func killWriters(ctx context.Context, dir string) error {
	for {
		pids := holders(dir)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("processes %v still hold %s: %w", pids, dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// holders returns the processes, other than this one, with an open file or their
// working directory under dir. A zombie holds nothing.
func holders(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if holds(pid, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func holds(pid int, dir string) bool {
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	under := func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	if cwd, err := os.Readlink(filepath.Join(proc, "cwd")); err == nil && under(cwd) {
		return true
	}
	fds, err := os.ReadDir(filepath.Join(proc, "fd"))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(proc, "fd", fd.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err == nil && under(target) {
			return true
		}
	}
	return false
}
