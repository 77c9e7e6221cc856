package test

import (
	"slices"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/storage/storagetest"
)

// TestRemoveImageByTag is issue 51's item 7 (RemoveImage): an image pulled under two
// tags is removed, by one of them, with both, as cri-api 0.36 says RemoveImage works
// ("if the image is referenced by multiple tags ... removing the image by a single tag
// will remove all of its tags"), through crictl rmi; the next crictl images lists
// neither tag, and a second rmi of either succeeds (RemoveImage is idempotent).
func TestRemoveImageByTag(t *testing.T) {
	t.Parallel()
	reg := startImageRegistry(t)
	const other = testImagePrefix + "/" + testImageRepo + ":1.1"
	storagetest.PushBusybox(t, reg.host, testImageRepo, "1.1")
	d := startDaemon(t, daemonOptions{registries: reg.mirror()})
	d.pull(t, testImage)
	d.pull(t, other)
	imgs := d.images(t)
	if len(imgs) != 1 || !slices.Contains(imgs[0].RepoTags, testImage) || !slices.Contains(imgs[0].RepoTags, other) {
		t.Fatalf("crictl images lists %+v, want one image tagged %s and %s", imgs, testImage, other)
	}

	d.mustCrictl(t, "rmi", other)
	if imgs := d.images(t); len(imgs) != 0 {
		t.Errorf("crictl images lists %+v after crictl rmi %s, want nothing: removing an image by one tag removes all its tags", imgs, other)
	}
	// crictl rmi looks an image up first and stops at an unknown one: the call itself.
	conn := d.criConn(t)
	defer conn.Close()
	for _, ref := range []string{other, testImage} {
		if _, err := runtimeapi.NewImageServiceClient(conn).RemoveImage(t.Context(),
			&runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			t.Errorf("RemoveImage(%s) of a removed image: %v, want success", ref, err)
		}
	}
	d.stop(t)
}
