package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// BenchmarkPull pulls the busybox image with a 16 MiB incompressible layer on top from a
// loopback registry, and removes it, per iteration: the normal path with the progress
// watch (image_pull_progress_timeout's default, 5m) and without it (0).
func BenchmarkPull(b *testing.B) {
	storagetest.RequireRoot(b)
	storagetest.RequireBusybox(b)
	host := storagetest.StartRegistry(b)
	ref := pushBig(b, host)
	for _, timeout := range []time.Duration{0, 5 * time.Minute} {
		b.Run(fmt.Sprintf("progress_timeout=%v", timeout), func(b *testing.B) {
			dir := b.TempDir()
			s, err := Open(context.Background(), Options{Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run"),
				Driver: DriverVFS, PullProgressTimeout: timeout, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			for b.Loop() {
				if _, err := s.PullImage(ctx, ref, nil); err != nil {
					b.Fatal(err)
				}
				if err := s.RemoveImage(ctx, ref); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// pushBig pushes the busybox image with a 16 MiB incompressible layer on top to the
// registry at host, as bench/big:1.0, and returns its reference.
func pushBig(b *testing.B, host string) string {
	data := make([]byte, 16<<20)
	rand.Read(data)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarOf(b, "data", data))), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		b.Fatal(err)
	}
	img, err := mutate.AppendLayers(storagetest.BusyboxImage(b), layer)
	if err != nil {
		b.Fatal(err)
	}
	ref, _ := name.NewTag(host+"/bench/big:1.0", name.Insecure)
	if err := remote.Write(ref, img); err != nil {
		b.Fatal(err)
	}
	return ref.String()
}

// BenchmarkFsInfo measures ImageFsInfo's walk of a graph root holding the busybox image:
// "whole" walks all of it, as FsInfo did before it kept the figures of sealed layers;
// "kept" is FsInfo once it has them; then with 100 containers made from the image and
// mounted, walking their writable layers, and with figures of them given (measured), as
// ImageFsInfo gives the stats collector's.
func BenchmarkFsInfo(b *testing.B) {
	storagetest.RequireRoot(b)
	storagetest.RequireBusybox(b)
	host := storagetest.StartRegistry(b)
	storagetest.PushBusybox(b, host, "bench/busybox", "1.0")
	dir := b.TempDir()
	s, err := Open(context.Background(), Options{Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run"),
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if _, err := s.PullImage(ctx, host+"/bench/busybox:1.0", nil); err != nil {
		b.Fatal(err)
	}
	b.Run("whole", func(b *testing.B) {
		for b.Loop() {
			wholeWalk(b, s)
		}
	})
	b.Run("kept", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.FsInfo(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An idle node's: 100 containers made and mounted from the image.
	img, err := s.ImageStatus(ctx, host+"/bench/busybox:1.0")
	if err != nil {
		b.Fatal(err)
	}
	var ids []string
	defer func() { // before the store closes
		for _, id := range ids {
			_ = s.Unmount(ctx, id)
			_ = s.DeleteContainer(ctx, id)
		}
	}()
	for i := range 100 {
		id := fmt.Sprintf("%064x", i+1)
		if _, err := s.CreateContainer(ctx, id, "c"+id[:12], img.ID, nil); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, id)
		if _, err := s.Mount(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("whole,containers=100", func(b *testing.B) {
		for b.Loop() {
			wholeWalk(b, s)
		}
	})
	b.Run("kept,containers=100", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.FsInfo(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	// As ImageFsInfo calls it: with the stats collector's figures of the writable layers.
	measured := map[string]FsUsage{}
	for _, id := range ids {
		dir, err := s.WritableLayerDir(id)
		if err != nil {
			b.Fatal(err)
		}
		if measured[dir], err = DirUsage(dir); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("kept,containers=100,measured", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.FsInfo(ctx, measured); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// tarOf returns a tar stream of one file.
func tarOf(b *testing.B, file string, data []byte) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: file, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(0, 0)}); err != nil {
		b.Fatal(err)
	}
	if _, err := tw.Write(data); err != nil {
		b.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}
