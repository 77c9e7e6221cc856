package server

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestListen(t *testing.T) {
	dir, err := os.MkdirTemp("", "cjl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "sub", "cri.sock")

	lis, err := Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode = %v, %v; want 0660", info.Mode().Perm(), err)
	}
	// A live daemon on the socket is refused.
	if _, err := Listen(path); !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("second Listen = %v, want ErrSocketInUse", err)
	}
	// A stale socket file (its daemon is gone) is replaced.
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	lis.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("stale socket file not left for the test: %v", err)
	}
	lis2, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	lis2.Close()
	// A regular file in the way is not deleted.
	os.WriteFile(path, []byte("precious"), 0o600)
	if _, err := Listen(path); err == nil {
		t.Fatal("Listen replaced a regular file")
	}
	if b, _ := os.ReadFile(path); string(b) != "precious" {
		t.Fatal("the regular file was changed")
	}
}
