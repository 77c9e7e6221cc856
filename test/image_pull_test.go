package test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/internal/testenv"
)

// The pull tests (issue 42, part 3): a registry that stalls sends nothing for
// image_pull_progress_timeout and the pull is cancelled, while one that trickles is waited
// for; pulls of one image at once share one download, which stops when every caller has
// gone; a full disk fails a pull with ResourceExhausted and leaves nothing in the storage.
// The registry is the test's own (blobRegistry), which counts each blob's downloads.

// TestPullProgressTimeout: with image_pull_progress_timeout = 2s, a pull whose blob stalls
// after 1 MiB fails with DeadlineExceeded naming the timeout and the blob, the download is
// cut, and nothing of the image stays (not the layers it had unpacked in full, nor a
// temporary file); a pull whose blob trickles (64 KiB every 150 ms, 5 s in all) succeeds.
func TestPullProgressTimeout(t *testing.T) {
	requireContainerTools(t)
	reg := startBlobRegistry(t)
	done := dataLayer(t, "done", 512<<10, randomBytes, 1)
	stalled := dataLayer(t, "stalled", 4<<20, randomBytes, 2)
	slow := dataLayer(t, "slow", 2<<20, randomBytes, 3)
	stalledImage := reg.push(t, busyboxWith(t, done, stalled), "e2e/stalled", "1.0")
	slowImage := reg.push(t, busyboxWith(t, slow), "e2e/slow", "1.0")
	reg.serve(blobDigest(t, stalled), blobServe{stallAfter: 1 << 20})
	reg.serve(blobDigest(t, slow), blobServe{chunk: 64 << 10, every: 150 * time.Millisecond})

	d := startDaemon(t, daemonOptions{registries: reg.mirror(), extraTOML: []string{`image_pull_progress_timeout = "2s"`}})
	before := d.storageLeftovers(t)

	_, stderr, err := d.crictl(t, "pull", stalledImage)
	if err == nil {
		t.Fatalf("crictl pull %s succeeded, want it cancelled by image_pull_progress_timeout", stalledImage)
	}
	for _, want := range []string{"DeadlineExceeded", "no bytes from the registry for 2s", "image_pull_progress_timeout", blobDigest(t, stalled).String()} {
		if !strings.Contains(stderr, want) {
			t.Errorf("crictl pull of the stalled image: stderr does not say %q:\n%s", want, stderr)
		}
	}
	if began, cut := reg.downloads(blobDigest(t, stalled)); began != 1 || cut != 1 {
		t.Errorf("stalled blob: %d downloads began, %d cut by the client; want 1 and 1", began, cut)
	}
	if imgs := d.images(t); len(imgs) != 0 {
		t.Errorf("images after the stalled pull: %+v, want none", imgs)
	}
	if after := d.storageLeftovers(t); !slices.Equal(after, before) {
		t.Errorf("the stalled pull left in the storage:\nbefore %q\nafter  %q", before, after)
	}

	d.pull(t, slowImage)
	if began, cut := reg.downloads(blobDigest(t, slow)); began != 1 || cut != 0 {
		t.Errorf("trickled blob: %d downloads began, %d cut; want 1 and 0", began, cut)
	}
}

// TestPullSharedDownload: two crictl pulls of one image at once share one download of
// each blob; a caller that gives up (--pull-timeout) does not cut the download another
// still waits for; and when the only caller gives up, the download stops at once, long
// before the 5-minute progress timeout would have stopped it.
func TestPullSharedDownload(t *testing.T) {
	requireContainerTools(t)
	reg := startBlobRegistry(t)
	sharedLayer := dataLayer(t, "shared", 2<<20, randomBytes, 4)
	patientLayer := dataLayer(t, "patient", 2<<20, randomBytes, 5)
	abandonedLayer := dataLayer(t, "abandoned", 2<<20, randomBytes, 6)
	sharedImage := reg.push(t, busyboxWith(t, sharedLayer), "e2e/shared", "1.0")
	patientImage := reg.push(t, busyboxWith(t, patientLayer), "e2e/patient", "1.0")
	abandonedImage := reg.push(t, busyboxWith(t, abandonedLayer), "e2e/abandoned", "1.0")
	// Each takes 3 s or more to download, so that the calls overlap.
	trickle := blobServe{chunk: 64 << 10, every: 100 * time.Millisecond}
	reg.serve(blobDigest(t, sharedLayer), trickle)
	reg.serve(blobDigest(t, patientLayer), trickle)
	reg.serve(blobDigest(t, abandonedLayer), blobServe{stallAfter: 256 << 10})

	d := startDaemon(t, daemonOptions{registries: reg.mirror()})

	t.Run("two callers, one download", func(t *testing.T) {
		errs := concurrently(2, func(int) error {
			_, stderr, err := d.crictl(t, "pull", sharedImage)
			return errorWith(err, stderr)
		})
		for i, err := range errs {
			if err != nil {
				t.Errorf("pull %d of %s: %v", i, sharedImage, err)
			}
		}
		if began, _ := reg.downloads(blobDigest(t, sharedLayer)); began != 1 {
			t.Errorf("two pulls at once downloaded the shared blob %d times, want once", began)
		}
	})

	t.Run("a caller that gives up does not cut the download of another", func(t *testing.T) {
		errs := concurrently(2, func(i int) error {
			args := []string{"pull", patientImage}
			if i == 0 {
				time.Sleep(200 * time.Millisecond) // the second caller joins the first's pull
				args = []string{"pull", "--pull-timeout", "1s", patientImage}
			}
			_, stderr, err := d.crictl(t, args...)
			return errorWith(err, stderr)
		})
		if errs[0] == nil || !strings.Contains(errs[0].Error(), "DeadlineExceeded") {
			t.Errorf("pull with --pull-timeout 1s of a 3 s download = %v, want DeadlineExceeded", errs[0])
		}
		if errs[1] != nil {
			t.Errorf("the pull that waited = %v, want success", errs[1])
		}
		if began, cut := reg.downloads(blobDigest(t, patientLayer)); began != 1 || cut != 0 {
			t.Errorf("patient blob: %d downloads began, %d cut; want 1 and 0", began, cut)
		}
	})

	t.Run("the download stops when every caller has gone", func(t *testing.T) {
		if _, _, err := d.crictl(t, "pull", "--pull-timeout", "1s", abandonedImage); err == nil {
			t.Fatalf("pull of a stalled blob with --pull-timeout 1s succeeded")
		}
		deadline := time.Now().Add(testenv.Scaled(20 * time.Second))
		for {
			began, cut := reg.downloads(blobDigest(t, abandonedLayer))
			if began == 1 && cut == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("abandoned blob: %d downloads began, %d cut; want the one download cut once its caller had gone", began, cut)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if slices.ContainsFunc(d.images(t), func(img criImage) bool { return slices.Contains(img.RepoTags, abandonedImage) }) {
			t.Errorf("the abandoned image is in the store")
		}
	})
}

// TestPullDiskFull: the daemon's whole root (journal, storage, the pulls' temporary
// files) is a 64 MiB tmpfs. A pull of an image that does not fit fails with
// ResourceExhausted naming the disk, whether the disk fills while the blob is copied (an
// incompressible 80 MiB layer) or while the layer is unpacked (100 MiB of zeros, a small
// blob); after it no layer, layer directory or temporary file of it is left, the journal
// keeps its reserve, and a small image is pulled and run.
func TestPullDiskFull(t *testing.T) {
	requireContainerTools(t)
	testenv.RequireRoot(t, "the full-disk pull test mounts a tmpfs for the daemon's root")
	reg := startBlobRegistry(t)
	small := reg.push(t, busyboxWith(t), "e2e/small", "1.0")
	tmpDir := filepath.Join(t.TempDir(), "tmp")
	if err := os.Mkdir(tmpDir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, daemonOptions{registries: reg.mirror(), rootFSSize: 64 << 20, env: []string{"TMPDIR=" + tmpDir}})
	before := d.storageLeftovers(t)
	reserve := allocated(t, d.journalPath())

	for _, tc := range []struct {
		name, file string
		size       int64
		content    layerContent
	}{
		{"the blob's copy fills the disk", "random", 80 << 20, randomBytes},
		{"the layer's unpacking fills the disk", "zeros", 100 << 20, zeroBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			big := reg.push(t, busyboxWith(t, dataLayer(t, tc.file, tc.size, tc.content, 7)), "e2e/big-"+tc.file, "1.0")
			_, stderr, err := d.crictl(t, "pull", big)
			if err == nil {
				t.Fatalf("pull of %s into a 64 MiB file system succeeded", big)
			}
			for _, want := range []string{"ResourceExhausted", "disk full", "no space left", d.root} {
				if !strings.Contains(stderr, want) {
					t.Errorf("the failed pull does not say %q:\n%s", want, stderr)
				}
			}
			if after := d.storageLeftovers(t); !slices.Equal(after, before) {
				t.Errorf("the failed pull left in the storage:\nbefore %q\nafter  %q", before, after)
			}
			if entries, _ := os.ReadDir(tmpDir); len(entries) > 0 {
				t.Errorf("the failed pull left %d files in the daemon's TMPDIR %s", len(entries), tmpDir)
			}
			if got := allocated(t, d.journalPath()); got < reserve {
				t.Errorf("the journal has %d bytes allocated after the failed pull, %d before: its reserve was eaten", got, reserve)
			}
		})
	}

	d.pull(t, small)
	if !slices.ContainsFunc(d.images(t), func(img criImage) bool { return slices.Contains(img.RepoTags, small) }) {
		t.Errorf("%s is not listed after its pull", small)
	}
}

// storageLeftovers lists what the daemon's storage holds of layers and of pulls under
// way: the IDs of the layers recorded, the layer directories of the vfs driver and the
// entries of the pulls' temporary directory, each prefixed with where it is.
func (d *daemon) storageLeftovers(t *testing.T) []string {
	t.Helper()
	storage := filepath.Join(d.root, "storage")
	var out []string
	b, err := os.ReadFile(filepath.Join(storage, "vfs-layers", "layers.json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	if len(b) > 0 {
		var layers []struct {
			ID    string         `json:"id"`
			Flags map[string]any `json:"flags"`
		}
		if err := json.Unmarshal(b, &layers); err != nil {
			t.Fatalf("layers.json: %v", err)
		}
		for _, l := range layers {
			out = append(out, "layer "+l.ID)
		}
	}
	for _, dir := range []string{filepath.Join(storage, "vfs", "dir"), filepath.Join(d.root, "image-cache", "tmp")} {
		entries, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
		for _, e := range entries {
			out = append(out, dir+"/"+e.Name())
		}
	}
	slices.Sort(out)
	return out
}

// allocated returns the bytes allocated to a file (its blocks, reserve included).
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// concurrently runs f(0), ..., f(n-1) at once and returns their errors.
func concurrently(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errs
}

// errorWith returns err with crictl's stderr, or nil.
func errorWith(err error, stderr string) error {
	if err == nil {
		return nil
	}
	return errors.New(err.Error() + ": " + strings.TrimSpace(stderr))
}
