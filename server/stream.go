package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"k8s.io/cri-streaming/pkg/streaming"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
)

// The streaming server: exec, attach and port-forward sessions, as the kubelet and
// crictl use them. A CRI call (Exec, Attach, PortForward) validates the request and
// answers with a URL holding a single-use token (k8s.io/cri-streaming's request
// cache); the client then opens an SPDY or WebSocket session at that URL, on
// stream_address:stream_port, and the session runs here.
//
// Sessions are not journaled: nothing they create outlives them. Each session's
// context ends when its client's connection does (a read on it fails) or when the
// streaming server stops, and with it every process and goroutine the session
// started (see oci.Runtime.Exec and Attach, netns.Forward).

// StreamServer is the running streaming server. StartStreaming makes it; its owner stops
// it with Stop.
type StreamServer struct {
	lib  streaming.Server // the request cache and the protocol handlers
	http *http.Server
	lis  *trackingListener
	// URL is the server's base URL, such as http://127.0.0.1:41234.
	URL string

	stopSessions context.CancelFunc // ends every session's context
	served       chan error         // the Serve goroutine's result

	mu       sync.Mutex
	stopped  bool
	sessions sync.WaitGroup // HTTP requests in flight, sessions included
}

// streamStopGrace is how long Stop lets sessions, whose contexts it has cancelled,
// tell their clients that they ended, before it closes their connections;
// streamStopTimeout bounds its whole wait.
const (
	streamStopGrace   = 2 * time.Second
	streamStopTimeout = 10 * time.Second
)

// StartStreaming listens on the configured stream_address:stream_port (port 0: any
// free port), with TLS when stream_tls_cert and stream_tls_key are set, and serves
// streaming sessions from a goroutine until Stop. Exec, Attach and PortForward answer
// Unavailable until it has been called; call it before serving the CRI.
func (s *Server) StartStreaming() (*StreamServer, error) {
	var tlsConfig *tls.Config
	if s.cfg.StreamTLSCert != "" || s.cfg.StreamTLSKey != "" {
		cert, err := tls.LoadX509KeyPair(s.cfg.StreamTLSCert, s.cfg.StreamTLSKey)
		if err != nil {
			return nil, fmt.Errorf("streaming server: load stream_tls_cert and stream_tls_key: %w", err)
		}
		// HTTP/1.1 only: SPDY and WebSocket sessions upgrade an HTTP/1.1 connection.
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	}
	addr := net.JoinHostPort(s.cfg.StreamAddress, s.cfg.StreamPort)
	raw, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("streaming server: listen on %s: %w", addr, err)
	}
	base := &url.URL{Scheme: "http", Host: raw.Addr().String()}
	if tlsConfig != nil {
		base.Scheme = "https"
	} else if ip := raw.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		// A session URL's token is its only credential.
		s.log.Warn("the streaming server is not on loopback and has no TLS: set stream_tls_cert and stream_tls_key", "address", raw.Addr().String())
	}
	cfg := streaming.DefaultConfig
	cfg.Addr = raw.Addr().String()
	cfg.BaseURL = base
	cfg.TLSConfig = tlsConfig
	lib, err := streaming.NewServer(cfg, streamRuntime{s})
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("streaming server: %w", err)
	}

	ctx, stopSessions := context.WithCancel(context.Background())
	st := &StreamServer{lib: lib, URL: base.String(), stopSessions: stopSessions, served: make(chan error, 1),
		lis: &trackingListener{Listener: raw, conns: map[*sessionConn]struct{}{}}}
	st.http = &http.Server{
		Handler:           http.HandlerFunc(st.serveHTTP),
		ReadHeaderTimeout: 30 * time.Second,
		// No HTTP/2: SPDY and WebSocket need HTTP/1.1.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		BaseContext:  func(net.Listener) context.Context { return ctx },
		ConnContext:  sessionContext,
	}
	var lis net.Listener = st.lis
	if tlsConfig != nil {
		lis = tls.NewListener(lis, tlsConfig)
	}
	go func() { st.served <- st.http.Serve(lis) }()
	s.streams.Store(st)
	return st, nil
}

// serveHTTP runs one request (a session, once upgraded) unless the server is
// stopping, and counts it for Stop.
func (st *StreamServer) serveHTTP(w http.ResponseWriter, r *http.Request) {
	st.mu.Lock()
	if st.stopped {
		st.mu.Unlock()
		http.Error(w, "streaming server is stopping", http.StatusServiceUnavailable)
		return
	}
	st.sessions.Add(1)
	st.mu.Unlock()
	defer st.sessions.Done()
	st.lib.ServeHTTP(w, r)
}

// Stop ends every session (their contexts are cancelled, which kills the processes
// they started, and their connections are closed), stops listening and waits, at most
// streamStopTimeout, for the sessions and the Serve goroutine to finish. Only the
// first call does anything.
func (st *StreamServer) Stop() error {
	st.mu.Lock()
	if st.stopped {
		st.mu.Unlock()
		return nil
	}
	st.stopped = true
	st.mu.Unlock()
	st.stopSessions()
	err := st.http.Close() // the listener and connections not upgraded
	sessionsDone := make(chan struct{})
	go func() {
		st.sessions.Wait()
		close(sessionsDone)
	}()
	// Sessions whose processes are gone tell their clients so; then the connections
	// of the rest are cut.
	deadline := time.After(streamStopTimeout)
	select {
	case <-sessionsDone:
	case <-time.After(streamStopGrace):
	}
	st.lis.closeAll() // upgraded (hijacked) connections
	select {
	case <-sessionsDone:
	case <-deadline:
		return fmt.Errorf("streaming server: sessions still running %v after stop", streamStopTimeout)
	}
	<-st.served
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// trackingListener hands out connections that cancel their session's context when
// they end, and remembers them so that Stop can close those an upgrade took from
// the HTTP server.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	closed bool
	conns  map[*sessionConn]struct{}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	sc := &sessionConn{Conn: c, lis: l}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[sc] = struct{}{}
	return sc, nil
}

func (l *trackingListener) forget(c *sessionConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// closeAll closes every connection handed out and refuses new ones.
func (l *trackingListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]*sessionConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// sessionConn is a client connection of the streaming server. Its context (see
// sessionContext) ends when a read fails for any reason but a deadline (the HTTP
// server sets one to take the connection back from its background read when a
// handler upgrades it): the client closed the connection or it broke. After an
// upgrade only the session's protocol reads it, so this is how a session learns that
// its client went away, which the HTTP server no longer reports.
type sessionConn struct {
	net.Conn
	lis  *trackingListener
	once sync.Once

	mu   sync.Mutex
	gone context.CancelFunc // set by sessionContext before the connection is served
}

func (c *sessionConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.end()
	}
	return n, err
}

func (c *sessionConn) Close() error {
	c.once.Do(func() {
		c.end()
		c.lis.forget(c)
	})
	return c.Conn.Close()
}

// end cancels the connection's context.
func (c *sessionConn) end() {
	c.mu.Lock()
	gone := c.gone
	c.mu.Unlock()
	if gone != nil {
		gone()
	}
}

// sessionContext is the HTTP server's ConnContext: the context of every request on
// a connection ends when the connection does.
func sessionContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(*sessionConn)
	if !ok {
		return ctx
	}
	ctx, cancel := context.WithCancel(ctx)
	sc.mu.Lock()
	sc.gone = cancel
	sc.mu.Unlock()
	return ctx
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
	if st := r.s.streams.Load(); st != nil && st.stopping() {
		return fmt.Errorf("%s session of %s ended: the runtime's streaming server is stopping", kind, id)
	}
	r.s.log.Debug("streaming session ended by its client", "kind", kind, "id", id, "err", err)
	return nil
}

// stopping reports whether Stop has been called.
func (st *StreamServer) stopping() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stopped
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
