package test

import (
	"archive/tar"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/storage/storagetest"
)

// kubeletImageGCPeriod is how often the kubelet runs its image garbage collection:
// ImageGCPeriod, a constant of pkg/kubelet/kubelet.go (v1.37.2), 5m. Its first run, at
// the kubelet's start, fails while cadvisor has no file system figures yet ("Image
// garbage collection failed once. Stats initialization may not have completed yet"
// err="invalid capacity 0 on image filesystem"), so the first that removes anything
// comes a period later.
const kubeletImageGCPeriod = 5 * time.Minute

// pinnedImage is what the tests read of an image in crictl images and inspecti -o json.
type pinnedImage struct {
	ID       string   `json:"id"`
	RepoTags []string `json:"repoTags"`
	Pinned   bool     `json:"pinned"`
}

// pinnedImages returns crictl images -o json, by the first tag of each.
func (d *daemon) pinnedImages(t *testing.T) map[string]pinnedImage {
	t.Helper()
	out := d.mustCrictl(t, "images", "-o", "json")
	var resp struct {
		Images []pinnedImage `json:"images"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		t.Fatalf("crictl images -o json: %v\n%s", err, out)
	}
	byTag := map[string]pinnedImage{}
	for _, img := range resp.Images {
		for _, tag := range img.RepoTags {
			byTag[tag] = img
		}
	}
	return byTag
}

// TestKubeletImageGCLeavesPinned: the daemon pins images by pinned_images (an exact
// name, and a glob), reports it in crictl images and inspecti (Image.pinned), and a real
// kubelet (v1.37.2) whose image garbage collection must free everything it can
// (imageGCHighThresholdPercent 1, imageGCLowThresholdPercent 0: the kubelet's validation
// wants 0-100 with low below high; imageMinimumGCAge 1s, the least it keeps, 0 meaning its
// default of 2m) removes the unused image that is not pinned and leaves the two that are:
// imagesInEvictionOrder skips an image whose record is pinned ("Image is pinned, skipping
// garbage collection", pkg/kubelet/images/image_gc_manager.go, v1.37.2), taking the flag
// from ListImages. The kubelet measures the image file system the daemon's ImageFsInfo
// names, the machine's disk under /tmp here, used well over 1 %. The kubelet's first
// image garbage collection fails (see kubeletImageGCPeriod): the test takes five to six
// minutes.
func TestKubeletImageGCLeavesPinned(t *testing.T) {
	t.Parallel()
	requireKubelet(t)
	requirePrereqs(t)
	requireContainerTools(t)
	storagetest.RequireBusybox(t)
	host := storagetest.StartRegistry(t)
	// Three images that differ (by a directory each), so three IDs.
	names := map[string]string{} // role -> name the daemon pulls
	for _, role := range []string{"exact", "glob", "unpinned"} {
		repo := "e2e/gc-" + role
		storagetest.PushBusyboxWith(t, host, repo, "1.0", tar.Header{Typeflag: tar.TypeDir, Name: role + "/", Mode: 0o755})
		names[role] = testImagePrefix + "/" + repo + ":1.0"
	}
	d := startDaemon(t, daemonOptions{
		registries: []registryMirror{{prefix: testImagePrefix, location: host, insecure: true}},
		extraTOML:  []string{`pinned_images = ["` + names["exact"] + `", "` + testImagePrefix + `/e2e/gc-glob:*"]`},
	})
	for _, role := range []string{"exact", "glob", "unpinned"} {
		d.pull(t, names[role])
	}

	images := d.pinnedImages(t)
	ids := map[string]string{} // role -> image ID
	for role, name := range names {
		img, ok := images[name]
		if !ok {
			t.Fatalf("crictl images does not list %s: %v", name, images)
		}
		ids[role] = img.ID
		if want := role != "unpinned"; img.Pinned != want {
			t.Errorf("crictl images: %s pinned %v, want %v", name, img.Pinned, want)
		}
		var st struct {
			Status pinnedImage `json:"status"`
		}
		out := d.mustCrictl(t, "inspecti", "-o", "json", name)
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("crictl inspecti %s: %v\n%s", name, err, out)
		}
		if want := role != "unpinned"; st.Status.Pinned != want {
			t.Errorf("crictl inspecti %s: pinned %v, want %v", name, st.Status.Pinned, want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	k := startKubelet(t, d, kubeletOptions{config: map[string]any{
		"imageGCHighThresholdPercent": 1,
		"imageGCLowThresholdPercent":  0,
		"imageMinimumGCAge":           "1s",
	}})
	start := time.Now()
	testenv.Eventually(t, kubeletImageGCPeriod+2*time.Minute, 5*time.Second, testenv.Until("the kubelet's image garbage collection to remove the unpinned image", func() bool {
		_, listed := d.pinnedImages(t)[names["unpinned"]]
		return !listed
	}))
	t.Logf("the kubelet removed the unpinned image %s after %v", ids["unpinned"], time.Since(start).Round(time.Second))

	// The same pass went over the pinned ones and left them.
	images = d.pinnedImages(t)
	for _, role := range []string{"exact", "glob"} {
		if img, ok := images[names[role]]; !ok || img.ID != ids[role] || !img.Pinned {
			t.Errorf("after the kubelet's image garbage collection: %s is %+v (listed %v), want the pinned image %s", names[role], img, ok, ids[role])
		}
	}
	log := k.logTail(1 << 20)
	removed := func(id string) bool {
		return slices.ContainsFunc(strings.Split(log, "\n"), func(l string) bool {
			return strings.Contains(l, "Removing image to free bytes") && strings.Contains(l, id)
		})
	}
	if !removed(ids["unpinned"]) {
		t.Errorf("the kubelet's log does not say it removed %s to free bytes", ids["unpinned"])
	}
	for _, role := range []string{"exact", "glob"} {
		if removed(ids[role]) {
			t.Errorf("the kubelet's log says it tried to remove the pinned image %s (%s)", ids[role], names[role])
		}
	}
	k.stop(t)
	d.stopClean(t)
}
