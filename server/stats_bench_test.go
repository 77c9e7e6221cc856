package server

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/crijournal/crijournal/storage"
)

// benchLayerFiles is how many files the benchmarked writable layer holds (issue 20,
// item 4: a container with many files).
const benchLayerFiles = 200_000

// BenchmarkWritableLayerStats measures what one stats call pays for a container's
// writable layer when that layer holds 200,000 files: the server's stats path
// (writableLayer) over a real vfs store and a real directory.
func BenchmarkWritableLayerStats(b *testing.B) {
	requireRootBench(b)
	dir := manyFiles(b, benchLayerFiles)
	s, id := statsBenchServer(b, dir)
	for b.Loop() {
		layer, err := s.writableLayer(id)
		if err != nil {
			b.Fatal(err)
		}
		if layer.GetInodesUsed().GetValue() < benchLayerFiles {
			b.Fatalf("writable layer = %v, want at least %d inodes", layer, benchLayerFiles)
		}
	}
}

// manyFiles makes a directory of n empty files, 1,000 to a subdirectory, as a
// container's writable layer might hold them.
func manyFiles(b *testing.B, n int) string {
	b.Helper()
	dir := filepath.Join(b.TempDir(), "upper")
	for i := range n {
		sub := filepath.Join(dir, fmt.Sprintf("d%03d", i/1000))
		if i%1000 == 0 {
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
		}
		f, err := os.Create(filepath.Join(sub, fmt.Sprintf("f%04d", i%1000)))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	return dir
}

// requireRootBench skips b unless it runs as root: a store needs root.
func requireRootBench(b *testing.B) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root (a containers/storage store)")
	}
}

// statsBenchServer returns a server over a fresh vfs store whose container id (no
// storage container: its writable layer is known) has dir as its writable layer, which
// its collector has measured once (as its background pass does every period).
func statsBenchServer(b *testing.B, dir string) (*Server, string) {
	b.Helper()
	root := b.TempDir()
	log := slog.New(slog.DiscardHandler)
	st, err := storage.Open(context.Background(), storage.Options{
		Root: filepath.Join(root, "root"), RunRoot: filepath.Join(root, "run"), Driver: storage.DriverVFS, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	s := New(Deps{Images: st, Log: log})
	b.Cleanup(func() {
		s.Close()
		st.Close()
	})
	id := "c0ffee"
	s.layers.list = func() []string { return []string{id} }
	s.layers.find = func(string) (string, error) { return dir, nil }
	s.layers.collect(context.Background())
	return s, id
}
