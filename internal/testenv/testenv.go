// Package testenv holds what the tests that use the machine share: the rule for a
// missing prerequisite (root, a tool, a package), which fails the test under CI
// (CI=true), where every prerequisite must be installed, so that CI never passes by
// skipping, and skips it elsewhere; random names for what tests make on the node;
// waiting for a condition (Eventually, Poll); and reading processes (Alive, ProcState,
// ProcStatus) and the mount table (Mounts, IsMountPoint).
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// InCI reports whether the tests run in CI (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Need stops the test for a missing prerequisite: it fails under CI and skips
// elsewhere. The message says what is missing and how to get it.
func Need(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf(format+" (CI=true: every prerequisite must be installed)", args...)
	}
	t.Skipf(format, args...)
}

// RequireRoot stops the test (see Need) unless it runs as root; who names the tests
// and why, as in "netns tests pin namespaces".
func RequireRoot(t testing.TB, who string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Need(t, "%s: they need root; run them as root", who)
	}
}

// RandomHex returns n random bytes as hex: names of bridges, IDs, UIDs that no other
// test (or test run) uses.
func RandomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// SmallFS mounts a tmpfs of size bytes on a fresh directory below dir (t.TempDir() when
// empty) and returns that directory; t.Cleanup unmounts it. Tests of a full disk put a
// file there and fill the rest (FillFS). It needs root (RequireRoot first).
func SmallFS(t testing.TB, dir string, size int64) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	mnt, err := os.MkdirTemp(dir, "smallfs")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v", size, mnt, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
		os.Remove(mnt)
	})
	return mnt
}

// FillFS writes a file named name in dir until the file system is full (ENOSPC) and
// returns its path: remove it to free the space again.
func FillFS(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		_, err := f.Write(chunk)
		if errors.Is(err, unix.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("fill %s: %v", path, err)
		}
	}
	return path
}

// CopyExecutable copies the executable from to the file to (mode 0755), written back to
// the disk, so that its pages in the page cache are clean.
func CopyExecutable(t testing.TB, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
