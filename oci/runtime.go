package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/layout"
	"github.com/crijournal/crijournal/oci/spec"
	"github.com/crijournal/crijournal/units"
)

// Errors of the runtime.
var (
	// ErrNotFound is returned when the runtime has no container with the ID (or, for
	// ConmonPID, no conmon is recorded for it). It is a definite answer, never a guess:
	// the runtime ran and said "does not exist", or its state directory for the ID is
	// absent. A runtime that could not be run, was killed or timed out gives another
	// error, which says nothing about the container.
	ErrNotFound = errors.New("container not found")
	// ErrAlreadyExists is returned by Create when the ID is in use: its state
	// directory exists. Delete it first.
	ErrAlreadyExists = errors.New("container already exists")
	// ErrNotRunning is returned by ExecSync, ReopenLog and PidNamespace when the
	// container is not running.
	ErrNotRunning = errors.New("container is not running")
	// ErrNoExit is returned by Release for a container whose exit conmon has not
	// recorded.
	ErrNoExit = errors.New("container has no recorded exit")
	// ErrExecTimeout is returned by ExecSync when the command outlives its timeout;
	// the command has been killed and reaped.
	ErrExecTimeout = errors.New("command timed out")
	// ErrInvalidID is spec.ErrInvalidID: an ID is not 1 to 64 characters of
	// [A-Za-z0-9_-] (IDs name files, sockets and cgroups).
	ErrInvalidID = spec.ErrInvalidID
)

// Status is a container's status as the runtime reports it.
type Status string

// Statuses of the OCI runtime (runc state).
const (
	StatusCreating Status = "creating"
	StatusCreated  Status = "created"
	StatusRunning  Status = "running"
	StatusStopped  Status = "stopped"
	StatusPaused   Status = "paused"
)

// State is what the runtime knows about a container.
type State struct {
	ID      string
	Status  Status
	Pid     int // the init process; 0 once stopped
	Bundle  string
	Created time.Time
}

// Config configures a Runtime.
type Config struct {
	// Handler is the CRI runtime handler name, such as "runc". Required.
	Handler string
	// Path is the runtime binary; "" looks up runc in PATH. Set it for any other
	// runtime, such as crun.
	Path string
	// Root is the runtime's state root (its --root), such as /run/crijournal/runc.
	// Required; created if missing.
	Root string
	// ConmonPath is the conmon binary; "" looks up conmon in PATH.
	ConmonPath string
	// StateDir holds conmon's files: exit files, attach sockets, pid files (layout.ConmonState). Exit files
	// should survive a daemon restart, so StateDir may live under the persistent root
	// rather than /run. Required; created if missing. See the package documentation
	// for its layout.
	StateDir string
	// ExecDrainTimeout bounds how long ExecSync reads a command's output after the
	// command exited; 0 means execWaitDelay.
	ExecDrainTimeout time.Duration
	// LogSizeMax is the size in bytes a container's log may reach before conmon
	// truncates it (conmon's --log-size-max); 0 or negative: no bound.
	LogSizeMax int64
	// SystemdCgroup runs the runtime with --systemd-cgroup (cgroup_manager = "systemd"):
	// containers' cgroupsPaths are systemd scopes ("slice:prefix:name"), and each
	// container's conmon is put in the scope crijournal-conmon-<id>.scope of the pod's
	// slice.
	SystemdCgroup bool
}

// Runtime runs containers with one OCI runtime (runc by default, or crun) under
// conmon. It is safe for concurrent use; Create and Delete of the same ID are
// serialised.
type Runtime struct {
	handler  string
	path     string
	root     string
	conmon   string
	stateDir string
	drain    time.Duration // ExecSync's, see Config.ExecDrainTimeout
	logMax   int64         // see Config.LogSizeMax
	systemd  bool          // see Config.SystemdCgroup

	locks    keyedMutex
	cgroups  cgroupManagers // per container, for Stats
	conmons  conmonWatch    // per container, for Running
	features featuresCache
}

// New checks the configuration, finds the binaries and creates the state directories.
func New(cfg Config) (*Runtime, error) {
	if cfg.Handler == "" {
		return nil, errors.New("oci: runtime handler name is required")
	}
	for name, dir := range map[string]string{"root": cfg.Root, "state dir": cfg.StateDir} {
		if !filepath.IsAbs(dir) {
			return nil, fmt.Errorf("oci: runtime %s: %s %q must be an absolute path", cfg.Handler, name, dir)
		}
	}
	r := &Runtime{handler: cfg.Handler, root: filepath.Clean(cfg.Root), stateDir: filepath.Clean(cfg.StateDir), drain: cfg.ExecDrainTimeout, logMax: cfg.LogSizeMax, systemd: cfg.SystemdCgroup}
	if r.drain <= 0 {
		r.drain = execWaitDelay
	}
	// conmon binds <StateDir>/attach/<id>/attach and silently truncates a path longer
	// than a socket address holds.
	if len(r.stateDir) > layout.MaxStateDirLen {
		n := len(r.attachDir()) + len("/") + 64 + len("/attach")
		return nil, fmt.Errorf("oci: runtime %s: state dir %q is too long: attach socket paths would be %d bytes, more than %d",
			cfg.Handler, r.stateDir, n, maxSocketPath)
	}
	var err error
	if r.path, err = findBinary(cfg.Path, "runc"); err != nil {
		return nil, fmt.Errorf("oci: runtime %s: %w", cfg.Handler, err)
	}
	if r.conmon, err = findBinary(cfg.ConmonPath, "conmon"); err != nil {
		return nil, fmt.Errorf("oci: runtime %s: %w", cfg.Handler, err)
	}
	for _, dir := range append([]string{r.root, r.stateDir}, r.state().Subdirs()...) {
		if err := mkdirPrivate(dir); err != nil {
			return nil, fmt.Errorf("oci: runtime %s: %w", cfg.Handler, err)
		}
	}
	return r, nil
}

// mkdirPrivate makes dir, mode 0700, and any parent it lacks with mode 0755. The parents
// are the node's run root (/run/crijournal), which must stay searchable by others: the
// root filesystems of containers in a user namespace are reached through it by their
// mapped root (see storage's Options.RootfsDir). os.MkdirAll(dir, 0o700) made a missing
// run root 0700, and so refused every such container on a fresh node.
func mkdirPrivate(dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// maxSocketPath is the longest path a unix socket address holds (sun_path less its
// NUL).
const maxSocketPath = 107

// findBinary returns path, or else name found in PATH, as an absolute path.
func findBinary(path, name string) (string, error) {
	if path == "" {
		path = name
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", err
	}
	return filepath.Abs(p)
}

// Handler returns the runtime handler name.
func (r *Runtime) Handler() string { return r.handler }

// Layout of StateDir (package layout).
func (r *Runtime) state() layout.ConmonState     { return layout.ConmonState(r.stateDir) }
func (r *Runtime) exitsDir() string              { return r.state().ExitsDir() }
func (r *Runtime) attachDir() string             { return r.state().AttachDir() }
func (r *Runtime) containerDir(id string) string { return r.state().Container(id) }
func (r *Runtime) exitFile(id string) string     { return filepath.Join(r.exitsDir(), id) }
func (r *Runtime) conmonPidFile(id string) string {
	return filepath.Join(r.containerDir(id), "conmon.pid")
}

// runtimeCmd runs the runtime with --root and args, and returns its standard output.
// A failure carries the runtime's error message. Only a runtime that ran to its end and
// answered "does not exist" wraps ErrNotFound: a binary that cannot be started (missing
// during a package upgrade, ETXTBSY) or a run cut short by ctx says nothing about the
// container.
func (r *Runtime) runtimeCmd(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	full := append(r.globalArgs("--log-format", "json"), args...)
	cmd := exec.CommandContext(ctx, r.path, full...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := runtimeMessage(stderr.Bytes())
		if msg == "" {
			msg = err.Error()
		}
		op := filepath.Base(r.path) + " " + args[0]
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.Exited() && isNotFound(msg) {
			return nil, fmt.Errorf("%s: %s: %w", op, msg, ErrNotFound)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %s: %w", op, msg, ctx.Err())
		}
		return nil, fmt.Errorf("%s: %s", op, msg)
	}
	return stdout.Bytes(), nil
}

// globalArgs are the runtime's global options: --root, then more, then --systemd-cgroup
// with the systemd driver.
func (r *Runtime) globalArgs(more ...string) []string {
	args := append([]string{"--root", r.root}, more...)
	if r.systemd {
		args = append(args, "--systemd-cgroup")
	}
	return args
}

// runtimeMessage extracts the error messages from a runtime's output: the "msg" of
// JSON log lines at level error or fatal, or the plain text when it is not JSON.
func runtimeMessage(out []byte) string {
	var msgs, plain []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg != "" {
			if entry.Level == "error" || entry.Level == "fatal" {
				msgs = append(msgs, entry.Msg)
			}
			continue
		}
		plain = append(plain, line)
	}
	if len(msgs) == 0 {
		msgs = plain
	}
	return strings.Join(msgs, "; ")
}

// isNotFound recognises runc's and crun's "no such container" messages.
func isNotFound(msg string) bool {
	return strings.Contains(msg, "does not exist") || strings.Contains(msg, "container not found")
}

// isNotRunning recognises the runtimes' "container is not running" messages.
func isNotRunning(msg string) bool {
	return strings.Contains(msg, "not running") || strings.Contains(msg, "stopped")
}

// Start starts a created container (runc start).
func (r *Runtime) Start(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	_, err := r.runtimeCmd(ctx, nil, "start", id)
	return err
}

// queryTimeout bounds one query of the runtime (runc state).
const queryTimeout = 30 * time.Second

// State returns the runtime's view of a container (runc state). An ID the runtime
// definitely does not know gives ErrNotFound (see there); any other failure is returned
// as it is and says nothing about the container.
//
// The query runs under a context of its own, bounded by queryTimeout, that keeps ctx's
// values but not its cancellation: a client that gives up (a kubelet restarting, crictl
// with a short timeout) must not turn the query into a failure that a caller could
// mistake for an answer.
func (r *Runtime) State(ctx context.Context, id string) (State, error) {
	if err := validID(id); err != nil {
		return State{}, err
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), queryTimeout)
	defer cancel()
	out, err := r.runtimeCmd(qctx, nil, "state", id)
	if err != nil && !errors.Is(err, ErrNotFound) && r.stateDirAbsent(id) {
		// The runtime could not answer, but it keeps every container it knows in
		// <root>/<id>: without that directory it knows no such container.
		return State{}, fmt.Errorf("%w (and the runtime's state directory %s is absent: %w)", err, filepath.Join(r.root, id), ErrNotFound)
	}
	if err != nil {
		return State{}, err
	}
	var st struct {
		ID      string    `json:"id"`
		Pid     int       `json:"pid"`
		Status  string    `json:"status"`
		Bundle  string    `json:"bundle"`
		Created time.Time `json:"created"`
	}
	if err := json.Unmarshal(out, &st); err != nil {
		return State{}, fmt.Errorf("runtime state of %s: %w", id, err)
	}
	return State{ID: st.ID, Status: Status(st.Status), Pid: st.Pid, Bundle: st.Bundle, Created: st.Created}, nil
}

// PidNamespace returns the pid namespace of a running container, as a path other
// containers join it by: /proc/<init pid>/ns/pid. The namespace is named by the
// container's init process, as containerd and CRI-O name it: runc opens it at create
// time, so a container that exits in between makes that creation fail rather than join
// another namespace, unless its pid was reused at once. A container the runtime
// definitely does not know gives ErrNotFound; one that does not run, ErrNotRunning.
// The query runs as State's does.
func (r *Runtime) PidNamespace(ctx context.Context, id string) (string, error) {
	st, err := r.State(ctx, id)
	if err != nil {
		return "", err
	}
	if st.Status != StatusRunning || st.Pid <= 0 {
		return "", fmt.Errorf("container %s is %s, want running: %w", id, st.Status, ErrNotRunning)
	}
	return fmt.Sprintf("/proc/%d/ns/pid", st.Pid), nil
}

// stateDirAbsent reports whether the runtime's state directory for id is definitely
// absent (runc and crun keep a container's state in <root>/<id>).
func (r *Runtime) stateDirAbsent(id string) bool {
	_, err := os.Lstat(filepath.Join(r.root, id))
	return errors.Is(err, os.ErrNotExist)
}

// Kill sends sig to the container's init process, or to all its processes if all is
// set (runc kill). A container that has already stopped is not an error; an unknown
// one is ErrNotFound.
func (r *Runtime) Kill(ctx context.Context, id string, sig syscall.Signal, all bool) error {
	if err := validID(id); err != nil {
		return err
	}
	args := []string{"kill"}
	if all {
		args = append(args, "--all")
	}
	args = append(args, id, strconv.Itoa(int(sig)))
	_, err := r.runtimeCmd(ctx, nil, args...)
	if err != nil && !errors.Is(err, ErrNotFound) && isNotRunning(err.Error()) {
		return nil
	}
	return err
}

// Delete removes a container and everything Create made for it: the runtime's
// container (runc delete --force, which kills what still runs), its conmon (given a
// moment to record the exit, then killed), the files Create and conmon put in the
// bundle, the container's cgroup if the runtime left it, its exit file and its state
// directory; a container init handed to this process by a conmon that died before it is
// reaped (reapOrphanedInit). It is idempotent: deleting what is not there is success.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := r.locks.lock(id)
	defer unlock()
	return r.remove(ctx, id, conmonGrace)
}

// Release frees, early, what the runtime holds for a container whose exit conmon has
// recorded: the runtime's container (runc delete, which removes its cgroup) and its
// conmon (given a moment to end by itself, then killed). It keeps the bundle (the spec
// NRI plugins are shown), the exit file and the state directory, for ExitStatus and for
// Delete, which removes them at the container's removal and then has no runtime
// container left to delete. It is idempotent; a container without a recorded exit gives
// ErrNoExit and is left alone.
func (r *Runtime) Release(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := r.locks.lock(id)
	defer unlock()
	if !exists(r.exitFile(id)) {
		return fmt.Errorf("release %s: %w", id, ErrNoExit)
	}
	if !r.stateDirAbsent(id) {
		// Never --force: the exit file says it stopped, and a plain delete refuses
		// anything that still runs.
		if _, err := r.runtimeCmd(ctx, nil, "delete", id); err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("release %s: %w", id, err)
		}
	}
	if _, err := r.stopConmon(ctx, id, conmonGrace); err != nil {
		return fmt.Errorf("release %s: %w", id, err)
	}
	if err := removeConmonCgroup(cgroupsPathOf(r.readMeta(id)), id); err != nil {
		return fmt.Errorf("release %s: %w", id, err)
	}
	r.cgroups.forget(id)
	return nil
}

// abandon removes what Prepare made for container id when the runtime may not have
// created it: nothing once the state directory is gone (Prepare makes it first, and
// Delete removes it last), else what Delete removes, without conmon's grace (a held
// conmon has no exit to record). It is idempotent.
func (r *Runtime) abandon(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := r.locks.lock(id)
	defer unlock()
	if _, err := os.Lstat(r.containerDir(id)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return r.remove(ctx, id, 0)
}

// deleteContainer deletes the runtime's container; one it does not know is success. A
// stopped container (the usual case: the kubelet stops a container before it removes
// it) is deleted without --force, as runc 1.2 and later spend about 100 ms in a forced
// delete signalling and polling for an exit that has already happened; one that is still
// created or running refuses that, and is then deleted with --force (killed first).
//
// A container whose runtime state directory is absent is not known to the runtime, and
// is not asked about (Release deleted it at its exit, or a reboot emptied the root).
func (r *Runtime) deleteContainer(ctx context.Context, id string) error {
	if r.stateDirAbsent(id) {
		return nil
	}
	_, err := r.runtimeCmd(ctx, nil, "delete", id)
	if err == nil || errors.Is(err, ErrNotFound) {
		return nil
	}
	if _, err := r.runtimeCmd(ctx, nil, "delete", "--force", id); err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	return nil
}

// remove is Delete without the lock; conmon gets grace to finish by itself.
func (r *Runtime) remove(ctx context.Context, id string, grace time.Duration) error {
	var errs []error
	if err := r.deleteContainer(ctx, id); err != nil {
		errs = append(errs, err)
	}
	running, err := r.stopConmon(ctx, id, grace)
	if err != nil {
		errs = append(errs, err)
	}
	if running {
		// conmon may have been part way through creating the container (it may even
		// have finished and exited while it was given its grace: a conmon started by
		// a daemon that has since died, whose runtime was slow).
		if err := r.deleteContainer(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// Keep the state directory: it is how a retry finds conmon and the bundle.
		return fmt.Errorf("delete container %s: %w", id, errors.Join(errs...))
	}
	r.reapOrphanedInit(id)
	// The caches are emptied once the state directory is gone (below): a Stats or
	// Running until then could put the container back into them from its meta.
	defer r.conmons.forget(id, nil)
	defer r.cgroups.forget(id)
	meta := r.readMeta(id)
	if cg := cgroupsPathOf(meta); units.IsPath(cg) {
		if err := stopScopes(ctx, cg, id); err != nil {
			errs = append(errs, err)
		}
	} else if cg != "" {
		if err := removeCgroup(cg); err != nil {
			errs = append(errs, err)
		}
		if err := removeConmonCgroup(cg, id); err != nil {
			errs = append(errs, err)
		}
	}
	if meta.Bundle != "" {
		for _, name := range bundleFiles {
			if err := os.Remove(filepath.Join(meta.Bundle, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	for _, p := range []string{filepath.Join(r.attachDir(), id), r.exitFile(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(r.containerDir(id)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("delete container %s: %w", id, errors.Join(errs...))
	}
	return nil
}

// reapOrphanedInit reaps the init process of container id if it is a zombie child of
// this process. A container whose conmon died before its init (killed by hand or by the
// OOM killer) is handed to this process, a subreaper, and nothing else waits for it:
// ReapOrphans leaves every pid namespace's init alone, and one in the node's pid
// namespace leads its own session. Delete calls it once the runtime has deleted the
// container, which kills what still ran. An exit file says conmon reaped the init itself
// (and the PID in the pid file may since name another process); so does a zombie that is
// not a child of this process, or does not lead its session as runc makes every init.
func (r *Runtime) reapOrphanedInit(id string) {
	if exists(r.exitFile(id)) {
		return
	}
	pid, err := readPidFile(filepath.Join(r.containerDir(id), "pid"))
	if err != nil {
		return
	}
	f, err := openPidfd(pid)
	if err != nil {
		return // gone: reaped
	}
	defer f.Close()
	// Behind the pidfd the PID cannot pass to another process: a look at it now is at
	// the process reaped below.
	fields := statFields(pid) // state, ppid, pgrp, session, ...
	if len(fields) < 4 || fields[0] != "Z" || fields[1] != strconv.Itoa(os.Getpid()) || fields[3] != strconv.Itoa(pid) {
		return
	}
	reapPidfd(f)
}

// UpdateResources changes a running container's cgroup limits (runc update
// --resources -).
func (r *Runtime) UpdateResources(ctx context.Context, id string, res *specs.LinuxResources) error {
	if err := validID(id); err != nil {
		return err
	}
	if res == nil {
		return nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Errorf("update resources of %s: %w", id, err)
	}
	_, err = r.runtimeCmd(ctx, bytes.NewReader(b), "update", "--resources", "-", id)
	return err
}

// Containers lists the IDs of the runtime's containers (runc list), for leak checks.
func (r *Runtime) Containers(ctx context.Context) ([]string, error) {
	out, err := r.runtimeCmd(ctx, nil, "list", "--format", "json")
	if err != nil {
		return nil, err
	}
	var list []struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("runtime list: %w", err)
	}
	ids := make([]string, 0, len(list))
	for _, c := range list {
		ids = append(ids, c.ID)
	}
	return ids, nil
}

// keyedMutex serialises work per key.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

// lock locks key and returns its unlock.
func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}
