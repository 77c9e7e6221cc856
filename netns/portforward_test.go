package netns

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// listenIn listens on 127.0.0.1:0 in the network namespace at nsPath ("" for this
// process's) and answers every connection with greeting followed by what it reads,
// until the test ends. It returns the port.
func listenIn(t *testing.T, nsPath, greeting string) int32 {
	t.Helper()
	var l net.Listener
	var err error
	listen := func() { l, err = net.Listen("tcp4", "127.0.0.1:0") }
	if nsPath == "" {
		listen()
	} else {
		onDisposableThread(func() {
			var fd int
			if fd, err = unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
				return
			}
			defer unix.Close(fd)
			if err = unix.Setns(fd, unix.CLONE_NEWNET); err == nil {
				listen()
			}
		})
	}
	if err != nil {
		t.Fatalf("listen in %q: %v", nsPath, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.WriteString(c, greeting)
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return int32(l.Addr().(*net.TCPAddr).Port)
}

func TestDialLoopbackAndForward(t *testing.T) {
	requireRoot(t)
	_, nsPath := pinTestNet(t)
	inPod := listenIn(t, nsPath, "pod:")
	onHost := listenIn(t, "", "host:")
	ctx := context.Background()

	for _, tc := range []struct {
		name     string
		nsPath   string
		port     int32
		greeting string
	}{
		{"pod namespace", nsPath, inPod, "pod:"},
		{"host namespace", "", onHost, "host:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := DialLoopback(ctx, tc.nsPath, tc.port)
			if err != nil {
				t.Fatalf("DialLoopback: %v", err)
			}
			client, stream := net.Pipe()
			done := make(chan error, 1)
			go func() { done <- Forward(ctx, conn, stream) }()
			if _, err := io.WriteString(client, "ping"); err != nil {
				t.Fatal(err)
			}
			want := tc.greeting + "ping"
			got := make([]byte, len(want))
			if _, err := io.ReadFull(client, got); err != nil || string(got) != want {
				t.Fatalf("read through Forward: %q, %v; want %q", got, err, want)
			}
			// The client goes away: Forward ends with the server's side of the copy.
			client.Close()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Forward did not return after its stream closed")
			}
		})
	}

	t.Run("the pod's port is not the host's", func(t *testing.T) {
		// The listener in the pod is not reachable in the host's namespace, and the
		// other way round: unless the ports happen to match, both are refused.
		if inPod == onHost {
			t.Skip("the two listeners got the same port number")
		}
		if _, err := DialLoopback(ctx, "", inPod); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the pod's port on the host: %v, want ECONNREFUSED", err)
		}
		if _, err := DialLoopback(ctx, nsPath, onHost); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the host's port in the pod: %v, want ECONNREFUSED", err)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		conn, err := DialLoopback(ctx, nsPath, inPod)
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		client, stream := net.Pipe()
		go func() { _, _ = io.Copy(io.Discard, client) }() // a client that reads
		done := make(chan error, 1)
		go func() { done <- Forward(cctx, conn, stream) }()
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Forward after cancel: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Forward did not return after its context ended")
		}
		stream.Close()
		client.Close()
	})

	for _, port := range []int32{0, -1, 70000} {
		if _, err := DialLoopback(ctx, nsPath, port); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "port") {
			t.Errorf("DialLoopback to port %d: %v, want ErrInvalid", port, err)
		}
	}
	if _, err := DialLoopback(ctx, t.TempDir()+"/missing", inPod); err == nil {
		t.Error("DialLoopback into a missing namespace succeeded")
	}
}
