package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.podman.io/image/v5/types"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// testImage is the name the tests pull: registry.k8s.io is mirrored to the loopback
// registry, where the busybox image is pushed as test/busybox:1.0.
const testImage = "registry.k8s.io/test/busybox:1.0"

// pullTestImage pushes busybox as test/busybox:1.0 and pulls testImage through the mirror.
// It returns the image and the manifest digest.
func pullTestImage(t *testing.T, s *testStore) (Image, string) {
	t.Helper()
	digest := storagetest.PushBusybox(t, s.host, "test/busybox", "1.0")
	start := time.Now()
	img, err := s.PullImage(context.Background(), testImage, nil)
	if err != nil {
		t.Fatalf("PullImage(%s): %v", testImage, err)
	}
	t.Logf("pull of %s (driver %s): %v", testImage, s.Driver(), time.Since(start))
	return img, digest
}

func TestPullAndStatus(t *testing.T) {
	s := openTestStore(t, "")
	t.Logf("driver in use: %s", s.Driver())
	if overlaySupported() && s.Driver() != DriverOverlay {
		t.Errorf("Driver() = %q on a kernel with overlay, want overlay", s.Driver())
	}
	pulled, digest := pullTestImage(t, s)
	ctx := context.Background()

	if len(pulled.ID) != 64 || !isHex(pulled.ID) {
		t.Errorf("pulled image ID %q is not 64 hex", pulled.ID)
	}
	wantTags := []string{testImage}
	wantDigests := []string{"registry.k8s.io/test/busybox@" + digest}
	if diff := cmp.Diff(wantTags, pulled.RepoTags); diff != "" {
		t.Errorf("RepoTags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantDigests, pulled.RepoDigests); diff != "" {
		t.Errorf("RepoDigests (-want +got):\n%s", diff)
	}
	if pulled.Size == 0 {
		t.Error("Size = 0")
	}
	wantConfig := ImageConfig{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}, Architecture: runtime.GOARCH, OS: "linux"}
	if diff := cmp.Diff(wantConfig, pulled.Config); diff != "" {
		t.Errorf("Config (-want +got):\n%s", diff)
	}

	list, err := s.ListImages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Image{pulled}, list); diff != "" {
		t.Errorf("ListImages (-want +got):\n%s", diff)
	}

	for _, tc := range []struct{ name, ref string }{
		{"ID", pulled.ID},
		{"sha256 ID", "sha256:" + pulled.ID},
		{"ID prefix", pulled.ID[:12]},
		{"shortest ID prefix", pulled.ID[:3]},
		{"tag", testImage},
		{"digest", "registry.k8s.io/test/busybox@" + digest},
		{"tag and digest", "registry.k8s.io/test/busybox:other@" + digest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ImageStatus(ctx, tc.ref)
			if err != nil {
				t.Fatalf("ImageStatus(%s): %v", tc.ref, err)
			}
			if diff := cmp.Diff(pulled, got); diff != "" {
				t.Errorf("ImageStatus(%s) (-want +got):\n%s", tc.ref, diff)
			}
		})
	}

	for _, tc := range []struct {
		name, ref string
		want      error
	}{
		{"unknown tag", "registry.k8s.io/test/busybox:2.0", ErrImageNotFound},
		{"unknown name", "registry.k8s.io/nope:1", ErrImageNotFound},
		{"unknown short name", "nope", ErrImageNotFound},
		{"unknown ID", strings.Repeat("0", 64), ErrImageNotFound},
		{"unknown sha256 ID", "sha256:" + strings.Repeat("0", 64), ErrImageNotFound},
		{"unknown digest", "registry.k8s.io/test/busybox@sha256:" + strings.Repeat("0", 64), ErrImageNotFound},
		{"upper case", "Registry.k8s.io/Test/BusyBox:1.0", ErrInvalidReference},
		{"empty", "", ErrInvalidReference},
		{"bad sha256", "sha256:xyz", ErrInvalidReference},
		{"space", "busy box", ErrInvalidReference},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.ImageStatus(ctx, tc.ref)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ImageStatus(%q) = %v, want %v", tc.ref, err, tc.want)
			}
		})
	}
}

func TestPullErrors(t *testing.T) {
	s := openTestStore(t, "")
	storagetest.PushBusybox(t, s.host, "test/busybox", "1.0")
	ctx := context.Background()

	// A tag the registry does not have.
	_, err := s.PullImage(ctx, "registry.k8s.io/test/busybox:9.9", nil)
	if !errors.Is(err, ErrImageNotFound) {
		t.Errorf("pull of an unknown tag = %v, want ErrImageNotFound", err)
	}
	if err != nil && !strings.Contains(err.Error(), "registry.k8s.io/test/busybox:9.9") {
		t.Errorf("error %q does not name the reference", err)
	}
	t.Logf("unknown tag: %v", err)

	for _, ref := range []string{"", "Busybox", "busybox:", "busybox@sha256:123", "http://registry.k8s.io/pause:3.10", "a b"} {
		if _, err := s.PullImage(ctx, ref, nil); !errors.Is(err, ErrInvalidReference) {
			t.Errorf("PullImage(%q) = %v, want ErrInvalidReference", ref, err)
		}
	}

	// Bad credentials are refused before any request.
	if _, err := s.PullImage(ctx, testImage, &Auth{Auth: "not base64!"}); err == nil {
		t.Error("pull with an invalid Auth succeeded")
	}

	if imgs, err := s.ListImages(ctx); err != nil || len(imgs) != 0 {
		t.Errorf("ListImages after failed pulls = %v, %v; want none", imgs, err)
	}
}

func TestPullShortName(t *testing.T) {
	s := openTestStore(t, "")
	digest := storagetest.PushBusybox(t, s.host, "library/busybox", "latest")
	ctx := context.Background()
	img, err := s.PullImage(ctx, "busybox", nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"docker.io/library/busybox:latest"}, img.RepoTags); diff != "" {
		t.Errorf("RepoTags (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"docker.io/library/busybox@" + digest}, img.RepoDigests); diff != "" {
		t.Errorf("RepoDigests (-want +got):\n%s", diff)
	}
	for _, ref := range []string{"busybox", "busybox:latest", "library/busybox", "docker.io/busybox", "docker.io/library/busybox:latest"} {
		got, err := s.ImageStatus(ctx, ref)
		if err != nil || got.ID != img.ID {
			t.Errorf("ImageStatus(%q) = %v, %v; want image %s", ref, got.ID, err, img.ID)
		}
	}
	// Pulling by digest adds nothing new but succeeds.
	byDigest, err := s.PullImage(ctx, "busybox@"+digest, nil)
	if err != nil || byDigest.ID != img.ID {
		t.Errorf("pull by digest = %v, %v; want image %s", byDigest.ID, err, img.ID)
	}
}

func TestRemoveImage(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	digest := storagetest.PushBusybox(t, s.host, "test/busybox", "1.0")
	storagetest.PushBusybox(t, s.host, "test/busybox", "1.1")
	pull := func(ref string) Image {
		t.Helper()
		img, err := s.PullImage(ctx, ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	a, b := pull("registry.k8s.io/test/busybox:1.0"), pull("registry.k8s.io/test/busybox:1.1")
	if a.ID != b.ID {
		t.Fatalf("the same image pulled under two tags has two IDs: %s, %s", a.ID, b.ID)
	}

	// By one of its tags: the image goes with all its tags (cri-api 0.36's RemoveImage:
	// "removing the image by a single tag will remove all of its tags").
	if err := s.RemoveImage(ctx, "registry.k8s.io/test/busybox:1.0"); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{a.ID, "registry.k8s.io/test/busybox:1.0", "registry.k8s.io/test/busybox:1.1"} {
		if _, err := s.ImageStatus(ctx, ref); !errors.Is(err, ErrImageNotFound) {
			t.Errorf("ImageStatus(%s) after removal by a tag = %v, want ErrImageNotFound", ref, err)
		}
	}

	// By digest: the image goes, with all its names.
	pull("registry.k8s.io/test/busybox:1.0")
	if err := s.RemoveImage(ctx, "registry.k8s.io/test/busybox@"+digest); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImageStatus(ctx, a.ID); !errors.Is(err, ErrImageNotFound) {
		t.Errorf("ImageStatus after removal by digest = %v, want ErrImageNotFound", err)
	}

	// By the last tag, then by ID.
	pull("registry.k8s.io/test/busybox:1.0")
	if err := s.RemoveImage(ctx, "registry.k8s.io/test/busybox:1.0"); err != nil {
		t.Fatal(err)
	}
	if imgs, _ := s.ListImages(ctx); len(imgs) != 0 {
		t.Errorf("images left after removing the last tag: %+v", imgs)
	}
	c := pull("registry.k8s.io/test/busybox:1.0")
	if err := s.RemoveImage(ctx, c.ID[:8]); err != nil {
		t.Fatal(err)
	}
	if imgs, _ := s.ListImages(ctx); len(imgs) != 0 {
		t.Errorf("images left after removing by ID prefix: %+v", imgs)
	}

	for _, ref := range []string{a.ID, "registry.k8s.io/test/busybox:1.0", "nope"} {
		if err := s.RemoveImage(ctx, ref); !errors.Is(err, ErrImageNotFound) {
			t.Errorf("RemoveImage(%s) of a removed image = %v, want ErrImageNotFound", ref, err)
		}
	}
}

func TestFsInfo(t *testing.T) {
	s := openTestStore(t, "")
	ctx := context.Background()
	before, err := s.FsInfo(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	pullTestImage(t, s)
	after, err := s.FsInfo(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FsInfo before pull %+v, after %+v", before, after)
	if after.Mountpoint != filepath.Join(s.dir, "root") {
		t.Errorf("Mountpoint = %q, want the graph root", after.Mountpoint)
	}
	// busybox-static is about 2 MB.
	if after.UsedBytes < before.UsedBytes+1<<20 || after.InodesUsed <= before.InodesUsed {
		t.Errorf("FsInfo after the pull %+v is not above before %+v by the image", after, before)
	}
}

// TestFsInfoKeepsStableDirs checks that FsInfo measures once the directories whose files
// do not change (a complete image layer's, a container's, an overlay container layer's
// but for its upper directory): a file planted in one afterwards (which no real change
// makes) is not counted; one written where a container writes (its upper directory with
// overlay, its layer with vfs), or elsewhere under the graph root, is; the figures add up
// to what a whole walk finds; and a removed container's and image's directories are
// forgotten.
func TestFsInfoKeepsStableDirs(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, driver := range []string{"", "vfs"} {
		t.Run("driver="+driver, func(t *testing.T) {
			s := openTestStore(t, driver)
			ctx := context.Background()
			img, _ := pullTestImage(t, s)
			if _, err := s.CreateContainer(ctx, id, "fsinfo", img.ID, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Mount(ctx, id); err != nil {
				t.Fatal(err)
			}
			first, err := s.FsInfo(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			stable, err := s.stableDirs()
			if err != nil {
				t.Fatal(err)
			}
			const wantStable = 3 // the image's layer, the container's directory and its layer
			// containers/storage makes a container's directory only when asked for it.
			existing := 0
			for dir, writable := range stable {
				if _, err := os.Stat(dir); err == nil && writable != dir {
					existing++ // a vfs container layer is all writable: none kept
				}
			}
			if len(stable) != wantStable || len(s.fsKept) != existing {
				t.Fatalf("driver %s: stable directories %v (want %d), %d kept figures, want %d", s.Driver(), stable, wantStable, len(s.fsKept), existing)
			}
			whole := wholeWalk(t, s.Store)
			if whole.bytes != first.UsedBytes || whole.inodes != first.InodesUsed {
				t.Errorf("FsInfo %+v, a whole walk %+v", first, whole)
			}

			writable, err := s.WritableLayerDir(id)
			if err != nil {
				t.Fatal(err)
			}
			mib := bytes.Repeat([]byte{1}, 1<<20)
			var planted []string
			for dir := range s.fsKept {
				planted = append(planted, filepath.Join(dir, "planted"))
			}
			planted = append(planted, filepath.Join(first.Mountpoint, "planted"), filepath.Join(writable, "planted-too"))
			for _, f := range planted {
				if err := os.WriteFile(f, mib, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			second, err := s.FsInfo(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Counted: the file beside them, and the one the container wrote (in its
			// upper directory, or with vfs in its layer directory, which is not kept).
			const counted = 2
			if second.UsedBytes < first.UsedBytes+counted<<20 || second.UsedBytes >= first.UsedBytes+(counted+1)<<20 ||
				second.InodesUsed != first.InodesUsed+counted {
				t.Errorf("after 1 MiB planted in each of %d kept directories, beside them and in the container's writable layer: FsInfo %+v, first %+v: want %d MiB and files counted", len(planted)-2, second, first, counted)
			}

			// With the caller's figure of the writable layer, that figure is counted
			// instead of a walk of it.
			var st syscall.Stat_t
			if err := syscall.Lstat(writable, &st); err != nil {
				t.Fatal(err)
			}
			walked, err := (&usageWalk{ctx: ctx, dev: st.Dev, seen: map[uint64]bool{}}).walk(writable, nil)
			if err != nil {
				t.Fatal(err)
			}
			given := FsUsage{UsedBytes: 7 << 20, InodesUsed: 5}
			withGiven, err := s.FsInfo(ctx, map[string]FsUsage{writable: given})
			if err != nil {
				t.Fatal(err)
			}
			if withGiven.UsedBytes != second.UsedBytes-walked.bytes+given.UsedBytes || withGiven.InodesUsed != second.InodesUsed-walked.inodes+given.InodesUsed {
				t.Errorf("with the writable layer measured as %+v (walked: %+v): FsInfo %+v, without %+v", given, walked, withGiven, second)
			}

			for _, f := range planted {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Unmount(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := s.DeleteContainer(ctx, id); err != nil {
				t.Fatal(err)
			}
			if err := s.RemoveImage(ctx, img.ID); err != nil {
				t.Fatal(err)
			}
			third, err := s.FsInfo(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(s.fsKept) != 0 || third.UsedBytes >= first.UsedBytes {
				t.Errorf("after the container's and the image's removal: %d kept figures, FsInfo %+v (first %+v)", len(s.fsKept), third, first)
			}
		})
	}
}

// wholeWalk measures s's graph root by walking all of it.
func wholeWalk(t testing.TB, s *Store) dirUsage {
	t.Helper()
	root := s.st.GraphRoot()
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		t.Fatal(err)
	}
	w := usageWalk{ctx: context.Background(), dev: st.Dev, seen: map[uint64]bool{}}
	u, err := w.walk(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// TestNothingUnderVarLibContainers checks that a pull keeps containers/image's caches and
// configuration in the image cache directory.
func TestNothingUnderVarLibContainers(t *testing.T) {
	s := openTestStore(t, "")
	pullTestImage(t, s)
	for _, name := range []string{"blob-info-cache-v1.sqlite", "registries.conf"} {
		if _, err := os.Stat(filepath.Join(s.dir, "cache", name)); err != nil {
			t.Errorf("image cache dir: %v", err)
		}
	}
	if _, err := os.Stat("/var/lib/containers"); err == nil && !varLibContainersExisted {
		t.Error("the tests created /var/lib/containers")
	}
	entries, _ := os.ReadDir(filepath.Join(s.dir, "cache", "tmp"))
	if len(entries) > 0 {
		t.Errorf("temporary files left after the pull: %v", entries)
	}
}

func TestOpenInvalid(t *testing.T) {
	dir := t.TempDir()
	good := Options{Root: filepath.Join(dir, "root"), RunRoot: filepath.Join(dir, "run")}
	for _, tc := range []struct {
		name   string
		change func(o *Options)
		substr string
	}{
		{"relative root", func(o *Options) { o.Root = "root" }, "root"},
		{"no run root", func(o *Options) { o.RunRoot = "" }, "run root"},
		{"relative cache", func(o *Options) { o.ImageCacheDir = "cache" }, "cache"},
		{"unknown driver", func(o *Options) { o.Driver = "btrfs" }, "btrfs"},
		{"registry with scheme", func(o *Options) {
			o.Registries = []Registry{{Prefix: "registry.k8s.io", Location: "http://127.0.0.1:5000"}}
		}, "scheme"},
		{"registry without location", func(o *Options) { o.Registries = []Registry{{Prefix: "registry.k8s.io"}} }, "location"},
		{"registry prefix twice", func(o *Options) {
			o.Registries = []Registry{{Prefix: "a.io", Location: "b.io"}, {Prefix: "a.io", Location: "c.io"}}
		}, "twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.change(&o)
			s, err := Open(context.Background(), o)
			if err == nil {
				s.Close()
				t.Fatal("Open succeeded")
			}
			if !strings.Contains(err.Error(), tc.substr) {
				t.Errorf("error %q does not mention %q", err, tc.substr)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("invalid Opens created %v", entries)
	}
}

func TestNormalize(t *testing.T) {
	const d = "sha256:0123456789012345678901234567890123456789012345678901234567890123"
	for _, tc := range []struct{ in, want string }{
		{"busybox", "docker.io/library/busybox:latest"},
		{"busybox:1.36", "docker.io/library/busybox:1.36"},
		{"library/busybox", "docker.io/library/busybox:latest"},
		{"k8s/pause:3.9", "docker.io/k8s/pause:3.9"},
		{"docker.io/busybox", "docker.io/library/busybox:latest"},
		{"registry.k8s.io/pause", "registry.k8s.io/pause:latest"},
		{"127.0.0.1:5000/a/b:c", "127.0.0.1:5000/a/b:c"},
		{"localhost/x", "localhost/x:latest"},
		{"quay.io/a/b@" + d, "quay.io/a/b@" + d},
		{"quay.io/a/b:tag@" + d, "quay.io/a/b@" + d},
	} {
		got, err := normalize(tc.in)
		if err != nil || got.String() != tc.want {
			t.Errorf("normalize(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "Busybox", "busybox:", ":tag", "a//b", "busybox@sha256:12", strings.Repeat("a", 64)} {
		if got, err := normalize(in); !errors.Is(err, ErrInvalidReference) {
			t.Errorf("normalize(%q) = %v, %v; want ErrInvalidReference", in, got, err)
		}
	}
}

func TestLoopbackRegistry(t *testing.T) {
	for _, tc := range []struct {
		ref  string
		want bool
	}{
		{"127.0.0.1:5000/a", true},
		{"127.1.2.3/a", true},
		{"localhost:5000/a", true},
		{"registry.k8s.io/a", false},
		{"10.0.0.1:5000/a", false},
		{"busybox", false},
	} {
		named, err := normalize(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		if got := isLoopbackRegistry(named); got != tc.want {
			t.Errorf("isLoopbackRegistry(%s) = %v, want %v", tc.ref, got, tc.want)
		}
	}
}

func TestAuthApply(t *testing.T) {
	for _, tc := range []struct {
		name       string
		auth       *Auth
		user, pass string
		token      string
		wantErr    bool
	}{
		{"nil", nil, "", "", "", false},
		{"user and password", &Auth{Username: "u", Password: "p"}, "u", "p", "", false},
		{"auth", &Auth{Auth: "dTpwOng="}, "u", "p:x", "", false}, // base64("u:p:x")
		{"registry token", &Auth{RegistryToken: "tok"}, "", "", "tok", false},
		{"bad base64", &Auth{Auth: "!!"}, "", "", "", true},
		{"no colon", &Auth{Auth: "dXNlcg=="}, "", "", "", true}, // base64("user")
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sys types.SystemContext
			err := tc.auth.apply(&sys)
			if (err != nil) != tc.wantErr {
				t.Fatalf("apply = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			var user, pass string
			if sys.DockerAuthConfig != nil {
				user, pass = sys.DockerAuthConfig.Username, sys.DockerAuthConfig.Password
			}
			if user != tc.user || pass != tc.pass || sys.DockerBearerRegistryToken != tc.token {
				t.Errorf("credentials = %q %q %q, want %q %q %q", user, pass, sys.DockerBearerRegistryToken, tc.user, tc.pass, tc.token)
			}
		})
	}
}
