// Package storagetest helps tests that need images: an in-process registry on the loopback
// interface, and a small busybox image built from the host's static busybox and pushed to
// it. It is for tests only; it builds nothing that a production binary would use.
//
// The image (see BusyboxImage) holds /bin/busybox (Debian's busybox-static), symlinks to it
// for the commands in BusyboxCommands, /etc/passwd and /etc/group with root and nobody
// (who is a member of group staff, 50, for supplemental group tests), and empty
// /dev, /proc, /sys, /tmp and /root. Its config says Cmd ["/bin/sh"] and Env PATH=/bin. It
// is built deterministically, so every build has the same digest and image ID.
package storagetest

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/crijournal/crijournal/internal/testenv"
)

// BusyboxPath is the static busybox the image is built from (Debian package
// busybox-static).
const BusyboxPath = "/bin/busybox"

// BusyboxCommands are the commands of the image: /bin/<name> is a symlink to busybox.
var BusyboxCommands = []string{
	"sh", "sleep", "echo", "cat", "ls", "true", "false", "env", "id", "hostname", "touch", "mkdir", "rm", "ps", "kill",
}

// RequireRoot skips the test unless it runs as root (containers/storage, mounts); under
// CI=true it fails instead.
func RequireRoot(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "storage tests use containers/storage and overlay mounts")
}

// RequireBusybox skips the test unless BusyboxPath exists; under CI=true it fails instead.
func RequireBusybox(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(BusyboxPath); err != nil {
		testenv.Need(t, "needs %s: apt-get install -y busybox-static (%v)", BusyboxPath, err)
	}
}

// StartRegistry starts an in-memory registry (go-containerregistry's) on 127.0.0.1 for the
// duration of the test and returns its host:port. It speaks plain HTTP.
func StartRegistry(t testing.TB) (host string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// PushBusybox pushes the busybox image to host (from StartRegistry) as repo:tag
// ("library/busybox", "latest") and returns the digest of its manifest ("sha256:...").
// It skips the test when busybox is missing (fails under CI=true).
func PushBusybox(t testing.TB, host, repo, tag string) (digest string) {
	t.Helper()
	return push(t, BusyboxImage(t), host, repo, tag)
}

// PushBusyboxStopSignal pushes, as repo:tag, the busybox image with StopSignal set in its
// config (the signal StopContainer sends when the request names none), and returns the
// digest of its manifest.
func PushBusyboxStopSignal(t testing.TB, host, repo, tag, signal string) (digest string) {
	t.Helper()
	img := BusyboxImage(t)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatalf("busybox image config: %v", err)
	}
	cf = cf.DeepCopy()
	cf.Config.StopSignal = signal
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatalf("busybox image with stop signal %s: %v", signal, err)
	}
	return push(t, img, host, repo, tag)
}

// PushBusyboxWith pushes, as repo:tag, the busybox image with one more layer that holds
// entries (tar headers of entries without content: named pipes, device nodes, directories,
// links) over the image's files, and returns the digest of its manifest: an image whose
// files are not what a runtime expects, as in an /etc/passwd that is a named pipe.
func PushBusyboxWith(t testing.TB, host, repo, tag string, entries ...tar.Header) (digest string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h.ModTime, h.Uname, h.Gname, h.Format = time.Unix(0, 0), "root", "root", tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("tar %s: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatalf("layer of %s:%s: %v", repo, tag, err)
	}
	img, err := mutate.AppendLayers(BusyboxImage(t), layer)
	if err != nil {
		t.Fatalf("image %s:%s: %v", repo, tag, err)
	}
	return push(t, img, host, repo, tag)
}

func push(t testing.TB, img v1.Image, host, repo, tag string) string {
	t.Helper()
	ref, err := name.NewTag(host+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push to %s: %v", ref, err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	return d.String()
}

var busybox struct {
	once sync.Once
	img  v1.Image
	err  error
}

// BusyboxImage returns the busybox image (see the package comment), building it once per
// process. It skips the test when busybox is missing (fails under CI=true).
func BusyboxImage(t testing.TB) v1.Image {
	t.Helper()
	RequireBusybox(t)
	busybox.once.Do(func() { busybox.img, busybox.err = buildBusybox() })
	if busybox.err != nil {
		t.Fatalf("build busybox image: %v", busybox.err)
	}
	return busybox.img
}

func buildBusybox() (v1.Image, error) {
	bin, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return nil, err
	}
	layerTar, err := busyboxTar(bin)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture = runtime.GOARCH
	cf.OS = "linux"
	cf.Config.Cmd = []string{"/bin/sh"}
	cf.Config.Env = []string{"PATH=/bin"}
	return mutate.ConfigFile(img, cf)
}

// busyboxTar returns the layer's tar stream, with fixed times and owners so that it is the
// same on every build.
func busyboxTar(bin []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Uname, h.Gname, h.Format = epoch, "root", "root", tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("tar %s: %w", h.Name, err)
		}
		if _, err := tw.Write(body); err != nil {
			return fmt.Errorf("tar %s: %w", h.Name, err)
		}
		return nil
	}
	dir := func(name string, mode int64) error {
		return add(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}, nil)
	}
	file := func(name string, mode int64, body []byte) error {
		return add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body)
	}
	for _, d := range []string{"bin", "dev", "etc", "proc", "root", "sys"} {
		if err := dir(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := dir("tmp", 0o1777); err != nil {
		return nil, err
	}
	if err := file("bin/busybox", 0o755, bin); err != nil {
		return nil, err
	}
	for _, cmd := range BusyboxCommands {
		if err := add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + cmd, Linkname: "busybox", Mode: 0o777}, nil); err != nil {
			return nil, err
		}
	}
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\nstaff:x:50:nobody\nnogroup:x:65534:\n")); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
