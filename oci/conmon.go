package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/oci/spec"
	"github.com/crijournal/crijournal/units"
)

// bundleFiles are the files Create (config.json) and conmon (the ctl and winsz fifos,
// the attach socket) put in a bundle; Delete removes them and nothing else there.
var bundleFiles = []string{"config.json", "ctl", "winsz", "attach"}

// meta is what Create records in the container's state directory for later calls.
type meta struct {
	Bundle  string `json:"bundle"`
	LogPath string `json:"log_path,omitempty"`
	// ConmonLogPath is the path conmon was started with, once MoveLog has moved the log
	// elsewhere: conmon reopens the log there (ReopenLog), not at LogPath. Empty while
	// the log is where conmon was told.
	ConmonLogPath string `json:"conmon_log_path,omitempty"`
	// CgroupsPath is the spec's cgroupsPath, kept here (not only in the bundle's
	// config.json) so that a Delete retried after a failed one still finds the cgroup:
	// a failed Delete removes config.json, and the bundle may be gone with its storage.
	CgroupsPath string `json:"cgroups_path,omitempty"`
}

func (r *Runtime) metaFile(id string) string { return filepath.Join(r.containerDir(id), "meta.json") }

// readMeta returns the recorded meta of id (empty if none).
func (r *Runtime) readMeta(id string) meta {
	var m meta
	if b, err := os.ReadFile(r.metaFile(id)); err == nil {
		_ = json.Unmarshal(b, &m)
	}
	return m
}

// conmonArgs is conmon's command line for a container, whose bundle is its state
// directory.
func (r *Runtime) conmonArgs(id, logPath string, terminal bool, stdin StdinMode) []string {
	args := []string{
		"--sync", // no double fork: conmon stays our child, so we can reap it
		"-c", id,
		"-u", id,
		"-n", id,
		"-r", r.path,
		"-b", r.containerDir(id),
		"-p", filepath.Join(r.containerDir(id), "pid"),
		"-P", r.conmonPidFile(id),
		"--persist-dir", r.containerDir(id),
		"--exit-dir", r.exitsDir(),
		"--socket-dir-path", r.attachDir(),
		"--runtime-arg", "--root=" + r.root,
		"--runtime-arg", "--log-format=json",
	}
	if r.systemd {
		args = append(args, "--runtime-arg", "--systemd-cgroup")
	}
	if logPath != "" {
		args = append(args, "-l", "k8s-file:"+logPath)
		if r.logMax > 0 {
			args = append(args, "--log-size-max", strconv.FormatInt(r.logMax, 10))
		}
	} else {
		args = append(args, "-l", "none")
	}
	switch {
	case terminal:
		// The terminal is the container's stdin: attach clients write to it.
		args = append(args, "-t")
	case stdin == StdinOpen:
		args = append(args, "-i", "--leave-stdin-open")
	case stdin == StdinOnce:
		args = append(args, "-i")
	}
	return args
}

func envPath() string {
	if p := os.Getenv("PATH"); p != "" {
		return p
	}
	return spec.DefaultPath
}

// writeFileAtomic writes a small file atomically (temp file, rename): a reader finds
// the old content or the new one. Not fsynced: what the package writes is state that
// a reboot ends (the run root), or runc's input (config.json).
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

// ConmonPID returns the PID of the container's conmon as recorded at Create
// (ErrNotFound if none is recorded). The process may have exited since.
func (r *Runtime) ConmonPID(id string) (int, error) {
	if err := validID(id); err != nil {
		return 0, err
	}
	pid, err := readPidFile(r.conmonPidFile(id))
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("conmon of %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("conmon of %s: %w", id, err)
	}
	return pid, nil
}

// errBadPidFile is readPidFile's error for a file that holds no PID.
var errBadPidFile = errors.New("bad pid file")

// readPidFile reads a PID that conmon or runc wrote to a file (--pid-file); a missing
// file is an error wrapping os.ErrNotExist, one that holds no positive number says so.
func readPidFile(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("%w %s: %q", errBadPidFile, path, b)
	}
	return pid, nil
}

// openConmon returns a pidfd of the container's conmon if it is alive, and its PID,
// or nil. The process is checked to be conmon for this ID, not a stranger that got the
// PID. A dead conmon left a zombie of this process is reaped.
func (r *Runtime) openConmon(id string) (*os.File, int, error) {
	pid, err := r.ConmonPID(id)
	if errors.Is(err, ErrNotFound) || errors.Is(err, errBadPidFile) {
		// Create records conmon's PID just after starting it: a daemon killed in
		// between left a conmon that no file names, which would go on to create the
		// container after everything else is cleaned up. The state directory says
		// that Create got that far; the command line finds that conmon. (A file
		// without a PID is what a crash of the node can leave of one not fsynced, on a
		// run root that outlived the reboot.)
		if !exists(r.containerDir(id)) {
			return nil, 0, nil
		}
		if pid = r.findConmon(id); pid == 0 {
			return nil, 0, nil
		}
	} else if err != nil {
		return nil, 0, err
	}
	f, err := openPidfd(pid)
	if err != nil {
		return nil, 0, nil // gone
	}
	if exited(f) {
		// A zombie has no command line left; its name will do.
		if procComm(pid) == "conmon" {
			reapPidfd(f)
		}
		f.Close()
		return nil, 0, nil
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		f.Close()
		return nil, 0, nil
	}
	// A process part way through its exit has no command line left either, before its
	// pidfd says it exited: a conmon that has written the exit file and is ending (for a
	// while, on a loaded node). Its name will do; its pidfd tells the caller when it
	// has ended, and the caller reaps it.
	if !isConmonOf(cmdline, r.exitsDir(), id) && !(len(cmdline) == 0 && procComm(pid) == "conmon") {
		f.Close()
		return nil, 0, nil
	}
	return f, pid, nil
}

// procComm returns the name of process pid (/proc/<pid>/comm, which a zombie keeps), or "".
func procComm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// findConmon returns the PID of a live process whose command line is that of a conmon
// this runtime started for id, or 0.
func (r *Runtime) findConmon(id string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && isConmonOf(cmdline, r.exitsDir(), id) {
			return pid
		}
	}
	return 0
}

// isConmonOf reports whether a /proc/<pid>/cmdline is that of a conmon this
// runtime started for id: it has "-c <id>" and "--exit-dir <our exits dir>".
func isConmonOf(cmdline []byte, exitsDir, id string) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	var cid, exits bool
	for i := 1; i+1 < len(args); i++ {
		switch {
		case args[i] == "-c" && args[i+1] == id:
			cid = true
		case args[i] == "--exit-dir" && args[i+1] == exitsDir:
			exits = true
		}
	}
	return cid && exits
}

// conmonGrace is how long Delete lets conmon record an exit before it kills it.
const conmonGrace = 2 * time.Second

// stopConmon gives the container's conmon grace to finish (it exits once the
// container has and the exit is recorded), then kills it and whatever it still runs.
// It reports whether a conmon was running: one that was may have been creating the
// container meanwhile.
func (r *Runtime) stopConmon(ctx context.Context, id string, grace time.Duration) (bool, error) {
	f, pid, err := r.openConmon(id)
	if err != nil || f == nil {
		return false, err
	}
	defer f.Close()
	wctx, cancel := context.WithTimeout(ctx, grace)
	err = waitPidfd(wctx, f)
	cancel()
	if err == nil {
		// Ours to reap if it was handed to us (a conmon of an earlier life of the
		// daemon, when the daemon's parent is this process's ancestor subreaper).
		reapPidfd(f)
		return true, nil
	}
	if err := killTree(ctx, pid, f, true); err != nil {
		return true, fmt.Errorf("kill conmon %d of %s: %w", pid, id, err)
	}
	return true, nil
}

// waitExitRecorded waits (at most killWait) until the container's exit file exists or
// its conmon is gone: after that ExitStatus answers, or never will.
func (r *Runtime) waitExitRecorded(ctx context.Context, id string) {
	if exists(r.exitFile(id)) {
		return
	}
	f, _, err := r.openConmon(id)
	if err != nil || f == nil {
		return
	}
	defer f.Close()
	wctx, cancel := context.WithTimeout(ctx, killWait)
	defer cancel()
	if waitPidfd(wctx, f) == nil {
		reapPidfd(f)
	}
}

// ReopenLog asks the container's conmon to reopen its log file, after the log was
// rotated, by writing "2 0 0\n" (reopen logs) to the ctl fifo in the bundle as CRI-O
// does, and waits (bounded by ctx and 5s) for the log file to exist again. conmon
// reopens the path it was started with, by creating a new file and renaming it there; for
// a log that MoveLog moved elsewhere, that new file is then renamed to the log's path. A
// container whose exit is recorded, or without a live conmon, gives ErrNotRunning.
func (r *Runtime) ReopenLog(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := r.locks.lock(id)
	defer unlock()
	m := r.readMeta(id)
	if m.Bundle == "" {
		return fmt.Errorf("reopen log of %s: %w", id, ErrNotFound)
	}
	// An exited container's conmon may still hold the fifo open for a moment while it
	// finishes (writing the exit file, closing the log); the exit file decides.
	if exists(r.exitFile(id)) {
		return fmt.Errorf("reopen log of %s: %w", id, ErrNotRunning)
	}
	// O_NONBLOCK: with no reader (conmon gone) the open fails with ENXIO instead of
	// blocking.
	fd, err := unix.Open(filepath.Join(m.Bundle, "ctl"), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("reopen log of %s: %w", id, ErrNotRunning)
	}
	if err != nil {
		return fmt.Errorf("reopen log of %s: %w", id, err)
	}
	ctl := os.NewFile(uintptr(fd), "ctl")
	_, err = ctl.Write([]byte("2 0 0\n"))
	ctl.Close()
	if err != nil {
		return fmt.Errorf("reopen log of %s: write ctl fifo: %w", id, err)
	}
	if m.LogPath == "" {
		return nil
	}
	reopened := m.LogPath
	if m.ConmonLogPath != "" {
		reopened = m.ConmonLogPath
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !exists(reopened) {
		select {
		case <-wctx.Done():
			return fmt.Errorf("reopen log of %s: %s did not reappear: %w", id, reopened, wctx.Err())
		case <-tick.C:
		}
	}
	if reopened != m.LogPath {
		// conmon's new file is the one it writes now: move it where the log is. (Only a
		// reopen makes a file at conmon's path once the log was moved: see MoveLog.)
		if err := os.Rename(reopened, m.LogPath); err != nil {
			return fmt.Errorf("reopen log of %s: %w", id, err)
		}
	}
	return nil
}

// MoveLog moves a container's log file to the path to, and records it there for later
// calls: conmon keeps writing to the file it has open, and ReopenLog brings each file
// conmon reopens to the new path. It is idempotent, so a caller may call it again after a
// crash: a log already at to (its old path gone) is only recorded. An empty to, or a
// container without a log, is left alone.
func (r *Runtime) MoveLog(id, to string) error {
	if err := validID(id); err != nil {
		return err
	}
	unlock := r.locks.lock(id)
	defer unlock()
	m := r.readMeta(id)
	switch {
	case m.Bundle == "":
		return fmt.Errorf("move log of %s: %w", id, ErrNotFound)
	case to == "" || m.LogPath == "" || to == m.LogPath:
		return nil
	case !filepath.IsAbs(to):
		return fmt.Errorf("move log of %s: %q is not absolute", id, to)
	}
	if err := os.Rename(m.LogPath, to); err != nil && !(errors.Is(err, os.ErrNotExist) && exists(to)) {
		return fmt.Errorf("move log of %s: %w", id, err)
	}
	if m.ConmonLogPath == "" {
		m.ConmonLogPath = m.LogPath
	}
	if m.ConmonLogPath == to {
		m.ConmonLogPath = "" // moved back where conmon writes
	}
	m.LogPath = to
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := writeFileAtomic(r.metaFile(id), b); err != nil {
		return fmt.Errorf("move log of %s: %w", id, err)
	}
	return nil
}

// conmonScope returns the systemd scope of a container's conmon when its cgroupsPath
// is a systemd one: crijournal-conmon-<id>.scope in the container's slice.
func conmonScope(cgroupsPath, id string) (units.Path, bool) {
	if !units.IsPath(cgroupsPath) {
		return units.Path{}, false
	}
	p, err := units.Parse(cgroupsPath)
	if err != nil {
		return units.Path{}, false
	}
	return units.Path{Slice: p.Slice, Prefix: units.ConmonPrefix, Name: id}, true
}

// conmonCgroup returns the cgroupfs cgroup of a container's conmon when its cgroupsPath
// is a cgroupfs one: crijournal-conmon-<id> beside the container's own cgroup, as
// conmonScope is beside its scope.
func conmonCgroup(cgroupsPath, id string) (string, bool) {
	if cgroupsPath == "" || units.IsPath(cgroupsPath) {
		return "", false
	}
	return path.Join(path.Dir(cgroupsPath), units.ConmonPrefix+"-"+id), true
}

// joinConmonCgroup moves conmon (pid) into a cgroup of its container's pod: the scope
// conmonScope names with the systemd driver, the cgroup conmonCgroup names with
// cgroupfs (made when missing, with no limits of its own). conmon then counts to the
// pod (its memory, its processes) and not to the daemon, as CRI-O's conmon_cgroup =
// "pod" has it, and a service manager that kills the daemon's cgroup leaves it alone.
// Delete and Release remove the cgroup (stopScopes, removeCgroup) once conmon is gone.
// A container without a cgroupsPath leaves conmon where it is.
func joinConmonCgroup(cgroupsPath, id string, pid int) error {
	if scope, ok := conmonScope(cgroupsPath, id); ok {
		return units.StartScope(scope, pid)
	}
	dir, ok := conmonCgroup(cgroupsPath, id)
	if !ok {
		return nil
	}
	m, err := manager.New(&cgroups.Cgroup{Path: dir, Resources: &cgroups.Resources{SkipDevices: true}})
	if err != nil {
		return fmt.Errorf("conmon's cgroup %s: %w", dir, err)
	}
	if err := m.Apply(pid); err != nil {
		return fmt.Errorf("put conmon %d in cgroup %s: %w", pid, dir, err)
	}
	return nil
}

// removeConmonCgroup removes the cgroupfs cgroup of a container's conmon, which is gone
// (a systemd scope ends with its last process). A missing cgroup is success.
func removeConmonCgroup(cgroupsPath, id string) error {
	if dir, ok := conmonCgroup(cgroupsPath, id); ok {
		return removeCgroup(dir)
	}
	return nil
}

// stopScopes stops the systemd scopes of a container whose cgroupsPath is a systemd
// one (its own, which runc normally stops, and its conmon's, which ends with conmon),
// and removes what is left of their cgroups. A scope that is gone is done; systemd
// that cannot be asked is an error.
func stopScopes(ctx context.Context, cgroupsPath, id string) error {
	p, err := units.Parse(cgroupsPath)
	if err != nil {
		return err
	}
	c, _ := conmonScope(cgroupsPath, id)
	return errors.Join(units.StopScope(ctx, p), units.StopScope(ctx, c))
}

// cgroupDir returns the cgroupfs path (relative to each hierarchy's root) of a
// cgroupsPath: itself, or a systemd scope's directory.
func cgroupDir(cgroupsPath string) (string, error) {
	if !units.IsPath(cgroupsPath) {
		return cgroupsPath, nil
	}
	p, err := units.Parse(cgroupsPath)
	if err != nil {
		return "", err
	}
	return p.Dir()
}

// cgroupsPathOf returns the cgroupsPath of a container from its meta, or else from the
// spec in its bundle ("" if unknown): a cgroupfs path, or a systemd one
// ("slice:prefix:name").
func cgroupsPathOf(m meta) string {
	p := m.CgroupsPath
	if p == "" && m.Bundle != "" {
		b, err := os.ReadFile(filepath.Join(m.Bundle, "config.json"))
		if err != nil {
			return ""
		}
		var s struct {
			Linux struct {
				CgroupsPath string `json:"cgroupsPath"`
			} `json:"linux"`
		}
		if json.Unmarshal(b, &s) != nil {
			return ""
		}
		p = s.Linux.CgroupsPath
	}
	if units.IsPath(p) {
		if _, err := units.Parse(p); err != nil {
			return ""
		}
		return p
	}
	if !filepath.IsAbs(p) || spec.HasDotDot(p) || filepath.Clean(p) == "/" {
		return ""
	}
	return filepath.Clean(p)
}

// removeCgroup removes a cgroupfs path (relative to the cgroup root) from every
// hierarchy, if the runtime left it, empty child cgroups first. A cgroup that still has
// processes after about a second (cgroups.RemovePath's retries) is an error.
func removeCgroup(p string) error {
	var dirs []string
	var st unix.Statfs_t
	if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		dirs = []string{"/sys/fs/cgroup"}
	} else {
		entries, _ := os.ReadDir("/sys/fs/cgroup")
		for _, e := range entries {
			if e.IsDir() {
				dirs = append(dirs, filepath.Join("/sys/fs/cgroup", e.Name()))
			}
		}
	}
	var errs []error
	for _, d := range dirs {
		// cgroups.RemovePath retries a while on EBUSY: a process that has just exited
		// (conmon, whose pidfd said so) may still count in its cgroup for a moment. A
		// cgroup that is gone is success to it.
		err := cgroups.RemovePath(filepath.Join(d, p))
		if err != nil && !errors.Is(err, unix.ENOTDIR) {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	return errors.Join(errs...)
}
