// Package profiling serves Go's runtime profiles (net/http/pprof) on a loopback address,
// for finding where the daemon's time and memory go. It is off unless pprof_address is
// set. The handlers are mounted on a mux of their own: net/http/pprof also registers
// itself on http.DefaultServeMux, which nothing in the daemon serves.
package profiling

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// ErrNotLoopback is returned by Serve when the address is not a loopback one.
var ErrNotLoopback = errors.New("not a loopback address")

// Server is a running profiling endpoint.
type Server struct {
	srv    *http.Server
	addr   string
	served chan struct{}
}

// Serve listens on addr (host:port; the host must be loopback: 127.0.0.1, ::1 or
// localhost) and serves the profiles under /debug/pprof/ until ctx ends or Close is
// called. Port 0 picks a free port; Addr says which.
func Serve(ctx context.Context, addr string) (*Server, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("pprof_address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("pprof_address %q: %w", addr, ErrNotLoopback)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof: %w", err)
	}
	// localhost may resolve to a non-loopback address on a strange host: check what was bound.
	if tcp, ok := lis.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		lis.Close()
		return nil, fmt.Errorf("pprof_address %q: bound %s: %w", addr, lis.Addr(), ErrNotLoopback)
	}
	s := &Server{
		srv:    &http.Server{Handler: Handler(), ReadHeaderTimeout: 5 * time.Second},
		addr:   lis.Addr().String(),
		served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(lis)
	}()
	stop := context.AfterFunc(ctx, func() { s.srv.Close() })
	go func() {
		<-s.served
		stop()
	}()
	return s, nil
}

// Handler is the profiles' mux: the index at /debug/pprof/, the named profiles under it
// (heap, goroutine, allocs, block, mutex, threadcreate), and cmdline, profile (CPU),
// symbol and trace.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Addr is the address served, with the port chosen when 0 was asked for.
func (s *Server) Addr() string { return s.addr }

// Close stops the server, cutting off requests in flight (a CPU profile being taken),
// and returns once it has stopped serving.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.served
	return err
}
