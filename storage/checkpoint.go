package storage

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"go.podman.io/storage/pkg/archive"
)

// RootfsDiff writes to w, as an uncompressed tar, what the processes of container id
// added to or changed in its root filesystem, read from rootfs, where it is mounted, and
// returns the paths they deleted: the rootfs-diff.tar and deleted.files of a checkpoint
// archive, in the form CRI-O and Podman write them (paths in the tar relative to the
// root; a changed directory is not included whole, only what changed in it). Paths for
// which skip returns true (the container's mount points, which the runtime made) are
// left out, both from the tar and from the deleted paths. The changes come from the
// storage's comparison of the container's layer with its image (for overlay, its upper
// directory).
func (s *Store) RootfsDiff(ctx context.Context, id, rootfs string, w io.Writer, skip func(path string) bool) (deleted []string, err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.container(id)
	if err != nil {
		return nil, err
	}
	changes, err := s.st.Changes("", c.LayerID)
	if err != nil {
		return nil, fmt.Errorf("changes of the root filesystem of %s: %w", id, err)
	}
	var include []string
	for _, ch := range changes {
		if skip != nil && skip(ch.Path) {
			continue
		}
		switch ch.Kind {
		case archive.ChangeAdd:
			include = append(include, ch.Path)
		case archive.ChangeDelete:
			deleted = append(deleted, ch.Path)
		case archive.ChangeModify:
			// A directory is modified when something in it changed, which has a change
			// of its own; the directory whole would take what did not.
			fi, err := os.Lstat(filepath.Join(rootfs, ch.Path))
			if err == nil && !fi.IsDir() {
				include = append(include, ch.Path)
			}
		}
	}
	if len(include) == 0 {
		// An empty archive: two zero blocks.
		_, err := w.Write(make([]byte, 1024))
		return deleted, err
	}
	tar, err := archive.TarWithOptions(rootfs, &archive.TarOptions{
		Compression: archive.Uncompressed, IncludeSourceDir: true, IncludeFiles: include,
	})
	if err != nil {
		return nil, fmt.Errorf("root filesystem diff of %s: %w", id, err)
	}
	defer tar.Close()
	if _, err := io.Copy(w, readerCtx{ctx, tar}); err != nil {
		return nil, fmt.Errorf("root filesystem diff of %s: %w", id, err)
	}
	return deleted, nil
}

// readerCtx is a reader that fails once ctx has ended.
type readerCtx struct {
	ctx context.Context
	r   io.Reader
}

func (r readerCtx) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}
