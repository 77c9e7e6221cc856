package test

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// The container tests pull busybox (storagetest's image of the host's static
// busybox) from an in-process registry on 127.0.0.1, through a mirror of
// registry.k8s.io: the daemon is asked for testImage and pulls it from the
// loopback registry.
const (
	testImagePrefix = "registry.k8s.io"
	testImageRepo   = "e2e/busybox"
	testImageTag    = "1.0"
	testImage       = testImagePrefix + "/" + testImageRepo + ":" + testImageTag
)

// imageRegistry is a loopback registry holding the test image.
type imageRegistry struct {
	host   string // 127.0.0.1:port
	digest string // the manifest digest of testImage
}

// startImageRegistry starts a registry for the test (stopped when it ends)
// and pushes the test image to it.
func startImageRegistry(t *testing.T) imageRegistry {
	t.Helper()
	requirePrereqs(t)
	requireContainerTools(t)
	storagetest.RequireBusybox(t)
	host := storagetest.StartRegistry(t)
	digest := storagetest.PushBusybox(t, host, testImageRepo, testImageTag)
	return imageRegistry{host: host, digest: digest}
}

// requireContainerTools stops the test unless runc and conmon are installed:
// it fails under CI=true, where they must be, and skips elsewhere.
func requireContainerTools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"runc", "conmon"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Need(t, "container tests need %s in PATH (Debian: apt-get install -y runc conmon)", tool)
		}
	}
}

// mirror is the daemon configuration that pulls registry.k8s.io images from r.
func (r imageRegistry) mirror() []registryMirror {
	return []registryMirror{{prefix: testImagePrefix, location: r.host, insecure: true}}
}

// startContainerDaemon starts a registry and a daemon that pulls from it,
// and pulls the test image. It returns the daemon and how long the pull took.
func startContainerDaemon(t *testing.T, opts daemonOptions) (*daemon, time.Duration) {
	t.Helper()
	reg := startImageRegistry(t)
	opts.registries = append(opts.registries, reg.mirror()...)
	d := startDaemon(t, opts)
	return d, d.pull(t, testImage)
}

// pull runs crictl pull and returns how long it took.
func (d *daemon) pull(t *testing.T, ref string) time.Duration {
	t.Helper()
	start := time.Now()
	out := d.mustCrictl(t, "pull", ref)
	took := time.Since(start)
	if !strings.Contains(out, "Image is up to date") {
		t.Fatalf("crictl pull %s printed %q", ref, out)
	}
	t.Logf("pull of %s took %v", ref, took.Round(time.Millisecond))
	return took
}

// criImage is the part of crictl's image JSON the tests read.
type criImage struct {
	ID          string   `json:"id"`
	RepoTags    []string `json:"repoTags"`
	RepoDigests []string `json:"repoDigests"`
	Size        string   `json:"size"`
}

// images returns crictl images -o json.
func (d *daemon) images(t *testing.T) []criImage {
	t.Helper()
	out := d.mustCrictl(t, "images", "-o", "json")
	var resp struct {
		Images []criImage `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("crictl images -o json: %v\n%s", err, out)
	}
	return resp.Images
}

// TestImages pulls the test image, lists and inspects it by tag, digest and
// ID prefix, checks that a second pull is a no-op of the same ID, that an
// image the registry lacks fails to pull with a clear error, and removes it.
func TestImages(t *testing.T) {
	t.Parallel()
	reg := startImageRegistry(t)
	d := startDaemon(t, daemonOptions{registries: reg.mirror()})
	if imgs := d.images(t); len(imgs) != 0 {
		t.Fatalf("a new daemon lists images %v", imgs)
	}
	d.pull(t, testImage)

	imgs := d.images(t)
	if len(imgs) != 1 || !slices.Contains(imgs[0].RepoTags, testImage) {
		t.Fatalf("crictl images after the pull: %+v, want one image tagged %s", imgs, testImage)
	}
	img := imgs[0]
	wantDigest := testImagePrefix + "/" + testImageRepo + "@" + reg.digest
	if !slices.Contains(img.RepoDigests, wantDigest) {
		t.Errorf("image repo digests %v, want %s (stored under the requested name, not the mirror's)", img.RepoDigests, wantDigest)
	}
	for _, ref := range []string{testImage, wantDigest, img.ID[:12]} {
		out := d.mustCrictl(t, "inspecti", "-o", "json", ref)
		var st struct {
			Status criImage `json:"status"`
		}
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("crictl inspecti %s: %v\n%s", ref, err, out)
		}
		if st.Status.ID != img.ID {
			t.Errorf("crictl inspecti %s: id %q, want %q", ref, st.Status.ID, img.ID)
		}
	}

	// Pulling again is quick and changes nothing.
	d.pull(t, testImage)
	if again := d.images(t); len(again) != 1 || again[0].ID != img.ID {
		t.Errorf("after a second pull crictl images lists %+v, want the one image %s", again, img.ID)
	}

	// ImageFsInfo reports the storage root, which holds the image.
	out := d.mustCrictl(t, "imagefsinfo", "-o", "json")
	var fsInfo struct {
		Status struct {
			ImageFilesystems []struct {
				FsID struct {
					Mountpoint string `json:"mountpoint"`
				} `json:"fsId"`
				UsedBytes struct {
					Value string `json:"value"`
				} `json:"usedBytes"`
			} `json:"imageFilesystems"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &fsInfo); err != nil || len(fsInfo.Status.ImageFilesystems) != 1 {
		t.Fatalf("crictl imagefsinfo -o json: %v\n%s", err, out)
	}
	if fs := fsInfo.Status.ImageFilesystems[0]; !strings.HasPrefix(fs.FsID.Mountpoint, d.root) || fs.UsedBytes.Value == "" || fs.UsedBytes.Value == "0" {
		t.Errorf("crictl imagefsinfo: mountpoint %q (want one under %s), used bytes %q", fs.FsID.Mountpoint, d.root, fs.UsedBytes.Value)
	}

	// An image the registry does not have.
	_, stderr, err := d.crictl(t, "pull", testImagePrefix+"/e2e/missing:1.0")
	if err == nil {
		t.Fatal("pulling an image the registry does not have succeeded")
	}
	if !strings.Contains(stderr, "missing") {
		t.Errorf("the failed pull does not name the image: %s", stderr)
	}
	requireCode(t, "pull of an image the registry does not have", err, stderr, "NotFound")

	// inspecti of an unknown image fails; rmi of one succeeds (CRI: nothing
	// to remove); rmi of ours removes it.
	if _, _, err := d.crictl(t, "inspecti", testImagePrefix+"/e2e/missing:1.0"); err == nil {
		t.Error("crictl inspecti of an image not on the node succeeded")
	}
	d.mustCrictl(t, "rmi", testImage)
	if left := d.images(t); len(left) != 0 {
		t.Fatalf("after rmi crictl images lists %+v", left)
	}

	// Pulled by digest: the same image, found by that digest; removed by ID.
	d.pull(t, wantDigest)
	if byDigest := d.images(t); len(byDigest) != 1 || byDigest[0].ID != img.ID || !slices.Contains(byDigest[0].RepoDigests, wantDigest) {
		t.Errorf("after a pull by digest crictl images lists %+v, want %s with digest %s", byDigest, img.ID, wantDigest)
	}
	d.mustCrictl(t, "rmi", img.ID)
	if left := d.images(t); len(left) != 0 {
		t.Fatalf("after rmi by ID crictl images lists %+v", left)
	}
	d.stopClean(t)
}
