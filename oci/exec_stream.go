package oci

import (
	"cmp"
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
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// Exec runs cmd in a running container (runc exec: the container's environment, user
// and capabilities) connected to a client's streams, and returns its exit code.
//
// Without a terminal, the command's stdin is a pipe fed from s.Stdin (closed when
// s.Stdin ends; /dev/null when it is nil) and its output goes to s.Stdout and
// s.Stderr; the session ends when the command exits, whatever it left running in the
// background (see execDetached). With one (s.TTY), runc runs with a pseudo-terminal of this process as
// its controlling terminal, as CRI-O does: runc gives the command a terminal of its
// own in the container and relays between the two; s.Stdin is written to the
// terminal, its output is copied to s.Stdout, TERM=xterm is set, and each size from
// s.Resize is set on it (runc passes it on). Without runc's own terminal handling, a
// resize would have to reach a terminal that only runc holds.
//
// When ctx ends (the client went away), runc, the command and everything it started
// that is still its descendant are killed with SIGKILL and reaped, and ctx's error is
// returned. The runtime's own failures (the container is not running, the command
// does not exist) are errors, not exit codes; a stopped container gives
// ErrNotRunning. Exec ends every goroutine it started before it returns, except the
// one copying s.Stdin, which ends when that reader does.
func (r *Runtime) Exec(ctx context.Context, id string, cmd []string, s Streams) (exitCode int, err error) {
	if err := validID(id); err != nil {
		return -1, err
	}
	if len(cmd) == 0 {
		return -1, fmt.Errorf("exec in %s: %w: empty command", id, ErrInvalidSpec)
	}
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	if !s.TTY {
		// Answered when the command exits, like ExecSync (see execDetached).
		if s.Resize != nil {
			var wg sync.WaitGroup
			done := make(chan struct{})
			defer wg.Wait()
			defer close(done)
			wg.Go(func() { forEachResize(s.Resize, done, func(remotecommand.TerminalSize) {}) })
		}
		return r.execDetached(ctx, id, cmd, s.Stdin, s.Stdout, s.Stderr)
	}
	logFile, err := os.CreateTemp(r.stateDir, "exec-*.log")
	if err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	logFile.Close()
	defer os.Remove(logFile.Name())

	args := append(r.globalArgs("--log", logFile.Name(), "--log-format", "json"), "exec")
	if s.TTY {
		args = append(args, "--tty", "--env", "TERM=xterm")
	}
	args = append(append(args, id), cmd...)
	c := exec.Command(r.path, args...)
	c.WaitDelay = execWaitDelay

	// Goroutines that end before Exec returns; done stops the resize one.
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{})
	defer close(done)

	var term *os.File   // the terminal's master side (TTY)
	var stdinW *os.File // the write end of the command's stdin pipe (no TTY)
	if s.TTY {
		master, slave, err := openPty()
		if err != nil {
			return -1, fmt.Errorf("exec in %s: %w", id, err)
		}
		defer master.Close()
		defer slave.Close()
		term = master
		c.Stdin, c.Stdout, c.Stderr = slave, slave, slave
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	} else {
		c.Stdout, c.Stderr = s.Stdout, s.Stderr
		if s.Stdin != nil {
			pr, pw, err := os.Pipe()
			if err != nil {
				return -1, fmt.Errorf("exec in %s: %w", id, err)
			}
			defer pr.Close()
			defer pw.Close()
			c.Stdin, stdinW = pr, pw
		}
	}
	if s.Resize != nil {
		wg.Go(func() {
			forEachResize(s.Resize, done, func(size remotecommand.TerminalSize) {
				if term != nil {
					_ = setWinsize(term, size)
				}
			})
		})
	}

	if err := c.Start(); err != nil {
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	// runc stays for the whole session, relaying the terminal, and started with the
	// daemon's oom_score_adj (-999 under contrib/systemd): the kernel would kill it last,
	// for as long as a client keeps the session. The command it starts in the container
	// gets the container's value from runc itself.
	if err := setOOMScoreAdj(c.Process.Pid, r.relayOOMScoreAdj(id)); err != nil {
		_ = c.Process.Kill()
		_ = c.Wait()
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	// runc holds its own copies now.
	if closer, ok := c.Stdin.(*os.File); ok {
		closer.Close()
	}
	runcFd, err := openPidfd(c.Process.Pid)
	if err != nil {
		_ = c.Process.Kill()
		_ = c.Wait()
		return -1, fmt.Errorf("exec in %s: %w", id, err)
	}
	defer runcFd.Close()

	if s.Stdin != nil {
		in := io.Writer(stdinW)
		if term != nil {
			in = term
		}
		// Not in wg: only the client can end a read of its stdin.
		go func() {
			_, _ = io.Copy(in, s.Stdin)
			if stdinW != nil {
				stdinW.Close() // end of file for the command
			}
		}()
	}
	outputDone := make(chan struct{})
	if term != nil {
		out := s.Stdout
		if out == nil {
			out = io.Discard
		}
		wg.Go(func() {
			defer close(outputDone)
			// Ends with EIO once runc, the last holder of the terminal, has exited,
			// or when the master is closed below.
			_, _ = io.Copy(out, term)
		})
	} else {
		close(outputDone)
	}

	waited := make(chan error, 1)
	go func() { waited <- c.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-ctx.Done():
		kerr := killTree(context.WithoutCancel(ctx), c.Process.Pid, runcFd, false)
		<-waited
		err := fmt.Errorf("exec %q in %s: %w", cmd, id, ctx.Err())
		if kerr != nil {
			err = fmt.Errorf("%w (kill: %v)", err, kerr)
		}
		return -1, err
	}
	// Let the output that runc relayed before it exited reach the client.
	select {
	case <-outputDone:
	case <-time.After(execWaitDelay):
	}
	if term != nil {
		term.Close()
	}
	_, _, code, err := r.execResult(ctx, id, logFile.Name(), nil, nil, werr)
	return code, err
}

// openPty opens a new pseudo-terminal: its master side, non-blocking so that reads
// wait in the netpoller and Close ends them, and its slave side.
func openPty() (master, slave *os.File, err error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	// TIOCGPTPEER opens the slave side through the master, not by a path in /dev/pts.
	sfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno != 0 {
		unix.Close(fd)
		return nil, nil, fmt.Errorf("open pty peer: %w", errno)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), os.NewFile(sfd, "pty"), nil
}

// setWinsize sets a terminal's size through its master side.
func setWinsize(master *os.File, size remotecommand.TerminalSize) error {
	rc, err := master.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		serr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: size.Height, Col: size.Width})
	})
	return errors.Join(err, serr)
}

// relayOOMScoreAdj is the oom_score_adj of the runc that relays the terminal of an exec
// session in container id: the container's own (its spec's process.oomScoreAdj, which
// the command in the container gets too), or 0, a process's default, when the spec does
// not say; see relayOOMScore.
func (r *Runtime) relayOOMScoreAdj(id string) int {
	var container *int
	bundle := cmp.Or(r.readMeta(id).Bundle, r.containerDir(id))
	if b, err := os.ReadFile(filepath.Join(bundle, "config.json")); err == nil {
		var spec struct {
			Process *struct {
				OOMScoreAdj *int `json:"oomScoreAdj"`
			} `json:"process"`
		}
		if json.Unmarshal(b, &spec) == nil && spec.Process != nil {
			container = spec.Process.OOMScoreAdj
		}
	}
	own, err := readOOMScoreAdj("/proc/self/oom_score_adj")
	if err != nil {
		own = -1000 // unknown: the container's value, unclamped
	}
	return relayOOMScore(container, own)
}

// relayOOMScore is a relay's oom_score_adj for a container's (nil: unknown, taken as 0)
// and the daemon's own: the container's, never below the daemon's (which a process
// without CAP_SYS_RESOURCE cannot go under, and which one with it should not), within
// the kernel's [-1000, 1000].
func relayOOMScore(container *int, own int) int {
	adj := 0
	if container != nil {
		adj = *container
	}
	return min(max(adj, own, -1000), 1000)
}

// readOOMScoreAdj reads an oom_score_adj file of /proc.
func readOOMScoreAdj(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// setOOMScoreAdj sets the oom_score_adj of process pid, a child of this process.
func setOOMScoreAdj(pid, adj int) error {
	path := fmt.Sprintf("/proc/%d/oom_score_adj", pid)
	if err := os.WriteFile(path, []byte(strconv.Itoa(adj)), 0); err != nil {
		return fmt.Errorf("set oom_score_adj of the terminal's relay: %w", err)
	}
	return nil
}
