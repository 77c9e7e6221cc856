package storage

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDirUsage(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "a"), make([]byte, 10000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "sub", "a"), filepath.Join(dir, "b")); err != nil {
		t.Fatal(err)
	}
	u, err := DirUsage(dir)
	if err != nil {
		t.Fatal(err)
	}
	// dir, sub and a (b is a's inode again).
	if u.Mountpoint != dir || u.InodesUsed != 3 || u.UsedBytes < 10000 {
		t.Errorf("DirUsage = %+v, want 3 inodes and at least the 10000 bytes written", u)
	}
	gone := filepath.Join(dir, "gone")
	if u, err := DirUsage(gone); err != nil || u.InodesUsed != 0 || u.UsedBytes != 0 {
		t.Errorf("DirUsage of a missing directory = %+v, %v; want zero", u, err)
	}
}
