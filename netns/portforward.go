package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// dialTimeout bounds a connection attempt to a port in a pod: a port that nothing
// listens on is refused at once, but a firewall rule that drops packets would
// otherwise keep the client waiting.
const dialTimeout = 10 * time.Second

// DialLoopback connects to a TCP port on the loopback interface of the network
// namespace at nsPath (a pinned namespace), or of the daemon's own namespace when
// nsPath is "" (a pod on the host's network). It tries 127.0.0.1, then ::1, as a
// connection to "localhost" would. A port that nothing listens on is an error.
//
// The socket is created on an OS thread that enters the namespace and is destroyed
// afterwards (see onDisposableThread); a socket stays in the namespace it was made
// in, so the connection is used from any goroutine.
func DialLoopback(ctx context.Context, nsPath string, port int32) (net.Conn, error) {
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("%w: port %d", ErrInvalid, port)
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	dial := func() (net.Conn, error) {
		var d net.Dialer
		p := strconv.Itoa(int(port))
		conn, err4 := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
		if err4 == nil {
			return conn, nil
		}
		conn, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p))
		if err6 == nil {
			return conn, nil
		}
		return nil, err4 // the IPv6 loopback is often absent: the IPv4 error says more
	}
	if nsPath == "" {
		return dial()
	}
	ns, err := os.Open(nsPath)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	defer ns.Close()
	var conn net.Conn
	onDisposableThread(func() {
		if err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			err = fmt.Errorf("enter network namespace %s: %w", nsPath, err)
			return
		}
		conn, err = dial()
	})
	return conn, err
}

// Forward copies between stream and conn in both directions until the side that
// conn is connected to ends (it closed its side, and everything before was copied to
// stream), or ctx ends. When stream ends first, conn's write side is shut down and
// the copy to stream goes on. conn is closed on return. The goroutine copying from
// stream ends with stream: only its owner can end a read of it.
func Forward(ctx context.Context, conn net.Conn, stream io.ReadWriter) error {
	defer conn.Close()
	toStream := make(chan error, 1)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		_, err := io.Copy(stream, conn)
		toStream <- err
	})
	go func() {
		_, _ = io.Copy(conn, stream)
		if cw, ok := conn.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	select {
	case err := <-toStream:
		if errors.Is(err, net.ErrClosed) {
			err = nil
		}
		return err
	case <-ctx.Done():
		conn.Close() // ends the copy to stream
		return ctx.Err()
	}
}
