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
)

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
	return r.prepare(ctx, id, logPath, terminal, stdin, nil)
}

// prepare is Prepare, with extra arguments of conmon's (a restore's: see Restore).
func (r *Runtime) prepare(ctx context.Context, id, logPath string, terminal bool, stdin StdinMode, extra []string) (p *Pending, err error) {
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
		err = r.removeFailed(ctx, id, err)
	}()
	if err := os.Remove(r.exitFile(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("create %s: stale exit file: %w", id, err)
	}

	// conmon's ends of its pipes, and its stderr file, are closed once it has them (or
	// failed to start); this process's ends are p's, or closed here when conmon is gone
	// (the start pipe's end then starts nothing).
	var syncR, syncW, startR, startW, errFile, pidfd *os.File
	defer func() { closeAll(syncW, startR, errFile) }()
	defer func() {
		if p == nil {
			closeAll(syncR, startW, pidfd)
		}
	}()
	if syncR, syncW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	if startR, startW, err = os.Pipe(); err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	// conmon's own messages before it detaches its standard streams (bad flags, a log
	// file it cannot open) land here.
	if errFile, err = os.OpenFile(filepath.Join(dir, "conmon.stderr"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600); err != nil {
		return nil, fmt.Errorf("create %s: %w", id, err)
	}
	cmd := exec.Command(r.conmon, append(r.conmonArgs(id, logPath, terminal, stdin), extra...)...)
	cmd.Dir = dir // conmon writes its "oom" file in its working directory
	cmd.Env = []string{"PATH=" + envPath(), "_OCI_SYNCPIPE=3", "_OCI_STARTPIPE=4"}
	cmd.ExtraFiles = []*os.File{syncW, startR}
	cmd.Stdout = errFile
	cmd.Stderr = errFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("create %s: start conmon: %w", id, err)
	}
	// A pidfd names conmon for good: Close kills exactly this process.
	pidfd, err = openPidfd(cmd.Process.Pid)
	if err == nil {
		// conmon --sync stays this process's child: reap it when it exits, from a
		// pidfd the netpoller watches (no thread blocked per container).
		err = reapChild(cmd.Process.Pid)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
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
		err = r.removeFailed(ctx, id, err)
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

	// conmon leaves the daemon's cgroup for one of the pod's (joinConmonCgroup; its name
	// follows from the cgroupsPath that meta.json recorded, and Delete, the step's undo,
	// removes it) while it starts the runtime, not before: the first move of a process
	// between cgroups after a quiet spell waits for an RCU grace period of the kernel's
	// (8 to 13 ms here), and runc's own move, of the container's init into its cgroup,
	// comes some 10 ms after the start byte. Made side by side, the two moves share one
	// wait instead of paying one each (docs/BENCHMARKS.md, "runc's wait for the cgroup").
	// The move is bounded (units.Timeout for systemd) and always waited for.
	joined := make(chan error, 1)
	go func() { joined <- joinConmonCgroup(m.CgroupsPath, id, p.pid) }()

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
		joinErr := <-joined
		if res.err != nil {
			if msg := conmonStderr(dir); msg != "" {
				res.err = fmt.Errorf("%w; conmon: %s", res.err, msg)
			}
			return 0, fmt.Errorf("create %s: %w", id, res.err)
		}
		if joinErr != nil {
			return 0, fmt.Errorf("create %s: %w", id, joinErr)
		}
		// The pidfd answers Running from now on; Close closes p's copy.
		if kept, err := dupFile(p.pidfd); err == nil {
			r.conmons.keep(id, kept)
		}
		return res.pid, nil
	case <-ctx.Done():
		<-joined
		// The deferred kill ends conmon, which closes the pipe and ends the reader.
		return 0, fmt.Errorf("create %s: waiting for conmon: %w", id, ctx.Err())
	}
}

// removeFailed removes what a failed Prepare or Create left of container id, as Delete
// does, within createCleanup also when ctx is over, and returns err with the removal's
// failure, if any, added.
func (r *Runtime) removeFailed(ctx context.Context, id string, err error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createCleanup)
	defer cancel()
	if rerr := r.remove(cctx, id, 0); rerr != nil {
		return fmt.Errorf("%w (cleanup: %v)", err, rerr)
	}
	return err
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

// closeAll closes the files that are not nil.
func closeAll(files ...*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
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
