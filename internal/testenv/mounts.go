package testenv

import (
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
)

// MountsBelow lists the mount points of this process's mount namespace at dir or below
// it, deepest first; a mount point with mounts stacked on it is listed once per mount.
// It reads /proc/self/mountinfo (octal escapes undone).
func MountsBelow(dir string) ([]string, error) {
	dir = filepath.Clean(dir)
	below := strings.TrimSuffix(dir, "/") + "/"
	infos, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		return m.Mountpoint != dir && !strings.HasPrefix(m.Mountpoint, below), false
	})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(infos))
	for _, m := range infos {
		out = append(out, m.Mountpoint)
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// Mounts is MountsBelow for a test: it fails the test when the mount table cannot be
// read.
func Mounts(t testing.TB, dir string) []string {
	t.Helper()
	out, err := MountsBelow(dir)
	if err != nil {
		t.Fatalf("read the mount table: %v", err)
	}
	return out
}

// IsMountPoint reports whether path is a mount point of this process's mount namespace;
// it fails the test when the mount table cannot be read.
func IsMountPoint(t testing.TB, path string) bool {
	t.Helper()
	return slices.Contains(Mounts(t, path), path)
}
