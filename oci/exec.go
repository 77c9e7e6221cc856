package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// BecomeSubreaper makes the calling process a child subreaper
// (prctl(PR_SET_CHILD_SUBREAPER)): an orphaned descendant, such as the command of a
// `runc exec` whose runc died, is handed to it instead of to PID 1, which on some
// machines reaps late. The daemon's main calls it once at start. This package reaps
// every such process it knows of; see the package documentation.
func BecomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", err)
	}
	return nil
}

// maxExecOutput bounds what ExecSync keeps of each output stream; the rest is
// discarded.
const maxExecOutput = 16 << 20

// execWaitDelay bounds the wait for the output pipes once the command has exited (a
// background process in the container may hold them open).
const execWaitDelay = 2 * time.Second

// ExecSync runs cmd in a running container (runc exec, no terminal, the container's
// environment, user and capabilities) and returns its output and exit code. A
// timeout of 0 means none. When the timeout passes, or ctx ends, the command and
// every process it started that is still its descendant are killed with SIGKILL and
// reaped, and ErrExecTimeout (or ctx's error) is returned with the output so far.
// The runtime's own failures (the container is not running, the command does not
// exist) are errors, not exit codes; a stopped container gives ErrNotRunning.
func (r *Runtime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int, err error) {
	if err := validID(id); err != nil {
		return nil, nil, -1, err
	}
	if len(cmd) == 0 {
		return nil, nil, -1, fmt.Errorf("exec in %s: %w: empty command", id, ErrInvalidSpec)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	// runc's own messages go to a log file, so they cannot be mistaken for the
	// command's output or exit code.
	logFile, err := os.CreateTemp(r.stateDir, "exec-*.log")
	if err != nil {
		return nil, nil, -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	logFile.Close()
	defer os.Remove(logFile.Name())

	args := append([]string{"--root", r.root, "--log", logFile.Name(), "--log-format", "json", "exec", id}, cmd...)
	c := exec.Command(r.path, args...)
	var outBuf, errBuf cappedBuffer
	c.Stdout = &outBuf
	c.Stderr = &errBuf
	c.WaitDelay = execWaitDelay
	if err := c.Start(); err != nil {
		return nil, nil, -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	// runc is our unreaped child, so the PID is still its own.
	runcFd, err := openPidfd(c.Process.Pid)
	if err != nil {
		_ = c.Process.Kill()
		_ = c.Wait()
		return nil, nil, -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	defer runcFd.Close()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()

	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}
	var stopErr error
	select {
	case werr := <-done:
		return r.execResult(ctx, id, logFile.Name(), outBuf.Bytes(), errBuf.Bytes(), werr)
	case <-expired:
		stopErr = fmt.Errorf("exec %q in %s: %w after %s", cmd, id, ErrExecTimeout, timeout)
	case <-ctx.Done():
		stopErr = fmt.Errorf("exec %q in %s: %w", cmd, id, ctx.Err())
	}
	// runc exec runs the command as its own child: kill runc and everything under it,
	// let Wait reap runc, and reap the command if it was handed to us.
	kerr := killTree(context.WithoutCancel(ctx), c.Process.Pid, runcFd, false)
	<-done
	if kerr != nil {
		stopErr = fmt.Errorf("%w (kill: %v)", stopErr, kerr)
	}
	return outBuf.Bytes(), errBuf.Bytes(), -1, stopErr
}

// execResult turns a finished runc exec into ExecSync's results.
func (r *Runtime) execResult(ctx context.Context, id, logPath string, stdout, stderr []byte, werr error) ([]byte, []byte, int, error) {
	code := 0
	if werr != nil {
		var ee *exec.ExitError
		if !errors.As(werr, &ee) {
			return stdout, stderr, -1, fmt.Errorf("exec in %s: %w", id, werr)
		}
		code = ee.ExitCode()
	}
	if code == 0 {
		return stdout, stderr, 0, nil
	}
	log, _ := os.ReadFile(logPath)
	if msg := runtimeMessage(log); msg != "" {
		// The runtime failed, not the command.
		if st, err := r.State(ctx, id); (err == nil && st.Status != StatusRunning) || errors.Is(err, ErrNotFound) {
			return stdout, stderr, -1, fmt.Errorf("exec in %s: %s: %w", id, msg, ErrNotRunning)
		}
		return stdout, stderr, -1, fmt.Errorf("exec in %s: %s: %s", id, filepath.Base(r.path), msg)
	}
	return stdout, stderr, code, nil
}

// cappedBuffer keeps the first maxExecOutput bytes written to it and drops the rest
// (without failing the writer).
type cappedBuffer struct {
	b []byte
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := maxExecOutput - len(c.b); room > 0 {
		c.b = append(c.b, p[:min(len(p), room)]...)
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (c *cappedBuffer) Bytes() []byte { return c.b }
