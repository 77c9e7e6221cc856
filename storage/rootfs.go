package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.podman.io/storage/pkg/idtools"
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
// mounted root filesystem is bind-mounted where only that ID can reach it:
//
//	<Options.RootfsDir>/              0711, the host's root: searchable, not listable
//	  <container ID>/                 0700, the container's mapped root (the host IDs its
//	                                  UID and GID 0 map to)
//	    rootfs                        the bind mount, nodev; the path the runtime is given
//
// Options.RootfsDir is the store's own, made at Open; no directory of the host changes
// mode. Other users of the host cannot pass the container's directory, so they can
// neither read nor write the root filesystem by its path (an earlier layout bound it at
// <container ID> itself, where any local user who knew the ID could). The bind mount is
// nodev whatever the driver (a vfs root filesystem is a plain directory, see the package
// comment), as CRI-O and Podman mount root filesystems; not nosuid, as they do not: the
// container runs from this mount, and its image's setuid programs must keep working
// (and no other host user reaches them here).
//
// Old Podman (libpod's UserNSRoot) did the same: a bind mount of the root filesystem under
// a per-container directory of its tmp dir. containers/storage's idmapped mounts change
// who owns the files of the root filesystem, not who may search the directories above it.
//
// The bind mount belongs to StepContainerStorage: its undo (Store.DeleteContainer)
// unmounts it and removes its directories before it deletes the storage container, so a
// crash at any point of the step leaves nothing that recovery does not undo; it undoes
// the earlier layout too, for a step an older daemon journaled. Its path follows from
// the container ID, so the step needs no argument for it.

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

// userRootfsDir is the directory of container id's bind mount, which only the
// container's mapped root may search.
func (s *Store) userRootfsDir(id string) string { return filepath.Join(s.rootfsDir, id) }

// userRootfs is where the root filesystem of container id is bind-mounted when it
// runs in a user namespace.
func (s *Store) userRootfs(id string) string { return filepath.Join(s.userRootfsDir(id), "rootfs") }

// mappedRoot returns the host IDs that the user and group 0 of a container in the user
// namespace of req map to: the owner of its root filesystem's directory. An empty map
// maps every ID to itself.
func mappedRoot(req ContainerRequest) (idtools.IDPair, error) {
	var uids, gids []idtools.IDMap
	if len(req.UIDMap) > 0 {
		uids = idtoolsMaps(req.UIDMap)
	}
	if len(req.GIDMap) > 0 {
		gids = idtoolsMaps(req.GIDMap)
	}
	uid, gid, err := idtools.GetRootUIDGID(uids, gids)
	if err != nil {
		return idtools.IDPair{}, fmt.Errorf("root of the user namespace of %s: %w", req.ID, err)
	}
	return idtools.IDPair{UID: uid, GID: gid}, nil
}

// bindUserRootfs bind-mounts rootfs, the mounted root filesystem of container id, onto
// userRootfs(id), nodev, in a directory of owner's (the container's mapped root), and
// returns that path. A retried step finds what the first attempt made and finishes it.
// ErrRootfsUnreachable when a directory above it is not searchable by others.
func (s *Store) bindUserRootfs(id, rootfs string, owner idtools.IDPair) (string, error) {
	if err := searchableByOthers(s.rootfsDir); err != nil {
		return "", err
	}
	if err := s.makeUserRootfsDir(id, owner); err != nil {
		return "", fmt.Errorf("bind root filesystem of %s: %w", id, err)
	}
	target := s.userRootfs(id)
	if err := os.Mkdir(target, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("bind root filesystem of %s: %w", id, err)
	}
	mounted, err := mount.Mounted(target)
	if err != nil {
		return "", fmt.Errorf("bind root filesystem of %s: %w", id, err)
	}
	if !mounted {
		if err := unix.Mount(rootfs, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return "", fmt.Errorf("bind root filesystem of %s onto %s: %w", id, target, err)
		}
	}
	// Also when mounted already: a crash may have come between the bind and this.
	if err := remountNodev(target); err != nil {
		return "", fmt.Errorf("bind root filesystem of %s: %w", id, err)
	}
	s.log.Debug("root filesystem bound for a user namespace", "id", id, "rootfs", rootfs, "path", target)
	return target, nil
}

// makeUserRootfsDir makes userRootfsDir(id), 0700, and gives it to owner; a retried
// step finds it made, perhaps not given yet. When it is a mount point it is the bind
// mount of the earlier layout, of an older daemon: that is undone first, so that
// nothing here changes a container's root filesystem.
func (s *Store) makeUserRootfsDir(id string, owner idtools.IDPair) error {
	dir := s.userRootfsDir(id)
	err := os.Mkdir(dir, 0o700)
	if errors.Is(err, fs.ErrExist) {
		old, merr := mount.Mounted(dir)
		switch {
		case merr != nil:
			return merr
		case old:
			if err := s.unbindUserRootfs(id); err != nil {
				return err
			}
			err = os.Mkdir(dir, 0o700)
		default:
			err = nil // a retried step's
		}
	}
	if err != nil {
		return err
	}
	return os.Lchown(dir, owner.UID, owner.GID)
}

// remountNodev makes the bind mount at target nodev, keeping the flags it has from its
// source that a remount would clear (a read-only, nosuid or noexec file system stays
// so). A mount that is nodev already is left alone: an overlay root filesystem is (see
// Open), and its bind mount with it.
func remountNodev(target string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", target, err)
	}
	if st.Flags&unix.ST_NODEV != 0 {
		return nil
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_BIND | unix.MS_NODEV)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_RDONLY, unix.MS_RDONLY}, {unix.ST_NOSUID, unix.MS_NOSUID}, {unix.ST_NOEXEC, unix.MS_NOEXEC},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s nodev: %w", target, err)
	}
	return nil
}

// unbindUserRootfs undoes bindUserRootfs: it unmounts userRootfs(id) (as many times
// as it is mounted) and removes it and its directory. It undoes the earlier layout too
// (the bind mount at userRootfsDir(id) itself): that first, so that userRootfs(id)
// then names this layout's mount point, not a path in a container's root filesystem.
// Neither mounted nor there is success.
func (s *Store) unbindUserRootfs(id string) error {
	if s.rootfsDir == "" || len(id) != 64 || !isHex(id) {
		return nil // an image volume, never bound; or not an ID, never a path to unmount
	}
	dir, target := s.userRootfsDir(id), s.userRootfs(id)
	for _, p := range []string{dir, target} {
		if err := unmountAll(p); err != nil {
			return fmt.Errorf("unbind root filesystem of %s: %w", id, err)
		}
	}
	for _, p := range []string{target, dir} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("unbind root filesystem of %s: %w", id, err)
		}
	}
	return nil
}

// unmountAll unmounts path as many times as something is mounted there. Not a mount
// point, or not there, is success.
func unmountAll(path string) error {
	for range maxStackedMounts {
		err := unix.Unmount(path, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // not a mount point (any more), or not there
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", path, err)
		}
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
