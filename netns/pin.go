package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/crijournal/crijournal/layout"
)

// ErrInvalid is returned when a sandbox ID, namespace kind, interface name,
// CNI argument or pin path is not acceptable. Nothing is touched when it is
// returned.
var ErrInvalid = errors.New("invalid argument")

// Kind is a kind of namespace that can be pinned. Its string is stable: it is
// part of the pin path and may be stored by callers.
type Kind string

// The kinds of namespace a sandbox pins. Pin makes Net, IPC and UTS pins;
// a PID pin is made by StartPause only, together with the process that is
// the namespace's init.
const (
	Net Kind = "net"
	IPC Kind = "ipc"
	UTS Kind = "uts"
	PID Kind = "pid"
)

// cloneFlag returns the unshare(2) flag of k, or 0 if k is not a known kind.
func (k Kind) cloneFlag() int {
	switch k {
	case Net:
		return unix.CLONE_NEWNET
	case IPC:
		return unix.CLONE_NEWIPC
	case UTS:
		return unix.CLONE_NEWUTS
	case PID:
		return unix.CLONE_NEWPID
	case User:
		return unix.CLONE_NEWUSER
	}
	return 0
}

// Paths maps each pinned kind to the path of its pin.
type Paths map[Kind]string

// idPattern is what a sandbox ID may look like: 64 lowercase hex digits in
// practice; anything else that is a safe single path element (it starts with
// a letter or digit, so it is never "." or "..", and holds no '/') is
// accepted too. The CNI spec accepts the same alphabet for container IDs.
var idPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

// validateID returns an error wrapping ErrInvalid unless id can be used as a
// file name and as a CNI container ID.
func validateID(id string) error {
	if !idPattern.MatchString(id) || strings.Contains(id, "..") {
		return fmt.Errorf("sandbox ID %q: %w: want 1-128 characters [a-zA-Z0-9_.-] starting with a letter or digit", id, ErrInvalid)
	}
	return nil
}

// PinPath returns the path at which Pin (or StartPause, for PID) pins the
// namespace of the given kind for sandboxID under dir:
// <dir>/<kind>ns/<sandboxID>. It returns "" if kind is unknown or sandboxID is
// not valid, so that no path is ever built from an unvalidated string.
func PinPath(dir string, kind Kind, sandboxID string) string {
	if kind.cloneFlag() == 0 || validateID(sandboxID) != nil {
		return ""
	}
	return layout.PinPath(dir, string(kind), sandboxID)
}

// Pin creates new namespaces of the given kinds and pins each with a bind
// mount at PinPath(dir, kind, sandboxID). The parent directories are created
// with mode 0755, the pin files with mode 0444. If UTS is among kinds and
// hostname is not empty, the new UTS namespace gets that host name; without
// UTS the host name is ignored (the host's own name is never changed). The
// loopback interface of a new network namespace is brought up.
//
// A pin that already exists is an error (wrapping fs.ErrExist) and is left
// alone. If Pin fails part way, it removes what it pinned itself before
// returning the error, so a failed Pin leaves nothing behind. Pin does not wait
// on anything slow; ctx is only checked before it starts.
func Pin(ctx context.Context, dir, sandboxID string, kinds []Kind, hostname string) (Paths, error) {
	if err := validateID(sandboxID); err != nil {
		return nil, fmt.Errorf("pin namespaces: %w", err)
	}
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("pin namespaces of %s: directory %q: %w: not an absolute path", sandboxID, dir, ErrInvalid)
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("pin namespaces of %s: %w: no namespace kinds", sandboxID, ErrInvalid)
	}
	flags := 0
	paths := make(Paths, len(kinds))
	for _, k := range kinds {
		f := k.cloneFlag()
		if f == 0 {
			return nil, fmt.Errorf("pin namespaces of %s: kind %q: %w: unknown kind", sandboxID, k, ErrInvalid)
		}
		if k == PID {
			// unshare(CLONE_NEWPID) does not move the caller: /proc/thread-self/ns/pid
			// would pin the host's namespace. StartPause pins it with its init.
			return nil, fmt.Errorf("pin namespaces of %s: kind %q: %w: a pid namespace is pinned by StartPause", sandboxID, k, ErrInvalid)
		}
		if k == User {
			// A multi-threaded process cannot unshare a user namespace.
			return nil, fmt.Errorf("pin namespaces of %s: kind %q: %w: a user namespace is pinned by PinUser", sandboxID, k, ErrInvalid)
		}
		if flags&f != 0 {
			return nil, fmt.Errorf("pin namespaces of %s: kind %q: %w: listed twice", sandboxID, k, ErrInvalid)
		}
		flags |= f
		paths[k] = PinPath(dir, k, sandboxID)
	}
	if flags&unix.CLONE_NEWUTS == 0 {
		hostname = ""
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pin namespaces of %s: %w", sandboxID, err)
	}
	for _, k := range kinds {
		if err := os.MkdirAll(filepath.Dir(paths[k]), 0o755); err != nil {
			return nil, fmt.Errorf("pin namespaces of %s: %w", sandboxID, err)
		}
	}

	// Namespaces belong to threads, not processes: unshare(2) moves only the
	// calling OS thread into the new namespaces. The work therefore runs on
	// a thread that is thrown away afterwards; see onDisposableThread.
	var res struct {
		created []string
		err     error
	}
	onDisposableThread(func() {
		res.created, res.err = pinOnThisThread(flags, kinds, paths, hostname)
	})
	if res.err == nil {
		return paths, nil
	}
	// Undo what this call created, newest first. The undo must run even if
	// ctx is done.
	errs := []error{fmt.Errorf("pin namespaces of %s: %w", sandboxID, res.err)}
	undoCtx := context.WithoutCancel(ctx)
	for i := len(res.created) - 1; i >= 0; i-- {
		if err := Unpin(undoCtx, res.created[i]); err != nil {
			errs = append(errs, fmt.Errorf("undo: %w", err))
		}
	}
	return nil, errors.Join(errs...)
}

// onDisposableThread runs fn on a goroutine locked to an OS thread that is
// not the process's main thread, and lets that goroutine return WITHOUT
// runtime.UnlockOSThread: fn leaves the thread in namespaces that are not the
// daemon's, and the Go runtime terminates a thread whose locked goroutine
// exits, instead of handing a tainted thread to other goroutines (which would
// then open sockets or read the host name in a sandbox's namespaces).
//
// The main thread is the exception: the runtime cannot terminate it and
// wedges it instead, so a tainted main thread would stay in the sandbox's
// namespaces for the life of the daemon, keeping the network namespace (and
// its interfaces) alive after Unpin and making /proc/<pid>/ns/* and
// /proc/net show the sandbox's. When the goroutine finds itself on the main
// thread, it keeps that thread locked (so no other goroutine can be scheduled
// on it), runs fn through a fresh goroutine, which therefore lands on another
// thread, and then unlocks the main thread untouched.
func onDisposableThread(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			onDisposableThread(fn)
			runtime.UnlockOSThread()
			return
		}
		fn()
		// No UnlockOSThread: this thread dies with the goroutine.
	}()
	<-done
}

// enter moves the calling thread into the namespace of kind k pinned at path
// (setns(2)); a path that is not a namespace of that kind is an error.
func enter(path string, k Kind) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, k.cloneFlag()); err != nil {
		return fmt.Errorf("join %s: %w", path, err)
	}
	return nil
}

// pinOnThisThread does the work of Pin on a locked thread that will die
// afterwards. It returns the pin files it created, mounted or
// not, so the caller can remove them on error.
func pinOnThisThread(flags int, kinds []Kind, paths Paths, hostname string) ([]string, error) {
	if err := unix.Unshare(flags); err != nil {
		return nil, fmt.Errorf("unshare: %w", err)
	}
	if hostname != "" {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return nil, fmt.Errorf("set host name %q: %w", hostname, err)
		}
	}
	if flags&unix.CLONE_NEWNET != 0 {
		if err := loopbackUp(); err != nil {
			return nil, err
		}
	}
	return pinFrom("/proc/thread-self/ns/", kinds, paths)
}

// pinFrom bind-mounts the namespaces of the given kinds found in nsDir (a
// /proc/.../ns/ directory, with its slash) on paths, and returns the pin files
// it created.
func pinFrom(nsDir string, kinds []Kind, paths Paths) ([]string, error) {
	var created []string
	for _, k := range kinds {
		p := paths[k]
		f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
		if err != nil {
			return created, fmt.Errorf("create pin file: %w", err)
		}
		created = append(created, p)
		if err := f.Close(); err != nil {
			return created, fmt.Errorf("create pin file: %w", err)
		}
		src := nsDir + string(k)
		if err := unix.Mount(src, p, "", unix.MS_BIND, ""); err != nil {
			return created, fmt.Errorf("bind mount %s on %s: %w", src, p, err)
		}
	}
	return created, nil
}

// loopbackUp sets lo up in the network namespace of the calling thread.
func loopbackUp() error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("bring up lo: open netlink: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	if err := h.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	return nil
}

// maxStackedMounts bounds how many mounts Unpin takes off one pin path; Pin
// makes one, anything beyond a few is not ours to keep peeling.
const maxStackedMounts = 8

// Unpin removes the pin at path: it detaches the mount (MNT_DETACH, so a
// namespace still in use by a process stays alive for that process only) and
// removes the file. It is idempotent: a path that is not a mount point, or
// does not exist, is success. path must look like a pin (an absolute, clean
// path <dir>/{net,ipc,uts,pid,user}ns/<sandboxID>); anything else is refused with
// ErrInvalid, so a corrupted undo record cannot remove arbitrary files.
func Unpin(ctx context.Context, path string) error {
	if err := checkPinPath(path); err != nil {
		return fmt.Errorf("unpin: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	for i := 0; ; i++ {
		err := unix.Unmount(path, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not (or no longer) a mount point, or no file at all
		}
		if err != nil {
			return fmt.Errorf("unpin %s: unmount: %w", path, err)
		}
		if i == maxStackedMounts {
			return fmt.Errorf("unpin %s: still mounted after %d unmounts", path, i+1)
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("unpin %s: %w", path, err)
	}
	return nil
}

// checkPinPath returns an error wrapping ErrInvalid unless path has the shape
// of a path returned by PinPath.
func checkPinPath(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("pin path %q: %w: not an absolute clean path", path, ErrInvalid)
	}
	switch filepath.Base(filepath.Dir(path)) {
	case string(Net) + "ns", string(IPC) + "ns", string(UTS) + "ns", string(PID) + "ns", string(User) + "ns":
	default:
		return fmt.Errorf("pin path %q: %w: not in a netns, ipcns, utsns, pidns or userns directory", path, ErrInvalid)
	}
	if err := validateID(filepath.Base(path)); err != nil {
		return fmt.Errorf("pin path %q: %w", path, err)
	}
	return nil
}

// IsPinned reports whether path exists and is a namespace file (an nsfs
// mount, as Pin makes). It is false for an empty pin file left unmounted.
func IsPinned(path string) bool {
	return isNamespace(path)
}

// isNamespace reports whether path resolves to a file on nsfs.
func isNamespace(path string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return false
	}
	return st.Type == unix.NSFS_MAGIC
}
