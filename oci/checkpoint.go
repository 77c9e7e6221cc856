package oci

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Checkpoint dumps the processes of running container id with CRIU through the runtime
// (runc checkpoint --leave-running), leaving the container running: CRIU's images go to
// imagePath, its log (dump.log) and statistics (stats-dump) to workPath, both
// directories that exist. CRIU freezes the container's cgroup while it dumps and thaws
// it when done.
//
// The runtime runs in a process group of its own with CRIU, its child, and the whole
// group is killed when ctx ends (a deadline gives an error wrapping
// context.DeadlineExceeded), and the runtime when this process dies. A CRIU killed part
// way may leave the container frozen: ResumeIfPaused thaws it. An unknown container gives
// ErrNotFound, one that is not running ErrNotRunning.
func (r *Runtime) Checkpoint(ctx context.Context, id, imagePath, workPath string) error {
	if err := validID(id); err != nil {
		return err
	}
	if !filepath.IsAbs(imagePath) || !filepath.IsAbs(workPath) {
		return fmt.Errorf("checkpoint %s: image path %q and work path %q must be absolute", id, imagePath, workPath)
	}
	unlock := r.locks.lock(id)
	defer unlock()
	args := r.globalArgs("--log-format", "json")
	args = append(args, "checkpoint", "--leave-running", "--file-locks",
		"--image-path", imagePath, "--work-path", workPath, id)
	cmd := exec.CommandContext(ctx, r.path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// The group: runc and the criu it started.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if err == nil {
		return nil
	}
	msg := runtimeMessage(stderr.Bytes())
	if msg == "" {
		msg = err.Error()
	}
	op := filepath.Base(r.path) + " checkpoint"
	if ctx.Err() != nil {
		return fmt.Errorf("%s of %s: %s: %w", op, id, msg, ctx.Err())
	}
	if isNotFound(msg) {
		return fmt.Errorf("%s of %s: %s: %w", op, id, msg, ErrNotFound)
	}
	if isNotRunning(msg) {
		return fmt.Errorf("%s of %s: %s: %w", op, id, msg, ErrNotRunning)
	}
	if criu := criuErrors(filepath.Join(workPath, "dump.log")); criu != "" {
		msg += "; CRIU: " + criu
	}
	return fmt.Errorf("%s of %s: %s", op, id, msg)
}

// criuErrors returns the last few error lines of a CRIU log, "" when there are none or
// the log cannot be read: the runtime's own message only says that CRIU failed.
func criuErrors(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var lines []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, "Error (") {
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, "; ")
}

// ResumeIfPaused thaws container id if the runtime reports it paused (its cgroup
// frozen), as a checkpoint's CRIU killed part way leaves it; the daemon pauses
// containers for nothing else. A container that is not paused, or that the runtime does
// not know, is left alone and is no error.
func (r *Runtime) ResumeIfPaused(ctx context.Context, id string) error {
	st, err := r.State(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.Status != StatusPaused {
		return nil
	}
	_, err = r.runtimeCmd(ctx, nil, "resume", id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}
