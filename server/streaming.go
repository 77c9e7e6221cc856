package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"

	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/server/stream"
)

// The CRI side of streaming: exec, attach and port-forward sessions, as the kubelet and
// crictl use them. A CRI call (Exec, Attach, PortForward) validates the request and
// answers with a URL holding a single-use token (k8s.io/cri-streaming's request
// cache); the client then opens an SPDY or WebSocket session at that URL, on
// stream_address:stream_port, and the session runs here, through streamRuntime. The
// server that listens, tracks the sessions' connections and stops them is package
// stream's.
//
// Sessions are not journaled: nothing they create outlives them. Each session's
// context ends when its client's connection does or when the streaming server stops,
// and with it every process and goroutine the session started (see oci.Runtime.Exec
// and Attach, netns.Forward).

// StartStreaming listens on the configured stream_address:stream_port (port 0: any
// free port), with TLS when stream_tls_cert and stream_tls_key are set, and serves
// streaming sessions from a goroutine until Stop. Exec, Attach and PortForward answer
// Unavailable until it has been called; call it before serving the CRI.
func (s *Server) StartStreaming() (*stream.Server, error) {
	st, err := stream.Start(stream.Config{
		Address: net.JoinHostPort(s.cfg.StreamAddress, s.cfg.StreamPort),
		TLSCert: s.cfg.StreamTLSCert, TLSKey: s.cfg.StreamTLSKey, Log: s.log,
	}, streamRuntime{s})
	if err != nil {
		return nil, err
	}
	s.streams.Store(st)
	return st, nil
}

// errNoStreams answers streaming calls on a server without a streaming server.
var errNoStreams = newError(errUnavailable, "the streaming server is not running")

// streamRuntime runs the sessions of the streaming server. The container or sandbox
// is looked up again: it may have stopped since its URL was handed out.
type streamRuntime struct{ s *Server }

var _ streaming.Runtime = streamRuntime{}

func (r streamRuntime) Exec(ctx context.Context, id string, cmd []string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	c, rt, err := r.runtimeOf(id)
	if err != nil {
		return err
	}
	code, err := rt.Exec(ctx, c.rec.ID, cmd, oci.Streams{Stdin: in, Stdout: writerOrNil(out), Stderr: writerOrNil(errOut), TTY: tty, Resize: resize})
	if err != nil {
		return r.sessionError(ctx, "exec", c.rec.ID, err)
	}
	if code != 0 {
		// The library reports this code to the client as the command's exit code.
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", code), Code: code}
	}
	return nil
}

func (r streamRuntime) Attach(ctx context.Context, id string, in io.Reader, out, errOut io.WriteCloser, tty bool, resize <-chan remotecommand.TerminalSize) error {
	c, rt, err := r.runtimeOf(id)
	if err != nil {
		return err
	}
	err = rt.Attach(ctx, c.rec.ID, oci.StdinModeOf(c.config), oci.Streams{Stdin: in, Stdout: writerOrNil(out), Stderr: writerOrNil(errOut), TTY: tty, Resize: resize})
	return r.sessionError(ctx, "attach", c.rec.ID, err)
}

func (r streamRuntime) PortForward(ctx context.Context, sandboxID string, port int32, stream io.ReadWriteCloser) error {
	sb, err := r.s.readySandbox(sandboxID)
	if err != nil {
		return err
	}
	nsPath := ""
	if !sb.obj.HostNetwork {
		if nsPath = sb.obj.Namespaces[string(netns.Net)]; nsPath == "" {
			return fmt.Errorf("pod sandbox %s has no network namespace", sb.rec.ID)
		}
	}
	conn, err := netns.DialLoopback(ctx, nsPath, port)
	if err != nil {
		return fmt.Errorf("connect to port %d of pod sandbox %s: %w", port, sb.rec.ID, err)
	}
	return r.sessionError(ctx, "port-forward", sb.rec.ID, netns.Forward(ctx, conn, stream))
}

// sessionError is what a session reports to the library: its error, but when the
// session ended because the streaming server is stopping, one that says so, and when
// its client went away, none: there is nobody to tell (the library would log it as an
// unhandled error), and the end is logged at debug level.
func (r streamRuntime) sessionError(ctx context.Context, kind, id string, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if st := r.s.streams.Load(); st != nil && st.Stopping() {
		return fmt.Errorf("%s session of %s ended: the runtime's streaming server is stopping", kind, id)
	}
	r.s.log.Debug("streaming session ended by its client", "kind", kind, "id", id, "err", err)
	return nil
}

// runtimeOf returns a running container and its runtime.
func (r streamRuntime) runtimeOf(id string) (container, *oci.Runtime, error) {
	c, err := r.s.runningContainer(id)
	if err != nil {
		return container{}, nil, err
	}
	if r.s.runtimes == nil {
		return container{}, nil, errors.New("no container runtime")
	}
	rt, err := r.s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return container{}, nil, err
	}
	return c, rt, nil
}

// writerOrNil returns w, or a nil io.Writer when w is a nil io.WriteCloser, so that
// an unconnected stream stays nil.
func writerOrNil(w io.WriteCloser) io.Writer {
	if w == nil {
		return nil
	}
	return w
}
