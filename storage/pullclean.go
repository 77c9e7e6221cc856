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
//     it at once, or, after a crash, at the next start (its "incomplete" flag);
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

// removeOrphanLayers deletes the layers that came from a registry (they have a digest) but
// that no image and no container uses, children first, and returns their IDs. The caller
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
	orphan := func(l *cstorage.Layer) bool {
		// A layer without a digest was not pulled: a container's, maybe being made now.
		// An incomplete one is containers/storage's to delete.
		return !used[l.ID] && (l.CompressedDigest != "" || l.UncompressedDigest != "") && l.Flags["incomplete"] != true
	}
	var removed []string
	var errs []error
	for {
		children := map[string]int{}
		for _, l := range byID {
			children[l.Parent]++
		}
		progress := false
		for id, l := range byID {
			if children[id] > 0 || !orphan(l) {
				continue
			}
			if err := s.st.DeleteLayer(id); err != nil && !errors.Is(err, cstorage.ErrLayerUnknown) {
				errs = append(errs, fmt.Errorf("delete layer %s: %w", id, err))
				used[id] = true // not again in this pass
				continue
			}
			removed = append(removed, id)
			delete(byID, id)
			progress = true
		}
		if !progress {
			return removed, errors.Join(errs...)
		}
	}
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
// names the store's directories the pull writes to and their file systems' room.
func (s *Store) diskFull(name string, err error) error {
	dirs := []string{s.st.GraphRoot(), s.sys.BigFilesTemporaryDir}
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
