package stream

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// TestSessionContext checks how a session learns that its client went away: the
// context of a request on an upgraded (hijacked) connection ends when the client
// closes it, or when the listener's connections are closed (Stop), and not when the
// HTTP server takes the connection back from its background read at the upgrade.
func TestSessionContext(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &trackingListener{Listener: raw, conns: map[*sessionConn]struct{}{}}
	sessions := make(chan context.Context, 2)
	srv := &http.Server{
		ConnContext: sessionContext,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\n\r\n")
			sessions <- r.Context()
			// The session's protocol reads the connection, as spdystream does, and the
			// handler returns only when the session's context ends (the HTTP server
			// ends it anyway once the handler has returned).
			go func() { _, _ = io.Copy(io.Discard, conn) }()
			select {
			case <-r.Context().Done():
			case <-time.After(20 * time.Second):
			}
			conn.Close()
		}),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Close()
		<-served
	}()

	open := func() (net.Conn, context.Context) {
		t.Helper()
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, "GET /exec/x HTTP/1.1\r\nHost: test\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		select {
		case ctx := <-sessions:
			return c, ctx
		case <-time.After(10 * time.Second):
			t.Fatal("the request did not reach the handler")
		}
		return nil, nil
	}
	ended := func(ctx context.Context) bool {
		select {
		case <-ctx.Done():
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}

	client, ctx := open()
	time.Sleep(100 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatal("the session's context ended at the upgrade, with its client still there")
	}
	client.Close()
	if !ended(ctx) {
		t.Fatal("the session's context did not end when its client closed the connection")
	}

	client, ctx = open()
	defer client.Close()
	lis.closeAll()
	if !ended(ctx) {
		t.Fatal("the session's context did not end when the server closed its connections")
	}
	lis.mu.Lock()
	left := len(lis.conns)
	lis.mu.Unlock()
	if left != 0 {
		t.Errorf("%d connections still tracked after they were closed", left)
	}
}
