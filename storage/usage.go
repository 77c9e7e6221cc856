package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"go.podman.io/storage/pkg/directory"
)

// WritableLayerDir returns the directory that holds what storage container id has
// written over its image: the overlay driver's upper directory of the container's
// layer, or for vfs (which copies the image into each layer) the layer's directory.
// It does not change while the container exists, so callers may keep it.
// ErrContainerNotFound for an unknown id.
func (s *Store) WritableLayerDir(id string) (string, error) {
	c, err := s.container(id)
	if err != nil {
		return "", err
	}
	driver, err := s.st.GraphDriver()
	if err != nil {
		return "", fmt.Errorf("writable layer of %s: %w", id, err)
	}
	md, err := driver.Metadata(c.LayerID)
	if err != nil {
		return "", fmt.Errorf("writable layer of %s: %w", id, err)
	}
	if dir := md["UpperDir"]; dir != "" {
		return dir, nil
	}
	if s.Driver() == DriverVFS {
		return filepath.Join(s.st.GraphRoot(), "vfs", "dir", c.LayerID), nil
	}
	return "", fmt.Errorf("writable layer of %s: driver %s names no upper directory", id, s.Driver())
}

// GraphRoot is the graph root, where containers' writable layers live: the directory
// ImageFsInfo reports as the containers' file system, and as the images' too unless an
// image store holds them (ImageStore).
func (s *Store) GraphRoot() string { return s.st.GraphRoot() }

// DirUsage measures a directory tree (containers/storage's directory.Usage): the bytes of
// its files and the inodes it uses, a hard-linked inode once. Its cost grows with the
// number of files under dir. A directory that does not exist measures zero.
func DirUsage(dir string) (FsUsage, error) {
	u, err := directory.Usage(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return FsUsage{Mountpoint: dir}, nil
	}
	if err != nil {
		return FsUsage{}, fmt.Errorf("measure %s: %w", dir, err)
	}
	return FsUsage{Mountpoint: dir, UsedBytes: uint64(max(u.Size, 0)), InodesUsed: uint64(max(u.InodeCount, 0))}, nil
}
