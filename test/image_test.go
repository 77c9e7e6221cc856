package test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

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
