package storage

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// A pull is answered only once the image is on disk for good: a power cut after the
// answer must not lose an image the kubelet then believes the node has (it would not pull
// it again, and its containers would fail to start).
//
// containers/storage (v1.65) writes its records (layers.json, images.json, an image's
// manifest and config) to a temporary file that it fdatasyncs and renames, but it syncs
// neither the directory of the rename nor, by default, the files of a layer it unpacks.
// Two things close that gap:
//
//   - the overlay driver's sync=filesystem option (set by Open): containers/storage
//     calls syncfs on the graph root before it records a layer as complete, so a layer
//     recorded complete after a cut has all its files, and an image (recorded after its
//     layers) never names a layer whose files a cut took. The vfs driver of v1.65 refuses
//     its own sync option (it compares the option's name with the driver's prefix still
//     on), so on vfs a cut during a pull can leave a layer recorded complete with files
//     missing; Open's check (see repair.go) cannot see that without reading every layer.
//   - syncGraphRoot, after the image is recorded and before the pull is answered: one
//     syncfs of the graph root's file system makes the renames of the records durable.
//
// A removal (RemoveImage) is not synced: a cut may bring the image back, which the
// kubelet's image garbage collection removes again.

// syncLayers sets the overlay driver's sync=filesystem at Open; a variable for
// BenchmarkPullDurable.
var syncLayers = true

// syncfs flushes the file system holding dir; a variable for the tests.
var syncfs = func(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// syncGraphRoot flushes the file systems of the graph root and, when images have a store
// of their own (Options.ImageStore), of that one: everything a pull wrote is on disk when
// it returns nil.
func (s *Store) syncGraphRoot() error {
	for _, dir := range []string{s.st.GraphRoot(), s.st.ImageStore()} {
		if dir == "" {
			continue
		}
		if err := syncfs(dir); err != nil {
			return fmt.Errorf("flush the file system of %s: %w", dir, err)
		}
	}
	return nil
}
