package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
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

// maxExecOutput bounds what ExecSync keeps of a command's output, stdout and stderr
// together (the first bytes to arrive are kept, from either stream); the rest is
// discarded. The kubelet receives at most 16 MiB in one answer (the CRI client's
// maxMsgSize), and a larger one fails as a whole, so the two streams share 15 MiB,
// leaving a MiB of room for the answer's framing. CRI-O keeps 16 MiB of both together
// (conmon's --log-global-size-max, counted with the log's timestamps); containerd 16 MiB
// of each, which can make an answer the kubelet refuses.
const maxExecOutput = 15 << 20

// execWaitDelay bounds the wait for the output pipes once the command has exited (a
// background process in the container may hold them open).
const execWaitDelay = 2 * time.Second

// ExecSync runs cmd in a running container (runc exec, no terminal, the container's
// environment, user and capabilities) and returns its output (the first 15 MiB of stdout
// and stderr together, see maxExecOutput) and exit code, as soon as the command exits
// (see execDetached): a process it left running in the background keeps running in the
// container and no longer holds the answer. A timeout of 0 means none. When the timeout passes, or ctx ends, the command and every process it started
// that is still its descendant are killed with SIGKILL and reaped, and ErrExecTimeout (or
// ctx's error) is returned with the output so far. The runtime's own failures (the
// container is not running, the command does not exist) are errors, not exit codes; a
// stopped container gives ErrNotRunning.
func (r *Runtime) ExecSync(ctx context.Context, id string, cmd []string, timeout time.Duration) (stdout, stderr []byte, exitCode int, err error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, timeout, ErrExecTimeout)
		defer cancel()
	}
	room := &outputRoom{left: maxExecOutput}
	outBuf, errBuf := &cappedBuffer{room: room}, &cappedBuffer{room: room}
	exitCode, err = r.execDetached(ctx, id, cmd, nil, outBuf, errBuf)
	if err != nil && errors.Is(context.Cause(ctx), ErrExecTimeout) {
		err = fmt.Errorf("%w after %s: %w", ErrExecTimeout, timeout, err)
	}
	return outBuf.Bytes(), errBuf.Bytes(), exitCode, err
}

// execDetached runs cmd in a running container without a terminal and returns its exit
// code once it has exited. stdin (nil: none) is copied to the command's standard input,
// and its output to stdout and stderr (nil: discarded), for at most the runtime's drain
// timeout (Config.ExecDrainTimeout) after it exited: a process it left running in the
// background may hold the output open for as long as it lives, and is left running in
// the container (containerd answers the same way; `sh -c 'daemon & exit 0'` is a
// common exec probe).
//
// runc runs detached (--detach), with the pipes handed to the command itself, so runc
// returns as soon as the command has started; the command is then a child of this
// process (a subreaper: it is handed to the nearest subreaper ancestor when runc exits),
// which reaps it for its exit status. When ctx ends first, the command and every process
// it started that is still its descendant are killed with SIGKILL and reaped, and ctx's
// error is returned. Every goroutine it starts has ended when it returns, except the one
// copying stdin, which ends when that reader does.
func (r *Runtime) execDetached(ctx context.Context, id string, cmd []string, stdin io.Reader, stdout, stderr io.Writer) (int, error) {
	if err := validID(id); err != nil {
		return -1, err
	}
	if len(cmd) == 0 {
		return -1, fmt.Errorf("exec in %s: %w: empty command", id, ErrInvalidSpec)
	}
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	// runc's own messages go to a log file, so they cannot be mistaken for the
	// command's output or exit code.
	work, err := os.MkdirTemp(r.stateDir, "exec-")
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	defer os.RemoveAll(work)
	logPath, pidPath := filepath.Join(work, "runc.log"), filepath.Join(work, "pid")

	var drains []*drain
	// drained waits at most limit, in all, for the command's output to end; every
	// copy has ended when it returns.
	drained := func(limit time.Duration) {
		deadline := time.Now().Add(limit)
		for _, d := range drains {
			d.stop(time.Until(deadline))
		}
	}
	defer drained(0)
	c := exec.Command(r.path, append(r.globalArgs("--log", logPath, "--log-format", "json"), "exec", "--detach", "--pid-file", pidPath, id)...)
	c.Args = append(c.Args, cmd...)
	for _, out := range []struct {
		to  io.Writer
		set *io.Writer
	}{{stdout, &c.Stdout}, {stderr, &c.Stderr}} {
		w, d, err := newDrain(out.to)
		if err != nil {
			return -1, fmt.Errorf("exec in %s: %w", id, err)
		}
		defer w.Close()
		drains = append(drains, d)
		*out.set = w
	}
	if stdin != nil {
		pr, pw, err := os.Pipe()
		if err != nil {
			return -1, fmt.Errorf("exec in %s: %w", id, err)
		}
		defer pr.Close()
		go func() {
			defer pw.Close() // end of file for the command
			_, _ = io.Copy(pw, stdin)
		}()
		c.Stdin = pr
	}
	runErr := c.Run()
	// Only the command (and what it starts) holds the pipes' other ends now.
	for _, f := range []any{c.Stdout, c.Stderr, c.Stdin} {
		if f, ok := f.(*os.File); ok {
			f.Close()
		}
	}
	if runErr != nil {
		drained(r.drain)
		_, _, code, err := r.execResult(ctx, id, logPath, nil, nil, runErr)
		if err == nil {
			err = fmt.Errorf("exec in %s: %s exec failed with status %d", id, filepath.Base(r.path), code)
		}
		return -1, err
	}
	pid, fd, err := openExecPid(pidPath)
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	defer fd.Close()
	defer await(pid)() // its exit status is ours to collect, not ReapOrphans's
	if werr := waitPidfd(ctx, fd); werr != nil {
		err := fmt.Errorf("exec %q in %s: %w", cmd, id, ctx.Err())
		if kerr := killTree(context.WithoutCancel(ctx), pid, fd, true); kerr != nil {
			err = fmt.Errorf("%w (kill: %v)", err, kerr)
		}
		return -1, err
	}
	code, err := reapExitCode(pid)
	drained(r.drain)
	if err != nil {
		return -1, fmt.Errorf("exec in %s: exit status of pid %d: %w", id, pid, err)
	}
	return code, nil
}

// drain copies what is written to the write end of a pipe to a writer.
type drain struct {
	r    *os.File
	done chan struct{}
}

// newDrain returns the write end of a pipe whose read end a goroutine of the drain copies
// to w (nil: discarded), until it ends or stop stops it.
func newDrain(w io.Writer) (*os.File, *drain, error) {
	if w == nil {
		w = io.Discard
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	d := &drain{r: r, done: make(chan struct{})}
	go func() {
		defer close(d.done)
		_, _ = io.Copy(w, r)
	}()
	return pw, d, nil
}

// stop waits at most limit for the pipe to end (every writer gone), then closes the
// read end, which ends the copy, and returns once the copy has ended. Calling it again
// returns at once.
func (d *drain) stop(limit time.Duration) {
	t := time.NewTimer(max(limit, 0))
	defer t.Stop()
	select {
	case <-d.done:
	case <-t.C:
	}
	d.r.Close()
	<-d.done
}

// openExecPid reads the PID runc exec --pid-file wrote and opens a pidfd for it.
func openExecPid(path string) (int, *os.File, error) {
	pid, err := readPidFile(path)
	if err != nil {
		return 0, nil, fmt.Errorf("runc exec's pid file: %w", err)
	}
	fd, err := openPidfd(pid)
	return pid, fd, err
}

// reapExitCode reaps the exited child pid and returns its exit code (128+signal for a
// killed one, as a shell reports it). Until it is reaped its PID cannot be reused.
func reapExitCode(pid int) (int, error) {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, err
		}
		break
	}
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
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

// outputRoom is what is left of maxExecOutput, shared by a command's two streams.
type outputRoom struct {
	mu   sync.Mutex
	left int
}

// take takes up to n bytes of the room and returns how many it got.
func (o *outputRoom) take(n int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n = min(n, o.left)
	o.left -= n
	return n
}

// cappedBuffer keeps what is written to it while its room lasts and drops the rest
// (without failing the writer). It is written by one goroutine at a time; its room may
// be shared.
type cappedBuffer struct {
	room *outputRoom
	b    []byte
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.b = append(c.b, p[:c.room.take(len(p))]...)
	return len(p), nil
}

// Bytes returns what was kept.
func (c *cappedBuffer) Bytes() []byte { return c.b }
