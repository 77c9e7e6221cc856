package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.podman.io/storage/pkg/mount"
	"golang.org/x/sys/unix"
)

// Root filesystems of containers in a user namespace.
//
// The runtime's init reaches a container's root filesystem by path, as the root of the
// container's user namespace: a host ID that has no rights on the store's directories
// (the graph root and the driver's layer directories are 0700, owned by the host's
// root). Rather than open those directories, and every directory above them, to all
// users (crijournal used to chmod o+x each of them up to /, and never undid it), the
// mounted root filesystem is bind-mounted onto <Options.RootfsDir>/<container ID>: a
// directory of the daemon's own, made 0711 (searchable, not listable) at Open, and
// the runtime is given that path. No directory of the host changes mode.
//
// Old Podman (libpod's UserNSRoot) did the same: a bind mount of the root filesystem under
// a per-container directory of its tmp dir. containers/storage's idmapped mounts change
// who owns the files of the root filesystem, not who may search the directories above it.
//
// The bind mount belongs to StepContainerStorage: its undo (Store.DeleteContainer)
// unmounts it and removes its directory before it deletes the storage container, so a
// crash at any point of the step leaves nothing that recovery does not undo. Its path
// follows from the container ID, so the step needs no argument for it.

// ErrRootfsUnreachable is returned, wrapped with the directory at fault, when a
// container in a user namespace cannot be given a root filesystem its runtime can
// reach: a directory above Options.RootfsDir is not searchable by others (o+x).
// crijournal never changes the modes of those directories: make them searchable, or
// choose a run_root (storage_run_root) under directories that are.
var ErrRootfsUnreachable = errors.New("root filesystem not reachable from a user namespace")

// prepareRootfsDir creates the directory of user-namespace root filesystems, mode
// 0711 (with any parent it lacks, also 0711), and gives it that mode if it had
// another: the directory is the store's own. Its existing parents are left alone.
func prepareRootfsDir(dir string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("user namespace root filesystems: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return fmt.Errorf("user namespace root filesystems: %w", err)
	}
	return nil
}

// userRootfs is where the root filesystem of container id is bind-mounted when it
// runs in a user namespace.
func (s *Store) userRootfs(id string) string { return filepath.Join(s.rootfsDir, id) }

// bindUserRootfs bind-mounts rootfs, the mounted root filesystem of container id, onto
// userRootfs(id) and returns that path. When it is already mounted there (a retried
// step) it is returned as is. ErrRootfsUnreachable when a directory above it is not
// searchable by others.
func (s *Store) bindUserRootfs(id, rootfs string) (string, error) {
	if err := searchableByOthers(s.rootfsDir); err != nil {
		return "", err
	}
	target := s.userRootfs(id)
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("bind root filesystem of %s: %w", id, err)
	}
	mounted, err := mount.Mounted(target)
	if err != nil {
		return "", fmt.Errorf("bind root filesystem of %s: %w", id, err)
	}
	if mounted {
		return target, nil
	}
	if err := unix.Mount(rootfs, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return "", fmt.Errorf("bind root filesystem of %s onto %s: %w", id, target, err)
	}
	s.log.Debug("root filesystem bound for a user namespace", "id", id, "rootfs", rootfs, "path", target)
	return target, nil
}

// unbindUserRootfs undoes bindUserRootfs: it unmounts userRootfs(id) (as many times
// as it is mounted) and removes the directory. Neither mounted nor there is success.
func (s *Store) unbindUserRootfs(id string) error {
	if s.rootfsDir == "" || len(id) != 64 || !isHex(id) {
		return nil // an image volume, never bound; or not an ID, never a path to unmount
	}
	target := s.userRootfs(id)
	for range maxStackedMounts {
		err := unix.Unmount(target, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not a mount point (any more), or not there
		}
		if err != nil {
			return fmt.Errorf("unbind root filesystem of %s: %w", id, err)
		}
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unbind root filesystem of %s: %w", id, err)
	}
	return nil
}

// maxStackedMounts bounds the unmounts of one path: more mounts stacked there than
// this is not the bind mount of a step.
const maxStackedMounts = 16

// searchableByOthers returns ErrRootfsUnreachable, naming the directory, unless dir
// and every directory above it may be searched by any user (o+x).
func searchableByOthers(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrRootfsUnreachable, err)
		}
		if st.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%w: %s has mode %04o, which does not let other users search it",
				ErrRootfsUnreachable, d, st.Mode().Perm())
		}
		if d == "/" || d == "." {
			return nil
		}
	}
}
