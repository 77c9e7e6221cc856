// Package layout owns where a crijournal node keeps things: every path that the daemon,
// `crijournal inspect --leaks` and the tests derive from the configuration (the journal
// file, the storage roots, each runtime handler's state directories, the pinned
// namespaces, the pods' files, libcni's cache) is a method of Node, so that no caller
// joins paths of the node by itself.
//
// It imports nothing of the project: config builds a Node (config.Config.Layout) and the
// resource packages take their paths from it.
package layout

import (
	"crypto/sha256"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
)

// Node is the layout of one crijournal node: the path keys of its configuration, with
// "" for those whose default is derived from others.
type Node struct {
	Root           string // root: state that outlives a reboot
	RunRoot        string // run_root: state that does not
	Socket         string // socket: the CRI socket
	NamespaceDir   string // namespace_dir: pinned namespaces
	JournalPath    string // journal_path ("" = <root>/journal.db)
	StorageRoot    string // storage_root ("" = <root>/storage)
	StorageRunRoot string // storage_run_root ("" = <run_root>/storage)
	CNIConfDir     string // cni_conf_dir: the CNI networks (bridges, IPAM directories)
	CNICacheDir    string // cni_cache_dir ("" = libcni's /var/lib/cni)
	// RuntimeRoots is each runtime handler's configured root ("" = <run_root>/<handler>).
	RuntimeRoots map[string]string
}

// JournalFile is the bbolt journal: journal_path, or <root>/journal.db.
func (n Node) JournalFile() string {
	if n.JournalPath != "" {
		return n.JournalPath
	}
	return filepath.Join(n.Root, "journal.db")
}

// StorageRootDir is containers/storage's graph root: storage_root, or <root>/storage.
func (n Node) StorageRootDir() string {
	if n.StorageRoot != "" {
		return n.StorageRoot
	}
	return filepath.Join(n.Root, "storage")
}

// StorageRunRootDir is containers/storage's run root: storage_run_root, or
// <run_root>/storage. With the transient store it holds the containers' records.
func (n Node) StorageRunRootDir() string {
	if n.StorageRunRoot != "" {
		return n.StorageRunRoot
	}
	return filepath.Join(n.RunRoot, "storage")
}

// UsernsRootfsDir is where the root filesystems of containers in a user namespace are
// bind-mounted, one directory per container: <storage run root>/rootfs.
func (n Node) UsernsRootfsDir() string { return filepath.Join(n.StorageRunRootDir(), "rootfs") }

// ImageCacheDir is the image library's caches and generated configuration (blob info
// cache, registries.conf, temporary files of pulls): <root>/image-cache. Nothing is ever
// written under /var/lib/containers.
func (n Node) ImageCacheDir() string { return filepath.Join(n.Root, "image-cache") }

// InspectSocket is the socket of the daemon's inspection server: inspect.sock beside the
// CRI socket.
func (n Node) InspectSocket() string { return InspectSocketFor(n.Socket) }

// InspectSocketFor is the inspection socket of a daemon serving the CRI on criSocket.
func InspectSocketFor(criSocket string) string {
	return filepath.Join(filepath.Dir(criSocket), "inspect.sock")
}

// Handlers lists the configured runtime handlers, sorted.
func (n Node) Handlers() []string { return slices.Sorted(maps.Keys(n.RuntimeRoots)) }

// RuntimeRoot is the OCI runtime's state directory (runc --root) of a handler: its
// configured root, or <run_root>/<handler>. The handler need not exist.
func (n Node) RuntimeRoot(handler string) string {
	if r := n.RuntimeRoots[handler]; r != "" {
		return r
	}
	return filepath.Join(n.RunRoot, handler)
}

// ConmonState is where conmon keeps a handler's files (see Node.StateDir).
func (n Node) ConmonState(handler string) ConmonState {
	return ConmonState(StateDirFor(n.RunRoot, handler))
}

// MaxStateDirLen is the longest conmon state directory: conmon binds
// <dir>/attach/<64-hex id>/attach, which must fit a unix socket address (107 bytes).
const MaxStateDirLen = 107 - len("/attach/") - 64 - len("/attach")

// ShortStateDirPrefix begins the conmon state directories moved to /run for a run root
// too long for MaxStateDirLen.
const ShortStateDirPrefix = "/run/cjo-"

// StateDirFor is where a daemon whose run_root is runRoot keeps conmon's state for a
// runtime handler (exit files, pid files, attach sockets): <run_root>/oci-<handler>. It
// survives a daemon restart (not a reboot, which ends the containers too). When that
// path is longer than MaxStateDirLen, conmon's attach socket paths would not fit a
// socket address (conmon truncates them silently), so a short directory under /run,
// named by a digest of the long path, is used instead.
func StateDirFor(runRoot, handler string) string {
	dir := filepath.Join(runRoot, "oci-"+handler)
	if len(dir) <= MaxStateDirLen {
		return dir
	}
	sum := sha256.Sum256([]byte(dir))
	return fmt.Sprintf("%s%x", ShortStateDirPrefix, sum[:4])
}

// ConmonState is a handler's conmon state directory: one directory per container
// (containers/<id>: conmon's pid file, the bundle's config.json, its log of runc), exit
// files (exits/<id>) and attach sockets (attach/<id>/attach).
type ConmonState string

// Dir is the state directory itself.
func (s ConmonState) Dir() string { return string(s) }

// ContainersDir holds one directory per container.
func (s ConmonState) ContainersDir() string { return filepath.Join(string(s), "containers") }

// Container is the directory of one container's conmon files.
func (s ConmonState) Container(id string) string { return filepath.Join(s.ContainersDir(), id) }

// ExitsDir holds the exit files conmon writes when a container's process exits.
func (s ConmonState) ExitsDir() string { return filepath.Join(string(s), "exits") }

// AttachDir holds one directory per container with its attach socket.
func (s ConmonState) AttachDir() string { return filepath.Join(string(s), "attach") }

// Subdirs are the directories of ConmonState that hold an entry per container.
func (s ConmonState) Subdirs() []string {
	return []string{s.ContainersDir(), s.ExitsDir(), s.AttachDir()}
}

// NamespaceKinds are the kinds of namespaces a sandbox may pin, as they name the
// directories under namespace_dir (netns, ipcns, ...).
var NamespaceKinds = []string{"net", "ipc", "uts", "pid", "user"}

// PinDir is the directory of the pins of one kind of namespace ("net", "ipc", ...):
// <namespace_dir>/<kind>ns.
func (n Node) PinDir(kind string) string { return filepath.Join(n.NamespaceDir, kind+"ns") }

// Pin is where a sandbox's namespace of a kind is pinned.
func (n Node) Pin(kind, sandboxID string) string { return PinPath(n.NamespaceDir, kind, sandboxID) }

// PinPath is Pin for a namespace directory dir.
func PinPath(dir, kind, sandboxID string) string {
	return filepath.Join(dir, kind+"ns", sandboxID)
}

// PodFilesDir holds one directory per sandbox with its files (resolv.conf, hostname, the
// mount point of its /dev/shm): <run_root>/sandboxes.
func (n Node) PodFilesDir() string { return filepath.Join(n.RunRoot, "sandboxes") }

// PodDir is the directory of one sandbox's files.
func (n Node) PodDir(sandboxID string) string { return PodDirIn(n.PodFilesDir(), sandboxID) }

// PodDirIn is PodDir for a directory of pods' files filesDir.
func PodDirIn(filesDir, sandboxID string) string { return filepath.Join(filesDir, sandboxID) }

// DefaultCNICacheDir is libcni's own cache directory, used when cni_cache_dir is empty.
const DefaultCNICacheDir = "/var/lib/cni"

// CNICache is libcni's cache directory: cni_cache_dir, or libcni's /var/lib/cni.
func (n Node) CNICache() string {
	if n.CNICacheDir != "" {
		return n.CNICacheDir
	}
	return DefaultCNICacheDir
}

// DefaultHostLocalDataDir is where the host-local IPAM plugin keeps its allocations, one
// directory per network, when its configuration names no dataDir.
const DefaultHostLocalDataDir = "/var/lib/cni/networks"

// CNIResultsDir holds libcni's cached ADD results, one file per attachment:
// <cache>/results/<network>-<sandbox ID>-<interface>.
func (n Node) CNIResultsDir() string { return filepath.Join(n.CNICache(), "results") }

// CNIResult is the cached ADD result of a sandbox's attachment to a network.
func (n Node) CNIResult(network, sandboxID, ifName string) string {
	return filepath.Join(n.CNIResultsDir(), network+"-"+sandboxID+"-"+ifName)
}
