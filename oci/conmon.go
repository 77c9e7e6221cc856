package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

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

// createCleanup bounds the cleanup of a failed Prepare or Create when the caller's
// context is over.
const createCleanup = 30 * time.Second

// Pending is a container whose conmon [Runtime.Prepare] has started and holds on its
// start pipe: conmon has parsed its flags and opened the log, and runs nothing until
// [Pending.Create] gives it the spec. Its exec and the loading of its libraries (about
// 10 ms) overlap whatever the caller does meanwhile, such as making the container's
// root filesystem. Every Pending is closed ([Pending.Close]), which kills a conmon that
// Create never started. A Pending is used by one goroutine.
type Pending struct {
	r        *Runtime
	id       string
	logPath  string
	terminal bool
	pid      int      // conmon's
	pidfd    *os.File // conmon's, for good: a kill reaches exactly this process
	syncR    *os.File // conmon reports the container's PID, or the runtime's error, here
	startW   *os.File // a byte written, or the pipe's end, lets conmon run the runtime
	used     bool     // Create ran, or Close killed conmon: it is not to be started
	closed   bool
}

// Prepare starts the conmon of container id, held on its start pipe (see [Pending]).
// The container's state directory, which Prepare makes, is its bundle: Create writes
// config.json there. logPath is where conmon writes the container's output in the CRI
// log format ("" means no log; its directory is made when missing, see ensureLogDir),
// terminal whether the container's process has a terminal (the spec's
// process.terminal, which Create checks), stdin whether it gets a standard input that
// attach clients write to (see [StdinMode]). An ID whose state directory exists gives
// ErrAlreadyExists. On failure nothing of it is left.
//
// conmon's PID is recorded at once, so that Delete finds it. conmon takes the end of
// its start pipe as a start too: one whose daemon died holding it runs the runtime,
// which fails without the config.json that only Create writes.
func (r *Runtime) Prepare(ctx context.Context, id, logPath string, terminal bool, stdin StdinMode) (p *Pending, err error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if logPath != "" && !filepath.IsAbs(logPath) {
		return nil, fmt.Errorf("create %s: log path %q must be absolute", id, logPath)
	}
	unlock := r.locks.lock(id)
	defer unlock()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	if err := ensureLogDir(logPath); err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	dir := r.containerDir(id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("create %s: %w", id, ErrAlreadyExists)
		}
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	defer func() {
		if err == nil {
			return
		}
		if p != nil {
			p.Close() // kills conmon before the remove
			p = nil
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createCleanup)
		defer cancel()
		if rerr := r.remove(cctx, id, 0); rerr != nil {
			err = fmt.Errorf("%w (cleanup: %v)", err, rerr)
		}
	}()
	if err := os.Remove(r.exitFile(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("create %s: stale exit file: %w", id, err)
	}

	syncR, syncW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	startR, startW, err := os.Pipe()
	if err != nil {
		syncR.Close()
		syncW.Close()
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	// conmon's own messages before it detaches its standard streams (bad flags, a log
	// file it cannot open) land here.
	errFile, err := os.OpenFile(filepath.Join(dir, "conmon.stderr"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		for _, f := range []*os.File{syncR, syncW, startR, startW} {
			f.Close()
		}
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	cmd := exec.Command(r.conmon, r.conmonArgs(id, logPath, terminal, stdin)...)
	cmd.Dir = dir // conmon writes its "oom" file in its working directory
	cmd.Env = []string{"PATH=" + envPath(), "_OCI_SYNCPIPE=3", "_OCI_STARTPIPE=4"}
	cmd.ExtraFiles = []*os.File{syncW, startR}
	cmd.Stdout = errFile
	cmd.Stderr = errFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	syncW.Close()
	startR.Close()
	errFile.Close()
	if err != nil {
		syncR.Close()
		startW.Close() // no conmon to take it as a start
		return nil, fmt.Errorf("create %s: start conmon: %w", id, err)
	}
	// A pidfd names conmon for good: Close kills exactly this process.
	pidfd, err := openPidfd(cmd.Process.Pid)
	if err == nil {
		// conmon --sync stays this process's child: reap it when it exits, from a
		// pidfd the netpoller watches (no thread blocked per container).
		err = reapChild(cmd.Process.Pid)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		syncR.Close()
		startW.Close()
		if pidfd != nil {
			pidfd.Close()
		}
		return nil, fmt.Errorf("create %s: watch conmon: %w", id, err)
	}
	p = &Pending{r: r, id: id, logPath: logPath, terminal: terminal, pid: cmd.Process.Pid, pidfd: pidfd, syncR: syncR, startW: startW}
	_ = cmd.Process.Release()
	// Not fsynced, nor is anything in the state directory: it lives under the run root,
	// whose state does not outlive a reboot (a tmpfs on most nodes), and a crash of the
	// daemon alone loses nothing written.
	if err := writeFileAtomic(r.conmonPidFile(id), []byte(strconv.Itoa(p.pid))); err != nil {
		return p, fmt.Errorf("create %s: %w", id, err)
	}
	return p, nil
}

// Create creates the container from spec under p's conmon and returns the container's
// init PID; the container is in state created until Start. It records the bundle, the
// log path and the cgroup in the state directory (meta.json) for later calls, writes
// config.json, then lets conmon run the runtime's create, and waits, bounded by ctx,
// for conmon to report the PID on its sync pipe. conmon, in a session of its own,
// relays the container's output to the log and, when the container exits, writes the
// exit code to the exits directory. On failure Create returns the runtime's error text
// and removes what Prepare and it made, as Delete does. It runs once per Pending.
func (p *Pending) Create(ctx context.Context, spec *specs.Spec) (pid int, err error) {
	r, id := p.r, p.id
	if p.used {
		return 0, fmt.Errorf("create %s: conmon was started or stopped before", id)
	}
	p.used = true
	unlock := r.locks.lock(id)
	defer unlock()
	defer func() {
		if err == nil {
			return
		}
		// conmon, and the runtime under it, are gone before their container is deleted.
		if kerr := p.kill(context.WithoutCancel(ctx)); kerr != nil {
			err = fmt.Errorf("%w (kill conmon: %v)", err, kerr)
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createCleanup)
		defer cancel()
		if rerr := r.remove(cctx, id, 0); rerr != nil {
			err = fmt.Errorf("%w (cleanup: %v)", err, rerr)
		}
	}()
	if spec == nil || spec.Process == nil {
		return 0, fmt.Errorf("create %s: %w: spec without a process", id, ErrInvalidSpec)
	}
	if spec.Process.Terminal != p.terminal {
		return 0, fmt.Errorf("create %s: %w: process.terminal is %v, conmon was prepared for %v", id, ErrInvalidSpec, spec.Process.Terminal, p.terminal)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("create %s: %w", id, err)
	}

	dir := r.containerDir(id)
	m := meta{Bundle: dir, LogPath: p.logPath}
	if spec.Linux != nil {
		m.CgroupsPath = spec.Linux.CgroupsPath
	}
	b, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	if err := writeFileAtomic(r.metaFile(id), b); err != nil {
		return 0, fmt.Errorf("create %s: %w", id, err)
	}
	cfg, err := json.Marshal(spec)
	if err != nil {
		return 0, fmt.Errorf("create %s: encode spec: %w", id, err)
	}
	// The spec is runc's input and outlives nothing that a crash of the node ends (the
	// container does not survive a reboot, and its undo deletes it); readers after one
	// (NRI's view of the spec, cgroupsPathOf) take a missing or empty file as unknown.
	if err := writeFileAtomic(filepath.Join(dir, "config.json"), cfg); err != nil {
		return 0, fmt.Errorf("create %s: %w", id, err)
	}
	// Everything is in place: conmon may run the runtime.
	if _, err := p.startW.Write([]byte{0}); err != nil {
		// conmon is gone already (bad flags, a log it could not open, a Delete): say why.
		if msg := conmonStderr(dir); msg != "" {
			err = fmt.Errorf("%w; conmon: %s", err, msg)
		}
		return 0, fmt.Errorf("create %s: start conmon: %w", id, err)
	}

	type result struct {
		pid int
		err error
	}
	done := make(chan result, 1)
	go func() {
		pid, err := readSync(p.syncR)
		done <- result{pid, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			if msg := conmonStderr(dir); msg != "" {
				res.err = fmt.Errorf("%w; conmon: %s", res.err, msg)
			}
			return 0, fmt.Errorf("create %s: %w", id, res.err)
		}
		// With the systemd driver, conmon leaves the daemon's cgroup for a scope of its
		// own in the pod's slice, as CRI-O's conmon_cgroup = "pod" does: it is the pod's,
		// and a restart of the daemon's unit does not touch it. The scope's name follows
		// from the cgroupsPath that meta.json recorded before conmon started the
		// runtime, and Delete (the step's undo) stops it.
		if cp, ok := conmonScope(m.CgroupsPath, id); ok {
			if err := units.StartScope(cp, p.pid); err != nil {
				return 0, fmt.Errorf("create %s: %w", id, err)
			}
		}
		// The pidfd answers Running from now on; Close closes p's copy.
		if kept, err := dupFile(p.pidfd); err == nil {
			r.conmons.keep(id, kept)
		}
		return res.pid, nil
	case <-ctx.Done():
		// The deferred kill ends conmon, which closes the pipe and ends the reader.
		return 0, fmt.Errorf("create %s: waiting for conmon: %w", id, ctx.Err())
	}
}

// Bundle is the container's bundle, its state directory, where Create writes
// config.json.
func (p *Pending) Bundle() string { return p.r.containerDir(p.id) }

// Close releases p. A conmon that Create did not start is killed first, and its
// start pipe closed only then (conmon would take its end as a start); its state
// directory stays for Delete, the undo of the journal's step, to remove. Closing
// again does nothing.
func (p *Pending) Close() error {
	if p.closed {
		return nil
	}
	var err error
	if !p.used {
		p.used = true
		err = p.kill(context.Background())
	}
	p.closed = true
	p.startW.Close()
	p.syncR.Close()
	p.pidfd.Close()
	return err
}

// kill kills p's conmon and what it runs, unless it has exited already (a Delete may
// have killed it, and its PID may name another process since it was reaped).
func (p *Pending) kill(ctx context.Context) error {
	if exited(p.pidfd) {
		return nil
	}
	return killTree(ctx, p.pid, p.pidfd, true)
}

// ensureLogDir creates the directory of a container's log file (0755, as the kubelet
// makes pod log directories) when it is missing, so that conmon can open the log: a
// crictl user's pod log directory need not exist. Nothing: no log file.
func ensureLogDir(logFile string) error {
	if logFile == "" {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(logFile), 0o755); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	return nil
}

// dupFile returns a copy of f's descriptor (close-on-exec) as a file of its own.
func dupFile(f *os.File) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := rc.Control(func(orig uintptr) { fd, derr = unix.FcntlInt(orig, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
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

// readSync reads conmon's report from the sync pipe: {"pid": N} on success,
// {"pid": -1, "message": "..."} when the runtime failed, nothing if conmon died.
func readSync(r io.Reader) (int, error) {
	var msg struct {
		Pid     *int   `json:"pid"`
		Message string `json:"message"`
	}
	if err := json.NewDecoder(io.LimitReader(r, 1<<20)).Decode(&msg); err != nil {
		if errors.Is(err, io.EOF) {
			return 0, errors.New("conmon exited without reporting the container's pid")
		}
		return 0, fmt.Errorf("read conmon's sync pipe: %w", err)
	}
	if msg.Pid == nil || *msg.Pid <= 0 {
		text := runtimeMessage([]byte(msg.Message))
		if text == "" {
			text = "runtime failed without a message"
		}
		return 0, errors.New(text)
	}
	return *msg.Pid, nil
}

// conmonStderr returns what conmon printed before detaching, trimmed.
func conmonStderr(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "conmon.stderr"))
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return strings.TrimSpace(string(b))
}

func envPath() string {
	if p := os.Getenv("PATH"); p != "" {
		return p
	}
	return defaultPath
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
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(comm)) == "conmon" {
			reapPidfd(f)
		}
		f.Close()
		return nil, 0, nil
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !isConmonOf(cmdline, r.exitsDir(), id) {
		f.Close()
		return nil, 0, nil
	}
	return f, pid, nil
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
	if !filepath.IsAbs(p) || hasDotDot(p) || filepath.Clean(p) == "/" {
		return ""
	}
	return filepath.Clean(p)
}

// removeCgroup removes a cgroupfs path (relative to the cgroup root) from every
// hierarchy, if the runtime left it. A cgroup that still has processes is an error.
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
		err := unix.Rmdir(filepath.Join(d, p))
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", filepath.Join(d, p), err))
		}
	}
	return errors.Join(errs...)
}
