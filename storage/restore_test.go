package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// pushImage pushes img to host as repo:1.0 and returns its name.
func pushImage(t testing.TB, host, repo string, img v1.Image) string {
	t.Helper()
	ref := host + "/" + repo + ":1.0"
	tag, err := name.NewTag(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithContext(context.Background())); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

// TestImageAnnotationsAndFiles: the manifest annotations and the one layer's files of
// pulled images, as a restore reads a checkpoint image.
func TestImageAnnotationsAndFiles(t *testing.T) {
	t.Parallel()
	s := openTestStore(t, "vfs")
	ctx := t.Context()
	busybox := storagetest.BusyboxImage(t)
	// Another configuration than busybox's: the store keys images by their
	// configuration's digest and keeps the manifest pulled last for one (two images of
	// one configuration are one image to it, and a checkpoint image must differ).
	cf, err := busybox.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Config.Labels = map[string]string{"checkpoint": "yes"}
	relabelled, err := mutate.ConfigFile(busybox, cf)
	if err != nil {
		t.Fatal(err)
	}
	marked := mutate.Annotations(relabelled, map[string]string{"io.kubernetes.cri-o.annotations.checkpoint.name": "counter"}).(v1.Image)
	var second bytes.Buffer
	tw := tar.NewWriter(&second)
	if err := tw.WriteHeader(&tar.Header{Name: "second", Typeflag: tar.TypeReg, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	layered, err := mutate.AppendLayers(busybox, static.NewLayer(second.Bytes(), types.OCIUncompressedLayer))
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]string{}
	for repo, img := range map[string]v1.Image{"plain": busybox, "marked": marked, "layered": layered} {
		ref := pushImage(t, s.host, "restore/"+repo, img)
		pulled, err := s.PullImage(ctx, ref, nil)
		if err != nil {
			t.Fatalf("pull %s: %v", ref, err)
		}
		images[repo] = pulled.ID
	}

	for repo, want := range map[string]string{"plain": "", "marked": "counter", "layered": ""} {
		ann, err := s.ImageAnnotations(ctx, images[repo])
		if err != nil || ann["io.kubernetes.cri-o.annotations.checkpoint.name"] != want {
			t.Errorf("ImageAnnotations of %s: %v, %v; want the checkpoint annotation %q", repo, ann, err, want)
		}
	}

	rc, err := s.ImageFiles(ctx, images["marked"])
	if err != nil {
		t.Fatalf("ImageFiles: %v", err)
	}
	var names []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("ImageFiles is not an uncompressed tar: %v", err)
		}
		names = append(names, filepath.Clean(h.Name))
	}
	rc.Close()
	if !slices.Contains(names, "bin/busybox") {
		t.Errorf("ImageFiles lacks the layer's bin/busybox: %v", names)
	}
	if _, err := s.ImageFiles(ctx, images["layered"]); !errors.Is(err, ErrLayered) {
		t.Errorf("ImageFiles of an image of two layers: %v, want ErrLayered", err)
	}
	if _, err := s.ImageFiles(ctx, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("ImageFiles of an unknown image: %v, want ErrImageNotFound", err)
	}
}

// BenchmarkImageAnnotations is what every CreateContainer of an ordinary image pays
// for the question whether its image is a checkpoint's (server.restoreOf).
func BenchmarkImageAnnotations(b *testing.B) {
	storagetest.RequireRoot(b)
	storagetest.RequireBusybox(b)
	host := storagetest.StartRegistry(b)
	storagetest.PushBusybox(b, host, "bench/busybox", "1.0")
	dir := b.TempDir()
	s, err := Open(context.Background(), Options{Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run"),
		Driver: "vfs", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	img, err := s.PullImage(ctx, host+"/bench/busybox:1.0", nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.ImageAnnotations(ctx, img.ID); err != nil {
			b.Fatal(err)
		}
	}
}
