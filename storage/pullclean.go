package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	cstorage "go.podman.io/storage"
	"golang.org/x/sys/unix"
)

// ErrDiskFull is returned by PullImage when the file system of the image store (or of its
// temporary files) filled up during the pull (gRPC ResourceExhausted). Nothing of the pull
// is left: see removeLeftovers.
var ErrDiskFull = errors.New("disk full")

// What a failed or interrupted pull leaves, and who removes it:
//
//   - the copies of the blobs it downloaded, in a directory of containers/image's under
//     the store's temporary directory (Options.ImageCacheDir/tmp): containers/image
//     removes it when the pull returns; after a crash, Open empties the temporary
//     directory;
//   - a layer whose unpacking failed (on a full disk, say): containers/storage deletes
//     it at once, or, after a crash, at the next start (its "incomplete" flag); a layer
//     unpacked in full whose finished record could not be written on a full disk stays
//     flagged incomplete (containers/storage's delete fails on the same write), and
//     removeLeftovers deletes it as below;
//   - the layers it unpacked in full before it failed, which no image uses yet:
//     removeLeftovers deletes them once no other pull runs (one might be building on
//     them), and Open after a crash. A retry downloads them again; CRI-O keeps them for
//     it, but on a full disk they are the space the node needs back.

// pullGuarded runs pull under the pull gate (shared: pulls run together) and returns its
// result; when it failed, it has the layers it left removed (see removeLeftovers).
func (s *Store) pullGuarded(pull func() (Image, error)) (Image, error) {
	s.pullGate.RLock()
	img, err := pull()
	if err != nil {
		s.leftovers.Store(true)
	}
	s.pullGate.RUnlock()
	s.removeLeftovers()
	return img, err
}

// removeLeftovers deletes the layers that failed pulls left (see above), once no pull
// runs: while one does, it returns at once, and that pull calls it again when it ends.
func (s *Store) removeLeftovers() {
	if !s.leftovers.Load() || !s.pullGate.TryLock() {
		return
	}
	defer s.pullGate.Unlock()
	if !s.leftovers.Swap(false) {
		return
	}
	removed, err := s.removeOrphanLayers()
	if len(removed) > 0 {
		s.log.Info("removed the layers of failed pulls", "layers", removed)
	}
	err = errors.Join(err, s.rewriteLayerRecords())
	if err != nil {
		s.log.Warn("layers of failed pulls were not all removed; the next failed pull or start tries again", "err", err)
		s.leftovers.Store(true)
	}
}

// removeOrphanLayers deletes the layers that came from a registry but that no image and
// no container uses (orphanLayers), children first, and returns their IDs. The caller
// holds the pull gate: no pull is half-way through building an image on them.
func (s *Store) removeOrphanLayers() ([]string, error) {
	layers, err := s.st.Layers()
	if err != nil {
		return nil, err
	}
	images, err := s.st.Images()
	if err != nil {
		return nil, err
	}
	containers, err := s.st.Containers()
	if err != nil {
		return nil, err
	}
	parents := make(map[string]string, len(layers))
	for _, l := range layers {
		parents[l.ID] = l.Parent
	}
	var removed []string
	var errs []error
	kept := map[string]bool{} // a layer whose delete failed; its parent stays too
	for _, id := range orphanLayers(layers, images, containers) {
		if kept[id] {
			kept[parents[id]] = true
			continue
		}
		if err := s.st.DeleteLayer(id); err != nil && !errors.Is(err, cstorage.ErrLayerUnknown) {
			errs = append(errs, fmt.Errorf("delete layer %s: %w", id, err))
			kept[parents[id]] = true
			continue
		}
		removed = append(removed, id)
	}
	return removed, errors.Join(errs...)
}

// orphanLayers returns the IDs of the layers that came from a registry (they have a
// digest) but that no image and no container uses, each before its parent.
//
// A layer without a digest is a container's, maybe being made now. A pulled layer may
// still be flagged incomplete: when a full disk fails the write of its finished record,
// containers/storage's own delete of it fails on the same write, and it stays, whole on
// disk, until the store is next loaded. It is an orphan like the others: the caller holds
// the pull gate, so no pull is building it.
func orphanLayers(layers []cstorage.Layer, images []cstorage.Image, containers []cstorage.Container) []string {
	byID := make(map[string]*cstorage.Layer, len(layers))
	for i := range layers {
		byID[layers[i].ID] = &layers[i]
	}
	used := map[string]bool{}
	use := func(id string) {
		for id != "" && !used[id] {
			used[id] = true
			l := byID[id]
			if l == nil {
				return
			}
			id = l.Parent
		}
	}
	for _, img := range images {
		use(img.TopLayer)
		for _, id := range img.MappedTopLayers {
			use(id)
		}
	}
	for _, c := range containers {
		use(c.LayerID)
	}
	children := map[string]int{}
	for _, l := range layers {
		children[l.Parent]++
	}
	// Leaves first, then the parents they leave childless: a layer is used when any
	// child is (use marks every ancestor), so an orphan's children are orphans too.
	var out []string
	var queue []string
	for _, l := range layers {
		if children[l.ID] == 0 {
			queue = append(queue, l.ID)
		}
	}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		l := byID[id]
		if l == nil || used[id] || !(l.CompressedDigest != "" || l.UncompressedDigest != "") {
			continue
		}
		out = append(out, id)
		if children[l.Parent]--; children[l.Parent] == 0 && l.Parent != "" {
			queue = append(queue, l.Parent)
		}
	}
	return out
}

// rewriteLayerRecords has containers/storage write its file of layer records again. When
// a layer's unpacking fails on a full disk, containers/storage deletes the layer but
// cannot write the file without it for want of space: the file keeps a record of a layer
// that is gone (flagged incomplete, which the next start would clean) until the store
// next writes it. The pull's failure freed the space; this writes it now. Any write
// rewrites the whole file: adding no name to an image's top layer (its record is in the
// graph root's file, with the pulled layers'), or, with no image, making and deleting an
// empty layer.
func (s *Store) rewriteLayerRecords() error {
	images, err := s.st.Images()
	if err != nil {
		return err
	}
	for _, img := range images {
		if img.TopLayer == "" {
			continue
		}
		if err := s.st.AddNames(img.TopLayer, nil); err == nil {
			return nil
		}
	}
	l, err := s.st.CreateLayer("", "", nil, "", false, nil)
	if err != nil {
		return fmt.Errorf("rewrite the layer records: %w", err)
	}
	if err := s.st.DeleteLayer(l.ID); err != nil {
		return fmt.Errorf("rewrite the layer records: delete the empty layer %s: %w", l.ID, err)
	}
	return nil
}

// emptyDir removes everything in dir, which stays.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isNoSpace reports whether err says that a file system is full (or a quota reached). An
// error of a re-executed containers/storage helper (which unpacks layers) comes back as
// text only.
func isNoSpace(err error) bool {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, syscall.ENOSPC.Error()) || strings.Contains(msg, syscall.EDQUOT.Error())
}

// diskFull returns the error of a pull of name that failed with err on a full disk: it
// names the store's directories the pull writes to (the image store, when there is one,
// instead of the graph root) and their file systems' room.
func (s *Store) diskFull(name string, err error) error {
	images := s.st.GraphRoot()
	if dir := s.ImageStore(); dir != "" {
		images = dir
	}
	dirs := []string{images, s.sys.BigFilesTemporaryDir}
	var where []string
	seen := map[[2]int32]bool{}
	for _, dir := range dirs {
		var st unix.Statfs_t
		if e := unix.Statfs(dir, &st); e != nil {
			where = append(where, dir)
			continue
		}
		if seen[st.Fsid.Val] {
			continue
		}
		seen[st.Fsid.Val] = true
		where = append(where, fmt.Sprintf("%s (a file system of %s, %s free now)", dir,
			mib(int64(st.Blocks)*st.Bsize), mib(int64(st.Bavail)*st.Bsize)))
	}
	return fmt.Errorf("pull %s: %w: no space left for the image in %s; what the pull wrote is being removed: %v",
		name, ErrDiskFull, strings.Join(where, " and "), err)
}
