package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// StdinMode says whether a container's main process gets a standard input that attach
// clients write to: the CRI's stdin and stdin_once. It decides conmon's -i and
// --leave-stdin-open, as CRI-O does. A container with a terminal always gets its input
// through the terminal, whatever the mode.
type StdinMode int

const (
	// StdinNone: the process's stdin is /dev/null.
	StdinNone StdinMode = iota
	// StdinOpen: stdin is a pipe that stays open across attach sessions (CRI stdin).
	StdinOpen
	// StdinOnce: stdin is a pipe that conmon closes when the first attach session
	// ends (CRI stdin and stdin_once), so the process reads end of file.
	StdinOnce
)

// StdinModeOf returns the stdin mode a container's config asks for.
func StdinModeOf(cfg *runtimeapi.ContainerConfig) StdinMode {
	switch {
	case !cfg.GetStdin():
		return StdinNone
	case cfg.GetStdinOnce():
		return StdinOnce
	}
	return StdinOpen
}

// Attach pipe types: the first byte of each packet conmon sends on its attach socket
// says which of the container's streams the rest came from (stdpipe_t in conmon).
const (
	attachPipeStdout = 2
	attachPipeStderr = 3
)

// attachPacket is the largest packet conmon reads from an attach client at once
// (CONN_SOCK_BUF_SIZE): a longer one would be cut short, since the socket keeps
// packet boundaries.
const attachPacket = 32 * 1024

// Streams are a client's ends of an exec or attach session. A nil stream is not
// connected.
type Streams struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// TTY says the session has a terminal: its output comes on Stdout alone.
	TTY bool
	// Resize delivers the client's terminal sizes (TTY only); nil: none. It is
	// drained until the session ends.
	Resize <-chan remotecommand.TerminalSize
}

// Attach connects a client's streams to the main process of a running container
// through conmon's attach socket (<StateDir>/attach/<id>/attach): the container's
// output is copied to Stdout and Stderr, and Stdin to the container's stdin (its
// terminal, or the pipe conmon holds when the container was created with a stdin
// mode other than StdinNone). When Stdin ends, the socket's write side is shut down;
// conmon then closes the container's stdin if it was created with StdinOnce.
// Terminal sizes from Resize are written to conmon's ctl fifo in the bundle.
//
// Attach returns when the container's output ends (it exited), when Stdin ends for a
// container whose stdin stays open (StdinOpen without a terminal: nothing else
// would end the session, as in CRI-O), or when ctx ends. It ends every goroutine it
// started except the one copying Stdin, which ends when that reader does. A container
// whose exit is recorded, or without an attach socket, gives ErrNotRunning.
func (r *Runtime) Attach(ctx context.Context, id string, stdin StdinMode, s Streams) error {
	if err := validID(id); err != nil {
		return err
	}
	m := r.readMeta(id)
	if m.Bundle == "" {
		return fmt.Errorf("attach to %s: %w", id, ErrNotFound)
	}
	if exists(r.exitFile(id)) {
		return fmt.Errorf("attach to %s: %w", id, ErrNotRunning)
	}
	// On return, in this order: the socket is closed (ending the output copy),
	// done is closed (ending the resize goroutine), and both are waited for.
	var wg sync.WaitGroup
	defer wg.Wait()
	done := make(chan struct{})
	defer close(done)
	sock := filepath.Join(r.attachDir(), id, "attach")
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
		return fmt.Errorf("attach to %s: %w", id, ErrNotRunning)
	}
	if err != nil {
		return fmt.Errorf("attach to %s: %w", id, err)
	}
	defer conn.Close()

	if s.Resize != nil {
		ctl, err := openCtl(m.Bundle)
		if err != nil {
			return fmt.Errorf("attach to %s: %w", id, err)
		}
		wg.Go(func() {
			defer ctl.Close()
			forEachResize(s.Resize, done, func(size remotecommand.TerminalSize) {
				// conmon's control message 1 is a resize: "1 <rows> <columns>".
				_, _ = fmt.Fprintf(ctl, "1 %d %d\n", size.Height, size.Width)
			})
		})
	}

	output := make(chan error, 1)
	wg.Go(func() { output <- copyAttachOutput(conn, s.Stdout, s.Stderr) })
	input := make(chan error, 1)
	if s.Stdin != nil {
		// Not in wg: it may be blocked reading the client's stdin, which only the
		// client (or the end of its connection) can end.
		go func() { input <- copyAttachInput(conn, s.Stdin) }()
	}

	// conmon may have closed the socket at once if the container exited meanwhile.
	for {
		select {
		case err := <-output:
			return err
		case err := <-input:
			input = nil
			if err != nil {
				return fmt.Errorf("attach to %s: stdin: %w", id, err)
			}
			if stdin == StdinOpen && !s.TTY {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// copyAttachOutput copies conmon's output packets to stdout and stderr by their
// type, until the socket ends. A write error ends the copy.
func copyAttachOutput(conn *net.UnixConn, stdout, stderr io.Writer) error {
	buf := make([]byte, attachPacket+1)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			var dst io.Writer
			switch buf[0] {
			case attachPipeStdout:
				dst = stdout
			case attachPipeStderr:
				dst = stderr
			}
			if dst != nil {
				if _, werr := dst.Write(buf[1:n]); werr != nil {
					return werr
				}
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil // conmon shut the socket down
		}
	}
}

// copyAttachInput copies stdin to conmon in packets it reads whole, then shuts the
// socket's write side down, which conmon takes as the end of this client's input.
func copyAttachInput(conn *net.UnixConn, stdin io.Reader) error {
	buf := make([]byte, attachPacket)
	for {
		n, err := stdin.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return conn.CloseWrite()
		}
		if err != nil {
			return err
		}
	}
}

// openCtl opens conmon's ctl fifo in bundle for writing without blocking: with no
// reader (conmon gone) the open fails, with ErrNotRunning.
func openCtl(bundle string) (*os.File, error) {
	fd, err := unix.Open(filepath.Join(bundle, "ctl"), unix.O_WRONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENOENT) {
		return nil, ErrNotRunning
	}
	if err != nil {
		return nil, fmt.Errorf("open ctl fifo: %w", err)
	}
	return os.NewFile(uintptr(fd), "ctl"), nil
}

// forEachResize calls fn with every size from resize until it is closed or done is.
func forEachResize(resize <-chan remotecommand.TerminalSize, done <-chan struct{}, fn func(remotecommand.TerminalSize)) {
	for {
		select {
		case size, ok := <-resize:
			if !ok {
				return
			}
			fn(size)
		case <-done:
			return
		}
	}
}
