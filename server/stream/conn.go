package stream

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
)

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
