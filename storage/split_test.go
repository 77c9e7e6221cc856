package storage

import (
	"archive/tar"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// layersDir is where a driver keeps its layers' directories, under the graph root or the
// image store.
func layersDir(driver string) string {
	if driver == DriverVFS {
		return filepath.Join("vfs", "dir")
	}
	return driver
}

// TestImageStoreSplit: with an image store (Options.ImageStore), a pulled image's layers
// and records are in it and not in the graph root, a container's writable layer is in
// the graph root and not in the image store, and Usage measures the two apart: what the
// container writes counts in Containers and not in Images, the image in Images and not
// in Containers. An image pulled before the split stays usable. Both drivers, and an
// image store inside the graph root (Usage must not count it twice).
func TestImageStoreSplit(t *testing.T) {
	for _, nested := range []bool{false, true} {
		t.Run(map[bool]string{false: "beside", true: "inside"}[nested], func(t *testing.T) { testImageStoreSplit(t, nested) })
	}
}

// testImageStoreSplit is TestImageStoreSplit with the image store beside the graph root,
// or inside it (nested).
func testImageStoreSplit(t *testing.T, nested bool) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	onEachDriverWith(t, func(o *Options) {
		o.ImageStore = filepath.Join(filepath.Dir(o.Root), "images")
		if nested {
			o.ImageStore = filepath.Join(o.Root, "images")
		}
	}, func(t *testing.T, driver string, s *testStore) {
		ctx := context.Background()
		root, images := s.opts.Root, s.opts.ImageStore
		if s.ImageStore() != images || s.GraphRoot() != root {
			t.Fatalf("ImageStore() %q, GraphRoot() %q; want %q, %q", s.ImageStore(), s.GraphRoot(), images, root)
		}
		empty, err := s.Usage(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		img, _ := pullTestImage(t, s)
		layers := layersDir(s.Driver())
		top, err := s.st.Image(img.ID)
		if err != nil {
			t.Fatal(err)
		}
		requireDir(t, "the image's top layer", filepath.Join(images, layers, top.TopLayer), true)
		requireDir(t, "the image's top layer", filepath.Join(root, layers, top.TopLayer), false)
		requireDir(t, "the image records", filepath.Join(images, s.Driver()+"-images", top.ID), true)
		requireDir(t, "the image records", filepath.Join(root, s.Driver()+"-images", top.ID), false)

		pulled, err := s.Usage(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if pulled.Images.Mountpoint != images || pulled.Containers.Mountpoint != root {
			t.Fatalf("Usage mount points: images %q, containers %q; want %q, %q", pulled.Images.Mountpoint, pulled.Containers.Mountpoint, images, root)
		}
		// busybox-static is about 2 MB; the graph root gets the records' updates only.
		if grew := pulled.Images.UsedBytes - empty.Images.UsedBytes; pulled.Images.UsedBytes < empty.Images.UsedBytes+1<<20 {
			t.Errorf("the image store grew by %d bytes with the pull, want the image (over 1 MiB): %+v -> %+v", grew, empty, pulled)
		}
		if pulled.Containers.UsedBytes > empty.Containers.UsedBytes+256<<10 {
			t.Errorf("the graph root grew with the pull: %+v -> %+v, want the image counted in the image store only", empty.Containers, pulled.Containers)
		}

		if _, err := s.CreateContainer(ctx, id, "split", img.ID, nil); err != nil {
			t.Fatal(err)
		}
		rootfs, err := s.Mount(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.DeleteContainer(ctx, id) })
		c, err := s.container(id)
		if err != nil {
			t.Fatal(err)
		}
		requireDir(t, "the container's layer", filepath.Join(root, layers, c.LayerID), true)
		requireDir(t, "the container's layer", filepath.Join(images, layers, c.LayerID), false)
		writable, err := s.WritableLayerDir(id)
		if err != nil || !strings.HasPrefix(writable, root+"/") || strings.HasPrefix(writable, images+"/") {
			t.Errorf("WritableLayerDir = %q, %v; want a directory of the graph root's, not of the image store's", writable, err)
		}
		before, err := s.Usage(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(rootfs, "written"), make([]byte, 4<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		after, err := s.Usage(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("Usage: empty %+v, pulled %+v, with the container %+v, after it wrote 4 MiB %+v", empty, pulled, before, after)
		if after.Containers.UsedBytes < before.Containers.UsedBytes+4<<20 {
			t.Errorf("the container's 4 MiB are not counted in the graph root: %+v -> %+v", before.Containers, after.Containers)
		}
		if after.Images != before.Images || before.Images.UsedBytes != pulled.Images.UsedBytes {
			t.Errorf("the image store's figure changed with the container: pulled %+v, container made %+v, written %+v", pulled.Images, before.Images, after.Images)
		}
		if fi, err := s.FsInfo(ctx, nil); err != nil || fi != after.Containers {
			t.Errorf("FsInfo = %+v, %v; want Usage's Containers %+v", fi, err, after.Containers)
		}
	})
}

// TestImageStoreAfterImages: an image pulled into the graph root before the store was
// given an image store is still listed and used once it has one, and a new pull goes to
// the image store.
func TestImageStoreAfterImages(t *testing.T) {
	s := openTestStore(t, DriverVFS)
	ctx := context.Background()
	before, _ := pullTestImage(t, s)
	s.opts.ImageStore = filepath.Join(s.dir, "images")
	s.reopen(t, nil)
	imgs, err := s.ListImages(ctx)
	if err != nil || len(imgs) != 1 || imgs[0].ID != before.ID {
		t.Fatalf("ListImages after the image store was set: %+v, %v; want the image pulled before, %s", imgs, err, before.ID)
	}
	const id = "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	if _, err := s.CreateContainer(ctx, id, "old", before.ID, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Mount(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	storagetest.PushBusyboxWith(t, s.host, "test/other", "1.0", tar.Header{Typeflag: tar.TypeDir, Name: "other/", Mode: 0o755})
	other, err := s.PullImage(ctx, "registry.k8s.io/test/other:1.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	requireDir(t, "the new image's records", filepath.Join(s.opts.ImageStore, "vfs-images", other.ID), true)
	requireDir(t, "the old image's records", filepath.Join(s.opts.Root, "vfs-images", before.ID), true)
}

// TestPinnedImages: an image is pinned when a pattern of Options.PinnedImages matches a
// tag or a digest of it, in ListImages and ImageStatus alike, and only then; an invalid
// pattern fails Open.
func TestPinnedImages(t *testing.T) {
	s := openTestStoreWith(t, DriverVFS, func(o *Options) {
		o.PinnedImages = []string{"registry.k8s.io/test/busybox:*", "*pinned-by-keyword*"}
	})
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	storagetest.PushBusyboxWith(t, s.host, "test/other", "1.0", tar.Header{Typeflag: tar.TypeDir, Name: "other/", Mode: 0o755})
	storagetest.PushBusyboxWith(t, s.host, "test/pinned-by-keyword", "2.0", tar.Header{Typeflag: tar.TypeDir, Name: "keyword/", Mode: 0o755})
	other, err := s.PullImage(ctx, "registry.k8s.io/test/other:1.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	keyword, err := s.PullImage(ctx, "registry.k8s.io/test/pinned-by-keyword:2.0", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{img.ID: true, other.ID: false, keyword.ID: true}
	for _, i := range []Image{img, other, keyword} {
		if i.Pinned != want[i.ID] {
			t.Errorf("PullImage's image %v: pinned %v, want %v", i.RepoTags, i.Pinned, want[i.ID])
		}
		st, err := s.ImageStatus(ctx, i.ID)
		if err != nil || st.Pinned != want[i.ID] {
			t.Errorf("ImageStatus(%v): pinned %v (%v), want %v", i.RepoTags, st.Pinned, err, want[i.ID])
		}
	}
	imgs, err := s.ListImages(ctx)
	if err != nil || len(imgs) != 3 {
		t.Fatalf("ListImages: %d images, %v; want 3", len(imgs), err)
	}
	for _, i := range imgs {
		if i.Pinned != want[i.ID] {
			t.Errorf("ListImages: %v pinned %v, want %v", i.RepoTags, i.Pinned, want[i.ID])
		}
	}

	// By a digest: the image is pinned by its name@digest, whatever its tags.
	digested := slices.IndexFunc(other.RepoDigests, func(d string) bool { return strings.Contains(d, "@sha256:") })
	if digested < 0 {
		t.Fatalf("no repo digest of %v", other)
	}
	s.opts.PinnedImages = []string{other.RepoDigests[digested]}
	s.reopen(t, nil)
	if st, err := s.ImageStatus(ctx, other.ID); err != nil || !st.Pinned {
		t.Errorf("pinned by its digest %s: ImageStatus pinned %v, %v; want pinned", s.opts.PinnedImages[0], st.Pinned, err)
	}
	if st, err := s.ImageStatus(ctx, img.ID); err != nil || st.Pinned {
		t.Errorf("with only %s pinned: ImageStatus(%v) pinned %v, %v; want not", s.opts.PinnedImages[0], img.RepoTags, st.Pinned, err)
	}

	bad := s.opts
	bad.PinnedImages = []string{"busybox:1.36"}
	if st, err := Open(ctx, bad); err == nil || !strings.Contains(err.Error(), "docker.io/library/busybox:1.36") {
		if err == nil {
			st.Close()
		}
		t.Errorf("Open with pinned image %q: %v; want an error naming the qualified name", bad.PinnedImages[0], err)
	}
}

// requireDir fails the test unless dir exists (want) or does not (!want).
func requireDir(t *testing.T, what, dir string, want bool) {
	t.Helper()
	_, err := os.Stat(dir)
	switch {
	case want && err != nil:
		t.Errorf("%s: %s: %v, want it there", what, dir, err)
	case !want && !errors.Is(err, fs.ErrNotExist):
		t.Errorf("%s: %s is there (%v), want it elsewhere", what, dir, err)
	}
}

// TestImageStoreChange: a store opened with another image store than last time (or none)
// is refused while containers made with the old one are recorded, naming the old one, and
// taken once they are gone; adding an image store to a store without one is taken over
// containers (their images stay readable in the graph root).
func TestImageStoreChange(t *testing.T) {
	const id = "2123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	s := openTestStoreWith(t, DriverVFS, func(o *Options) { o.ImageStore = filepath.Join(filepath.Dir(o.Root), "images") })
	ctx := context.Background()
	img, _ := pullTestImage(t, s)
	if _, err := s.CreateContainer(ctx, id, "change", img.ID, nil); err != nil {
		t.Fatal(err)
	}
	first := s.opts.ImageStore
	for _, other := range []string{"", filepath.Join(s.dir, "elsewhere")} {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		changed := s.opts
		changed.ImageStore = other
		st, err := Open(ctx, changed)
		if err == nil {
			st.Close()
			t.Fatalf("Open with image store %q after %q, over a container: succeeded, want a refusal", other, first)
		}
		if !strings.Contains(err.Error(), first) || !strings.Contains(err.Error(), "1 containers") {
			t.Errorf("Open with image store %q after %q, over a container: %v; want the old store and the container named", other, first, err)
		}
		s.reopen(t, nil) // with the first: taken
		if _, err := s.Mount(ctx, id); err != nil {
			t.Fatalf("the container after the refused change: %v", err)
		}
		if err := s.Unmount(ctx, id); err != nil {
			t.Fatal(err)
		}
	}

	// Without containers the change is taken, and recorded.
	if err := s.DeleteContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	s.opts.ImageStore = ""
	s.reopen(t, nil)
	if imgs, err := s.ListImages(ctx); err != nil || len(imgs) != 0 {
		t.Errorf("ListImages without the image store: %+v, %v; want none (the image is in the old store)", imgs, err)
	}
	if had, err := recordedImageStore(s.opts.Root); err != nil || had != "" {
		t.Errorf("recorded image store %q, %v; want none", had, err)
	}

	// From none to one, over a container of the graph root's image: taken.
	img, _ = pullTestImage(t, s)
	if _, err := s.CreateContainer(ctx, id, "change", img.ID, nil); err != nil {
		t.Fatal(err)
	}
	s.opts.ImageStore = first + "/" // the same directory, written otherwise
	s.reopen(t, nil)
	if _, err := s.Mount(ctx, id); err != nil {
		t.Fatalf("the container of the graph root's image once the image store is set: %v", err)
	}
	if err := s.DeleteContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	if had, err := recordedImageStore(s.opts.Root); err != nil || had != first {
		t.Errorf("recorded image store %q, %v; want %q", had, err, first)
	}
}
