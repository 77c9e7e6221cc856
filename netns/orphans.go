package netns

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// KillPlugins kills every CNI plugin process still working for sandboxID, found by the
// CNI_CONTAINERID in its environment, and waits until none is left (a killed process is
// a zombie with an empty environment, so it no longer matches).
//
// Why: if the daemon dies during CNI ADD, the plugin it started dies with it (parent-death
// signal), but the IPAM plugin that one started does not, and could finish its ADD after
// recovery's DEL, leaking an address. The undo of a StepAttach that is not done calls
// this before DEL.
//
// Each process is signalled through a pidfd opened before its environment is checked
// again, so a PID recycled by an unrelated process meanwhile is never hit. The caller
// keeps teardowns of one sandbox apart: this kills the DEL of a concurrent teardown too.
func KillPlugins(ctx context.Context, sandboxID string) (int, error) {
	if err := validateID(sandboxID); err != nil {
		return 0, fmt.Errorf("kill plugins: %w", err)
	}
	needle := []byte("CNI_CONTAINERID=" + sandboxID + "\x00")
	killed := 0
	for {
		pids, err := pluginPIDs(needle)
		if err != nil {
			return killed, err
		}
		if len(pids) == 0 {
			return killed, nil
		}
		for _, pid := range pids {
			if killPlugin(pid, needle) {
				killed++
			}
		}
		select {
		case <-ctx.Done():
			return killed, fmt.Errorf("kill plugins of %s: %w", sandboxID, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func pluginPIDs(needle []byte) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or not ours to read
		}
		if bytes.Contains(env, needle) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// killPlugin sends SIGKILL to pid through a pidfd, if the process behind the pidfd still
// has needle in its environment. It reports whether the signal was sent.
func killPlugin(pid int, needle []byte) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false // gone
	}
	defer unix.Close(fd)
	// The pidfd pins this process: if the PID was recycled before it was opened, the
	// environment read now is the new process's, and does not match.
	env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || !bytes.Contains(env, needle) {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}
