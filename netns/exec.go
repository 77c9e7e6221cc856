package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// pluginExec runs CNI plugins for libcni like invoke.RawExec does, except
// that every plugin gets SIGKILL as its parent-death signal. A plugin is a
// child process: without that signal, a daemon killed during CNI ADD leaves
// the plugin running, and the plugin finishes its ADD (allocating an IP,
// creating a veth) after the daemon is gone and can no longer account for it.
//
// The kernel sends the parent-death signal when the *thread* that forked the
// child exits, not when the process does. Go threads come and go (a goroutine
// locked to a thread that exits takes its thread with it, as Pin does), so the
// fork and the whole wait run on a goroutine locked to its OS thread: that
// thread cannot exit before the plugin does, and it dies only with the daemon.
//
// The signal reaches the plugin only, not the plugins it runs itself (the
// bridge plugin runs its IPAM plugin, e.g. host-local, as a child): an IPAM
// ADD already under way when the daemon dies can still complete. The journal
// covers that case, since CNI DEL is the undo of an ADD that was started.
// When ctx ends, by contrast, the whole process group is killed.
type pluginExec struct {
	version.PluginDecoder
}

var _ invoke.Exec = (*pluginExec)(nil)

// textBusyRetries is how many times a plugin that fails to start with
// ETXTBSY (its binary is being written, e.g. by an installer) is retried, one
// second apart, as libcni's RawExec does.
const textBusyRetries = 5

// pipeWaitDelay is how long runLocked waits for the plugin's output pipes to
// close after the plugin exited (or was killed) before closing them itself.
const pipeWaitDelay = 5 * time.Second

// ExecPlugin runs the plugin at pluginPath with stdinData on its standard
// input and environ as its environment, and returns its standard output. When
// ctx is done the plugin's process group is killed (SIGKILL).
//
// When the plugin exits non-zero, the error is the *types.Error it printed
// on stdout (or one built from its stderr), unwrapped: libcni compares some
// plugin errors by their exact text, and wraps them itself.
func (e *pluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdinData []byte, environ []string) ([]byte, error) {
	for attempt := 0; ; attempt++ {
		stdout, stderr, err := runLocked(ctx, pluginPath, stdinData, environ)
		if err == nil || errors.Is(err, exec.ErrWaitDelay) {
			// ErrWaitDelay: the plugin succeeded, but something it left
			// behind kept its stdout open.
			return stdout, nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, fmt.Errorf("run CNI plugin %s: %w (%v)", pluginPath, ctxErr, err)
		}
		var exitErr *exec.ExitError
		if !errors.As(err, &exitErr) {
			// The plugin did not start (or its output could not be read).
			if errors.Is(err, syscall.ETXTBSY) && attempt < textBusyRetries {
				select {
				case <-time.After(time.Second):
					continue
				case <-ctx.Done():
					return nil, fmt.Errorf("run CNI plugin %s: %w (%v)", pluginPath, ctx.Err(), err)
				}
			}
			return nil, fmt.Errorf("run CNI plugin %s: %w", pluginPath, err)
		}
		return nil, pluginError(exitErr, stdout, stderr)
	}
}

// runLocked starts the plugin from a goroutine locked to its OS thread and
// waits for it there; see pluginExec for why.
func runLocked(ctx context.Context, pluginPath string, stdinData []byte, environ []string) (stdout, stderr []byte, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	var outBuf, errBuf bytes.Buffer
	cmd := exec.CommandContext(ctx, pluginPath)
	cmd.Env = environ
	cmd.Stdin = bytes.NewReader(stdinData)
	cmd.Stdout = &outBuf
	cmd.Stderr = &errBuf
	// The plugin leads its own process group, so that when ctx ends the
	// IPAM plugin it delegates to (its child, which has no parent-death
	// signal) is killed with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A plugin that leaves a background process holding its stdout open
	// must not hang the caller once the plugin itself has exited.
	cmd.WaitDelay = pipeWaitDelay
	err = cmd.Run()
	return outBuf.Bytes(), errBuf.Bytes(), err
}

// pluginError decodes the CNI error a failed plugin printed on stdout, the
// way libcni's RawExec does.
func pluginError(runErr error, stdout, stderr []byte) *types.Error {
	emsg := &types.Error{}
	switch {
	case len(stdout) == 0 && len(stderr) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed with no error message: %v", runErr)
	case len(stdout) == 0:
		emsg.Msg = fmt.Sprintf("netplugin failed: %q: %v", string(stderr), runErr)
	default:
		if err := json.Unmarshal(stdout, emsg); err != nil {
			emsg.Msg = fmt.Sprintf("netplugin failed but error parsing its diagnostic message %q: %v", string(stdout), err)
		} else if emsg.Code == 0 && emsg.Msg == "" {
			emsg.Msg = fmt.Sprintf("netplugin failed without a CNI error on stdout (%q): %v", string(stdout), runErr)
		}
	}
	return emsg
}

// FindInPath returns the full path of the plugin by searching in paths.
func (e *pluginExec) FindInPath(plugin string, paths []string) (string, error) {
	return invoke.FindInPath(plugin, paths)
}
