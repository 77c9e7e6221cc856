package oci

import (
	"errors"
	"fmt"
	"os"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	"golang.org/x/sys/unix"
)

// openRootFile opens name, a regular file inside the root filesystem root, for reading,
// as if root were "/": absolute links and ".." cannot leave it. It is how the daemon
// reads any file of an image, whose content the daemon does not trust. The file is
// first opened with O_PATH, which opens nothing behind it, and must be a regular file:
// a named pipe would block the open (and the request, with its pod's gate) for good,
// and a device node would make the daemon open the host's device. Anything else is
// refused (ErrInvalidSpec), naming the file and its type. Only then is it reopened
// (through /proc, without following its path again) non-blocking and read-only, and
// the reopened file must be the same inode. A missing file gives (nil, nil).
func openRootFile(root, name string) (*os.File, error) {
	handle, err := pathrs.OpenInRoot(root, name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open %s in %s: %w", name, root, err)
	}
	defer handle.Close()
	var want unix.Stat_t
	if err := unix.Fstat(int(handle.Fd()), &want); err != nil {
		return nil, fmt.Errorf("stat %s in %s: %w", name, root, err)
	}
	if want.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, invalid("the image's /%s is %s, not a regular file", name, fileType(want.Mode))
	}
	f, err := pathrs.Reopen(handle, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("reopen %s in %s: %w", name, root, err)
	}
	var got unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &got); err != nil {
		f.Close()
		return nil, fmt.Errorf("stat %s in %s: %w", name, root, err)
	}
	if got.Dev != want.Dev || got.Ino != want.Ino || got.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("reopen %s in %s: the reopened file is not the one looked up", name, root)
	}
	return f, nil
}

// fileType names the type of a file of mode m (stat's st_mode), for errors.
func fileType(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a named pipe (FIFO)"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFLNK:
		return "a symbolic link"
	}
	return fmt.Sprintf("of unknown type %#o", m&unix.S_IFMT)
}
