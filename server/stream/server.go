// Package stream is crijournal's streaming server: the HTTP server on which exec, attach
// and port-forward sessions run, as the kubelet and crictl open them. It wraps
// k8s.io/cri-streaming's server (the request cache of single-use URLs and the SPDY and
// WebSocket protocols) with what the library leaves to its user: the listener, TLS,
// the tracking of the connections that sessions take over from the HTTP server, and a
// stop that ends every session.
//
// Each session's context ends when its client's connection does (a read on it fails)
// or when the server stops (Stop), and with it every process and goroutine the session
// started. What a session runs is the caller's (a streaming.Runtime): in crijournal the
// CRI server's adapter (server/streaming.go), which runs the sessions with oci and netns.
package stream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-streaming/pkg/streaming"
)

// Config is where and how a Server listens.
type Config struct {
	// Address is host:port; port 0 is any free port.
	Address string
	// TLSCert and TLSKey are the files of the server's TLS certificate and key; both
	// empty: plain HTTP.
	TLSCert, TLSKey string
	// Log gets a warning when the server is neither on loopback nor behind TLS (nil:
	// slog.Default()).
	Log *slog.Logger
}

// Server is a running streaming server. Start makes it; its owner stops it with Stop.
type Server struct {
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

// stopGrace is how long Stop lets sessions, whose contexts it has cancelled, tell their
// clients that they ended, before it closes their connections; stopTimeout bounds its
// whole wait.
const (
	stopGrace   = 2 * time.Second
	stopTimeout = 10 * time.Second
)

// Start listens on cfg.Address, with TLS when cfg.TLSCert and cfg.TLSKey are set, and
// serves the sessions of rt from a goroutine until Stop.
func Start(cfg Config, rt streaming.Runtime) (*Server, error) {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	var tlsConfig *tls.Config
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("streaming server: load stream_tls_cert and stream_tls_key: %w", err)
		}
		// HTTP/1.1 only: SPDY and WebSocket sessions upgrade an HTTP/1.1 connection.
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	}
	raw, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("streaming server: listen on %s: %w", cfg.Address, err)
	}
	base := &url.URL{Scheme: "http", Host: raw.Addr().String()}
	if tlsConfig != nil {
		base.Scheme = "https"
	} else if ip := raw.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
		// A session URL's token is its only credential.
		log.Warn("the streaming server is not on loopback and has no TLS: set stream_tls_cert and stream_tls_key", "address", raw.Addr().String())
	}
	libCfg := streaming.DefaultConfig
	libCfg.Addr = raw.Addr().String()
	libCfg.BaseURL = base
	libCfg.TLSConfig = tlsConfig
	lib, err := streaming.NewServer(libCfg, rt)
	if err != nil {
		raw.Close()
		return nil, fmt.Errorf("streaming server: %w", err)
	}

	ctx, stopSessions := context.WithCancel(context.Background())
	st := &Server{lib: lib, URL: base.String(), stopSessions: stopSessions, served: make(chan error, 1),
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
	return st, nil
}

// GetExec returns the URL of an exec session: its request is kept, under a single-use
// token, until the client connects.
func (st *Server) GetExec(req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	return st.lib.GetExec(req)
}

// GetAttach returns the URL of an attach session.
func (st *Server) GetAttach(req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	return st.lib.GetAttach(req)
}

// GetPortForward returns the URL of a port-forward session.
func (st *Server) GetPortForward(req *runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error) {
	return st.lib.GetPortForward(req)
}

// serveHTTP runs one request (a session, once upgraded) unless the server is
// stopping, and counts it for Stop.
func (st *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
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
// stopTimeout, for the sessions and the Serve goroutine to finish. Only the first call
// does anything.
func (st *Server) Stop() error {
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
	deadline := time.After(stopTimeout)
	select {
	case <-sessionsDone:
	case <-time.After(stopGrace):
	}
	st.lis.closeAll() // upgraded (hijacked) connections
	select {
	case <-sessionsDone:
	case <-deadline:
		return fmt.Errorf("streaming server: sessions still running %v after stop", stopTimeout)
	}
	<-st.served
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Stopping reports whether Stop has been called.
func (st *Server) Stopping() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.stopped
}
