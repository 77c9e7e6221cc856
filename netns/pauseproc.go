package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/pause"
	"github.com/crijournal/crijournal/units"
)

// # The pause program
//
// A pause process runs the pause program (cmd/crijournal-pause, package
// internal/pause), a small binary of its own, not the daemon's: it is cloned into new
// pid and mount namespaces, confines itself (an empty read-only root, an unprivileged
// user, no capabilities, no new privileges, a seccomp filter) and reports it on a pipe,
// which the starter waits for: a container never joins the pid namespace of a pause
// process that is not confined yet. It is put in a cgroup of its own under the pod's
// cgroup parent, as runc puts a pause container.
//
// The process waits until its starter has placed it in its cgroup, with its
// oom_score_adj (and says so on a pipe, see [pause.EnvPlacedFD]), before it confines
// itself: it then unshares a cgroup namespace of its own, rooted there.
//
// Once confined, the process executes the pause program's sleeper
// (cmd/crijournal-pause-sleep, which keeps a few hundred KiB of memory where the Go
// program keeps a few MiB) when there is one beside the program ([pause.SleeperPath]):
// the starter passes it open, since the process cannot reach it by path any more. Without
// one, the Go program stays, as it did before the sleeper existed.

// PauseProgram says what a pause process runs, as whom, where, and how readily the
// kernel's OOM killer picks it.
type PauseProgram struct {
	// Path is the pause program, an absolute path.
	Path string
	// UID and GID are the user the process runs as once confined: in the pod's user
	// namespace when it has one.
	UID, GID uint32
	// Cgroup is the cgroup the process is put in, as an OCI cgroupsPath: a cgroupfs
	// path, created if missing, or with the systemd driver a systemd scope
	// ("slice:prefix:name"), started as a transient unit with the process in it; ""
	// leaves it in the daemon's.
	Cgroup string
	// OOMScoreAdj, if not nil, is the process's oom_score_adj, set before it is told
	// that it is placed; nil leaves the caller's, which it inherits. The kernel refuses
	// one below the caller's oom_score_adj_min unless the caller has CAP_SYS_RESOURCE:
	// see oci.OOMScoreAdj for one it accepts.
	OOMScoreAdj *int
}

// pauseReadyWait bounds how long a starter waits for a pause process to report that it
// is confined: a few system calls, and a bound only for a process that hangs (the
// request's ctx bounds the rest). 10 s was too short for a loaded node: critest's NRI
// retry spec failed on it in the emulated cgroup v2 VM with the host at load 20.
const pauseReadyWait = time.Minute

// validate checks what a pause process cannot start without.
func (p PauseProgram) validate() error {
	if !filepath.IsAbs(p.Path) {
		return fmt.Errorf("pause program %q: %w: not an absolute path", p.Path, ErrInvalid)
	}
	if a := p.OOMScoreAdj; a != nil && (*a < -1000 || *a > 1000) {
		return fmt.Errorf("pause program's oom_score_adj %d: %w: not within [-1000, 1000]", *a, ErrInvalid)
	}
	if p.Cgroup != "" {
		return checkCgroupPath(p.Cgroup)
	}
	return nil
}

// place puts the started process pid where p says: in its cgroup (see joinCgroup) and,
// with an oom_score_adj of its own, at that. The caller then tells the process (see
// pauseStart.place).
func (p PauseProgram) place(pid int) error {
	if p.Cgroup != "" {
		if err := joinCgroup(p.Cgroup, pid); err != nil {
			return err
		}
	}
	if p.OOMScoreAdj != nil {
		path := "/proc/" + strconv.Itoa(pid) + "/oom_score_adj"
		if err := os.WriteFile(path, []byte(strconv.Itoa(*p.OOMScoreAdj)), 0); err != nil {
			return fmt.Errorf("set the oom_score_adj of process %d: %w", pid, err)
		}
	}
	return nil
}

// pauseStart is a pause process being started: the command, the read end of the pipe
// on which the process reports that it is confined, and the write end of the one on
// which it is told that it is placed.
type pauseStart struct {
	cmd    *exec.Cmd
	ready  *os.File
	placed *os.File // nil once told (or closed)
	// closeAfterStart are the parent's copies of what the child inherits.
	closeAfterStart []*os.File
}

// newPauseStart prepares the command of a pause process for sandboxID: "<program> pause
// <sandboxID>", with an environment that names its user, the caller's mount namespace
// and the fds of the placed pipe and of the sleeper, / as its working directory,
// /dev/null as stdin, stdout and stderr, the ready pipe as fd 3, the program itself as
// fd 4, the placed pipe as fd 5 and its sleeper, if any, as fd 6. It is run through
// /proc/self/fd/4, so that a process that runs as the root of a user namespace (a host
// ID that may not search the directories on the way to the program) still runs it; the
// sleeper is passed open for the same reason. attr is the process's SysProcAttr (which
// makes or finds its new pid namespace), to which CLONE_NEWNS and a new session are
// added. Once it started, call place when it is placed (see pause.EnvPlacedFD), and
// close once it is confined (or failed to start).
func newPauseStart(p PauseProgram, sandboxID string, attr *syscall.SysProcAttr) (*pauseStart, error) {
	program, err := os.OpenFile(p.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("pause program: %w", err)
	}
	// O_PATH is enough for execveat, and reads nothing.
	sleeper, err := os.OpenFile(pause.SleeperPath(p.Path), unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		sleeper = nil
	} else if err != nil {
		program.Close()
		return nil, fmt.Errorf("pause program's sleeper: %w", err)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		program.Close()
		closeIfOpen(sleeper)
		return nil, err
	}
	// The process checks that it is not in this (the node's) mount namespace before it
	// changes its mounts.
	starterNS, err := pause.MountNamespace("/proc/thread-self/ns/mnt")
	if err != nil {
		program.Close()
		closeIfOpen(sleeper)
		devNull.Close()
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		program.Close()
		closeIfOpen(sleeper)
		devNull.Close()
		return nil, err
	}
	placedR, placedW, err := os.Pipe()
	if err != nil {
		program.Close()
		closeIfOpen(sleeper)
		devNull.Close()
		r.Close()
		w.Close()
		return nil, err
	}
	attr.Cloneflags |= unix.CLONE_NEWNS
	attr.Setsid = true
	cmd := &exec.Cmd{
		Path: "/proc/self/fd/" + strconv.Itoa(pause.ReadyFD+1),
		Args: []string{p.Path, pause.Arg, sandboxID},
		Env: []string{
			pause.EnvUser + "=" + strconv.FormatUint(uint64(p.UID), 10) + ":" + strconv.FormatUint(uint64(p.GID), 10),
			pause.EnvStarterMountNS + "=" + starterNS,
			pause.EnvPlacedFD + "=" + strconv.Itoa(pause.ReadyFD+2),
		},
		Dir:         "/",
		Stdin:       devNull,
		Stdout:      devNull,
		Stderr:      devNull,
		ExtraFiles:  []*os.File{w, program, placedR}, // fds 3, 4 and 5
		SysProcAttr: attr,
	}
	closeAfterStart := []*os.File{w, program, placedR, devNull}
	if sleeper != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, sleeper) // fd 6
		cmd.Env = append(cmd.Env, pause.EnvSleeperFD+"="+strconv.Itoa(pause.ReadyFD+3))
		closeAfterStart = append(closeAfterStart, sleeper)
	}
	return &pauseStart{cmd: cmd, ready: r, placed: placedW, closeAfterStart: closeAfterStart}, nil
}

// closeIfOpen closes f unless it is nil.
func closeIfOpen(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// started closes the parent's copies of the child's files, so that the ready pipe reads
// EOF once the child closed it or died.
func (s *pauseStart) started() {
	for _, f := range s.closeAfterStart {
		f.Close()
	}
	s.closeAfterStart = nil
}

// place tells the started process that it is placed (see pause.EnvPlacedFD): it then
// takes its cgroup namespace and confines itself. A write that fails (the process is
// gone, or reads a pipe cut short) is not an error here: waitReady reads why.
func (s *pauseStart) place() {
	_, _ = s.placed.WriteString(pause.Placed)
	s.placed.Close()
	s.placed = nil
}

// close releases what the start holds. A process not yet told that it is placed reads
// the end of the placed pipe, and exits.
func (s *pauseStart) close() {
	s.started()
	s.ready.Close()
	closeIfOpen(s.placed)
}

// waitReady waits until the started process reports that it is confined (see package
// pause), for at most pauseReadyWait or until ctx ends. Its error carries the process's
// own message when it could not confine itself.
func (s *pauseStart) waitReady(ctx context.Context) error {
	s.started()
	deadline := time.Now().Add(pauseReadyWait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	wait := time.Until(deadline).Round(time.Millisecond)
	if err := s.ready.SetReadDeadline(deadline); err != nil {
		return fmt.Errorf("wait for the pause process: %w", err)
	}
	// A ctx that ends without a deadline cuts the read short too.
	stop := context.AfterFunc(ctx, func() { _ = s.ready.SetReadDeadline(time.Now()) })
	defer stop()
	msg, err := io.ReadAll(io.LimitReader(s.ready, 4096))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() != nil:
		return fmt.Errorf("wait for the pause process: %w", ctx.Err())
	case errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Errorf("the pause process did not report that it is confined within %v", wait)
	case err != nil:
		return fmt.Errorf("wait for the pause process: %w", err)
	case string(msg) == pause.Ready:
		return nil
	case len(msg) == 0:
		return errors.New("the pause process exited before it was confined")
	default:
		return errors.New(strings.TrimSpace(string(msg)))
	}
}

// joinCgroup puts pid into the cgroup at path (see PauseProgram.Cgroup), creating it, on
// cgroup v1 or v2, as runc does for a container: a systemd scope is started with pid in it.
func joinCgroup(path string, pid int) error {
	if units.IsPath(path) {
		p, err := units.Parse(path)
		if err != nil {
			return fmt.Errorf("cgroup %q: %w: %w", path, ErrInvalid, err)
		}
		return units.StartScope(p, pid)
	}
	m, err := cgroupManager(path)
	if err != nil {
		return err
	}
	if err := m.Apply(pid); err != nil {
		return fmt.Errorf("put process %d in cgroup %s: %w", pid, path, err)
	}
	return nil
}

// RemoveCgroup removes the cgroup at path that a pause process was put in. It is
// idempotent (a missing cgroup is success) and fails while a process is in it. A systemd
// scope is stopped (see units.StopScope): a scope that is gone is done, and systemd
// that cannot be asked is an error.
func RemoveCgroup(path string) error {
	if units.IsPath(path) {
		p, err := units.Parse(path)
		if err != nil {
			return fmt.Errorf("cgroup %q: %w: %w", path, ErrInvalid, err)
		}
		return units.StopScope(context.Background(), p)
	}
	m, err := cgroupManager(path)
	if err != nil {
		return err
	}
	if err := m.Destroy(); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", path, err)
	}
	return nil
}

// checkCgroupPath refuses a cgroup path that is not absolute (an empty one would name
// the caller's own cgroup to the manager) or that leaves the hierarchy, unless it is a
// valid systemd scope.
func checkCgroupPath(p string) error {
	if units.IsPath(p) {
		if _, err := units.Parse(p); err != nil {
			return fmt.Errorf("cgroup %q: %w: %w", p, ErrInvalid, err)
		}
		return nil
	}
	if !path.IsAbs(p) || strings.Contains(p, "..") {
		return fmt.Errorf("cgroup %q: %w: not an absolute cgroupfs path", p, ErrInvalid)
	}
	return nil
}

func cgroupManager(path string) (cgroups.Manager, error) {
	if err := checkCgroupPath(path); err != nil {
		return nil, err
	}
	m, err := manager.New(&cgroups.Cgroup{Path: path, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	return m, nil
}
