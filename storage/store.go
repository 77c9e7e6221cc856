package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"
	cstorage "go.podman.io/storage"
	storagetypes "go.podman.io/storage/types"

	"github.com/crijournal/crijournal/storage/pinned"
)

// Errors that callers branch on. Each is wrapped with the reference or ID it is about.
var (
	// ErrImageNotFound is returned when no image in the store matches a reference or ID
	// (gRPC NotFound).
	ErrImageNotFound = errors.New("image not found")
	// ErrImageInUse is returned by RemoveImage while a storage container uses the image
	// (gRPC FailedPrecondition).
	ErrImageInUse = errors.New("image is in use by a container")
	// ErrInvalidReference is returned when an image reference cannot be parsed
	// (gRPC InvalidArgument).
	ErrInvalidReference = errors.New("invalid image reference")
	// ErrContainerNotFound is returned by Mount for an ID that names no
	// storage container.
	ErrContainerNotFound = errors.New("storage container not found")
	// ErrRegistryBlocked is returned by PullImage when the registries configuration blocks
	// the registry of the image (gRPC PermissionDenied).
	ErrRegistryBlocked = errors.New("registry blocked")
	// ErrRejectedByPolicy is returned by PullImage when the signature policy rejects the
	// image (gRPC PermissionDenied).
	ErrRejectedByPolicy = errors.New("rejected by the signature policy")
	// ErrAmbiguousShortName is returned by PullImage for a short name that several
	// unqualified-search registries could serve while short-name-mode is "enforcing"
	// (gRPC InvalidArgument).
	ErrAmbiguousShortName = errors.New("ambiguous short name")
)

// Drivers that Open accepts in Options.Driver.
const (
	DriverOverlay = "overlay"
	DriverVFS     = "vfs"
)

// Options configure Open.
type Options struct {
	// Root is the graph root: layers, images, containers and their persistent
	// directories. Required, absolute.
	Root string
	// RunRoot holds state that must not outlive a reboot (mount counts, per-container run
	// directories). Required, absolute.
	RunRoot string
	// Driver is the graph driver: "overlay", "vfs", or "" to use what the graph root
	// already holds, else overlay when the kernel and the file system support it, else
	// vfs. vfs copies every layer in full: it works everywhere but is slow and large.
	Driver string
	// Registries are mirrors added on top of the registries configuration (see Registry).
	// Default: none.
	Registries []Registry
	// RegistriesConf and RegistriesConfDir are the node's containers-registries.conf(5)
	// and its drop-in directory (mirrors, blocked registries, insecure registries,
	// short-name aliases and mode, unqualified-search-registries). Either may be empty or
	// name something missing: then it configures nothing. Read once, at Open.
	RegistriesConf, RegistriesConfDir string
	// SignaturePolicy is the containers-policy.json(5) file every pull must satisfy. It is
	// read at every pull, so edits apply to the next one; a pull fails while it is missing
	// or invalid. Empty means a built-in policy that accepts every image
	// (insecureAcceptAnything), for tests.
	SignaturePolicy string
	// AuthFile is the node-wide registry credentials file (containers-auth.json(5)), read
	// when a pull's own credentials do not apply; it may be missing. Default:
	// <ImageCacheDir>/auth.json.
	AuthFile string
	// RootfsDir is where the root filesystems of containers in a user namespace are
	// bind-mounted, one directory per container that only its mapped root may search,
	// for their runtime to reach (see rootfs.go). Open creates it 0711; the directories
	// above it must let every user search them (o+x), and are never changed. Default:
	// <RunRoot>/rootfs. Absolute when set.
	RootfsDir string
	// ImageCacheDir holds containers/image's caches and the configuration generated for it
	// (see the package comment). Default: <Root>/image-cache. Absolute when set.
	ImageCacheDir string
	// TransientStore keeps the records of containers and of their layers in RunRoot,
	// written without fsync, and mounts their root filesystems with overlay's volatile
	// option (containers/storage's transient store mode): no container outlives a
	// reboot on a CRI node, and a container's creation and removal then wait for no
	// disk flush. Images stay in Root, durable. After a reboot the layers' directories
	// are left in Root with no record naming them; Open removes them. Open without it
	// fails while RunRoot still records containers made with it: such a store would not
	// see them.
	TransientStore bool
	// ImageStore, when set, is where pulled images go, layers and records (containers/
	// storage's image store), apart from Root, which keeps the containers and their
	// writable layers: a split image file system (see Usage). Images pulled into Root
	// before are still used. Open refuses a change of it while containers made with the
	// previous one are recorded (see imagestore.go). Absolute, not Root. Default: "", no
	// split.
	ImageStore string
	// PinnedImages are the pinned_images patterns (package pinned): the images whose
	// Image.Pinned is true. Default: none.
	PinnedImages []string
	// PullProgressTimeout cancels a pull that has waited on the registry and received
	// nothing for this long (see progressWatch); the pull fails with ErrPullNoProgress.
	// 0: no timeout (config.Config.ImagePullProgressTimeout, default 5m).
	PullProgressTimeout time.Duration
	// Logger receives the store's logs; nil means slog.Default().
	Logger *slog.Logger
}

// Store is an open image and root file system store. It is safe for concurrent use.
type Store struct {
	st  cstorage.Store
	sys *types.SystemContext // base context of every pull; copied, never changed
	log *slog.Logger

	policyPath                        string // Options.SignaturePolicy
	registriesConf, registriesConfDir string // the node's files, for messages

	mountMu sync.Mutex // serializes Mount and Unmount, to make Mount idempotent

	rootfsDir string // Options.RootfsDir: user-namespace root filesystems' bind mounts

	pinned pinned.Patterns // Options.PinnedImages

	configMu sync.Mutex
	configs  map[string]ImageConfig // by image ID; an ID's config never changes

	pullProgressTimeout time.Duration // Options.PullProgressTimeout
	flights             pullFlights   // pulls under way, shared by their callers
	// pullGate is held shared by every pull, and exclusively by removeLeftovers, which
	// must not delete layers a pull is building an image on.
	pullGate  sync.RWMutex
	leftovers atomic.Bool // a pull failed: removeLeftovers has work

	fsMu   sync.Mutex          // one FsInfo at a time
	fsKept map[string]dirUsage // FsInfo's figures of the directories it keeps (stableDirs), by directory
}

// Open opens (creating it if needed) the store described by opts.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	pins, err := pinned.Parse(opts.PinnedImages)
	if err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	cacheDir := opts.ImageCacheDir
	if cacheDir == "" {
		cacheDir = filepath.Join(opts.Root, "image-cache")
	}
	sys, err := prepareImageDirs(cacheDir, opts)
	if err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	if opts.SignaturePolicy != "" {
		// Checked now so that a broken policy shows at start; read again at every pull.
		if _, err := signature.NewPolicyFromFile(opts.SignaturePolicy); errors.Is(err, fs.ErrNotExist) {
			log.Warn("no signature policy: every pull fails until it exists", "signature_policy", opts.SignaturePolicy)
		} else if err != nil {
			return nil, fmt.Errorf("open storage: signature policy %s: %w", opts.SignaturePolicy, err)
		}
	}

	rootfsDir := opts.RootfsDir
	if rootfsDir == "" {
		rootfsDir = filepath.Join(opts.RunRoot, "rootfs")
	}
	// Before containers/storage makes the run root (0700): a run root made here is
	// searchable, so the default RootfsDir can be reached.
	if err := prepareRootfsDir(rootfsDir); err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}

	sopts := storagetypes.StoreOptions{
		GraphRoot:       opts.Root,
		ImageStore:      opts.ImageStore,
		RunRoot:         opts.RunRoot,
		GraphDriverName: opts.Driver,
		TransientStore:  opts.TransientStore,
		// Root filesystems are mounted nodev, as containers-storage.conf(5)'s default
		// mountopt has it for CRI-O and Podman: a device node an image brings cannot be
		// opened through them (a container's /dev is a tmpfs of the runtime's). It is
		// the overlay driver's option for every mount that names none of its own; an
		// image volume names "ro", so it names nodev too (see imageVolumeMountOpts).
		// vfs has no mount to carry it, and refuses mount options.
		GraphDriverOptions: []string{DriverOverlay + ".mountopt=nodev"},
	}
	if syncLayers {
		// A layer's files are flushed (syncfs) before it is recorded complete, so that
		// a power cut never leaves a complete layer with files missing (see durable.go).
		sopts.GraphDriverOptions = append(sopts.GraphDriverOptions, DriverOverlay+".sync=filesystem")
	}
	if opts.Driver == "" {
		// With an explicit priority list containers/storage reuses the driver whose
		// state the graph root holds, and otherwise takes the first that initializes;
		// overlay fails to initialize where the kernel or file system cannot do it.
		sopts.GraphDriverPriority = []string{DriverOverlay, DriverVFS}
	}
	if !opts.TransientStore {
		if n, file := transientContainers(opts.RunRoot); n > 0 {
			return nil, fmt.Errorf("open storage: %s records %d containers made in transient store mode, which a store opened without it does not see: "+
				"turn transient store mode back on (storage_transient_store), or remove those containers before turning it off", file, n)
		}
	}
	if err := checkImageStore(opts.Root, opts.RunRoot, opts.ImageStore); err != nil {
		return nil, fmt.Errorf("open storage: %w", err)
	}
	st, err := cstorage.GetStore(sopts)
	if err != nil {
		return nil, fmt.Errorf("open storage at %s (driver %q): %w", opts.Root, opts.Driver, err)
	}
	if err := noteImageStore(opts.Root, opts.ImageStore, log); err != nil {
		log.Warn("storage: the image store in use was not recorded: the next start cannot refuse a change of it over containers", "err", err)
	}
	// What no record names any more: the layers of containers whose records went with
	// the run root in a reboot, or what an unclean stop left half made. Only in transient
	// mode: a store opened without it does not read the run root's records, and would
	// take the layers of live containers for leftovers (transientContainers refuses that
	// case above).
	if opts.TransientStore {
		if err := st.GarbageCollect(); err != nil {
			log.Warn("storage: leftovers that no record names were not all removed; the next start tries again", "root", opts.Root, "err", err)
		}
	}
	s := &Store{
		st:                  st,
		sys:                 sys,
		log:                 log,
		policyPath:          opts.SignaturePolicy,
		registriesConf:      opts.RegistriesConf,
		registriesConfDir:   opts.RegistriesConfDir,
		configs:             map[string]ImageConfig{},
		rootfsDir:           rootfsDir,
		pinned:              pins,
		pullProgressTimeout: opts.PullProgressTimeout,
	}
	// What a reboot after a power cut found damaged: images whose layers or data are
	// gone, layers no record names (see repair.go). No pull and no creation runs yet.
	s.checkOnce(log)
	// What pulls that a crash interrupted left: their blobs' temporary copies, and the
	// layers they had unpacked (see pullclean.go). No pull runs yet.
	if err := emptyDir(sys.BigFilesTemporaryDir); err != nil {
		log.Warn("storage: temporary files of interrupted pulls were not all removed", "dir", sys.BigFilesTemporaryDir, "err", err)
	}
	if removed, err := s.removeOrphanLayers(); err != nil {
		log.Warn("storage: layers of interrupted pulls were not all removed; the next start tries again", "removed", removed, "err", err)
	} else if len(removed) > 0 {
		log.Info("storage: removed the layers of interrupted pulls", "layers", removed)
	}
	log.Debug("storage opened", "root", opts.Root, "run_root", opts.RunRoot, "driver", s.Driver())
	return s, nil
}

// transientContainers counts the containers recorded in transient store mode under run
// root runRoot (its <driver>-containers/volatile-containers.json), and names the file.
func transientContainers(runRoot string) (int, string) {
	files, _ := filepath.Glob(filepath.Join(runRoot, "*-containers", "volatile-containers.json"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var cs []json.RawMessage
		if json.Unmarshal(b, &cs) == nil && len(cs) > 0 {
			return len(cs), f
		}
	}
	return 0, ""
}

func (o Options) validate() error {
	var errs []error
	for _, p := range []struct{ name, path string }{{"root", o.Root}, {"run root", o.RunRoot}} {
		if !filepath.IsAbs(p.path) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path, got %q", p.name, p.path))
		}
	}
	for _, p := range []struct{ name, path string }{
		{"image cache dir", o.ImageCacheDir}, {"registries.conf", o.RegistriesConf}, {"registries.conf.d", o.RegistriesConfDir},
		{"signature policy", o.SignaturePolicy}, {"auth file", o.AuthFile}, {"rootfs dir", o.RootfsDir},
		{"image store", o.ImageStore},
	} {
		if p.path != "" && !filepath.IsAbs(p.path) {
			errs = append(errs, fmt.Errorf("%s must be an absolute path, got %q", p.name, p.path))
		}
	}
	if o.ImageStore != "" && filepath.Clean(o.ImageStore) == filepath.Clean(o.Root) {
		errs = append(errs, fmt.Errorf("image store must differ from the root %s", o.Root))
	}
	if !slices.Contains([]string{"", DriverOverlay, DriverVFS}, o.Driver) {
		errs = append(errs, fmt.Errorf("driver must be %q, %q or empty, got %q", DriverOverlay, DriverVFS, o.Driver))
	}
	if err := validateRegistries(o.Registries); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Driver returns the name of the graph driver in use: "overlay" or "vfs".
func (s *Store) Driver() string { return s.st.GraphDriverName() }

// Close releases the store. Mounted root filesystems stay mounted (their containers may
// still run); their mount counts are kept in the run root for the next Open.
func (s *Store) Close() error {
	s.flights.close()
	defer s.st.Free()
	mounted, err := s.st.Shutdown(false)
	if errors.Is(err, cstorage.ErrLayerUsedByContainer) {
		s.log.Info("storage closed with root filesystems still mounted", "layers", len(mounted))
		return nil
	}
	if err != nil {
		return fmt.Errorf("close storage: %w", err)
	}
	return nil
}

// FsUsage is the usage of one of the store's file systems (CRI ImageFsInfo).
type FsUsage struct {
	Mountpoint string // the directory measured: the graph root, or the image store
	UsedBytes  uint64 // bytes allocated to files under it
	InodesUsed uint64 // distinct inodes under it
}

// Usage is what ImageFsInfo reports: the file system of the images, and that of the
// containers' writable layers.
type Usage struct {
	// Images measures the image store (Options.ImageStore) when there is one; else the
	// graph root, and it is Containers.
	Images FsUsage
	// Containers measures the graph root: the containers, their layers and records, and
	// without an image store the images too (with one, the images pulled before it was
	// set).
	Containers FsUsage
}

// ImageStore returns the directory pulled images go to (Options.ImageStore), or "" when
// they go to the graph root.
func (s *Store) ImageStore() string { return s.st.ImageStore() }

// FsInfo measures the graph root: the figure of Usage's Containers, which without an
// image store is the only one.
func (s *Store) FsInfo(ctx context.Context, measured map[string]FsUsage) (FsUsage, error) {
	u, err := s.Usage(ctx, measured)
	return u.Containers, err
}

// Usage measures the graph root, and the image store when there is one: for each, the
// bytes allocated and the inodes used by every file under it, counting a hard-linked
// inode once and not descending into other file systems (the mounted root filesystems of
// containers) nor into the other directory, should one hold the other. The kubelet asks
// every ~10 s, and a whole walk cost 20-40 ms with a few images and about 10 ms more per
// 100 containers, so the directories whose files do not change are measured once and
// their figures kept (stableDirs): a complete image layer's directory, a container's
// directory, and a container's overlay layer directory but for its upper directory
// (diff). What a container writes to (the upper directory with overlay, the whole layer
// with vfs) is taken from measured, figures the caller has of containers' writable layer
// directories (WritableLayerDir: the server's, from its background walks, at most a
// minute old, counting bytes as DirUsage does), and walked when measured has none; the
// rest of the trees is walked again. A hard link between two such directories would be
// counted twice; neither overlay nor vfs makes one.
func (s *Store) Usage(ctx context.Context, measured map[string]FsUsage) (Usage, error) {
	graphRoot, imageStore := s.st.GraphRoot(), s.st.ImageStore()
	stable, err := s.stableDirs()
	if err != nil {
		return Usage{}, fmt.Errorf("measure %s: %w", graphRoot, err)
	}
	s.fsMu.Lock()
	defer s.fsMu.Unlock()
	kept := make(map[string]dirUsage, len(stable))
	containers, err := s.measureTree(ctx, graphRoot, imageStore, stable, measured, kept)
	if err != nil {
		return Usage{}, err
	}
	images := containers
	if imageStore != "" {
		if images, err = s.measureTree(ctx, imageStore, graphRoot, stable, measured, kept); err != nil {
			return Usage{}, err
		}
	}
	s.fsKept = kept
	return Usage{Images: images, Containers: containers}, nil
}

// measureTree measures the tree at root, leaving out the directory other (the other of
// the graph root and the image store; "" for none), as Usage says. The figures of the
// stable directories it measured or took from s.fsKept are added to kept.
func (s *Store) measureTree(ctx context.Context, root, other string, stable map[string]string, measured map[string]FsUsage, kept map[string]dirUsage) (FsUsage, error) {
	var rootStat syscall.Stat_t
	if err := syscall.Lstat(root, &rootStat); err != nil {
		return FsUsage{}, fmt.Errorf("measure %s: %w", root, err)
	}
	w := usageWalk{ctx: ctx, dev: rootStat.Dev, seen: map[uint64]bool{}}
	total, err := w.walk(root, func(dir string) (dirUsage, bool, error) {
		if dir == other {
			return dirUsage{}, true, nil
		}
		writable, ok := stable[dir]
		if !ok {
			return dirUsage{}, false, nil
		}
		var u dirUsage
		if writable != dir {
			if u, ok = s.fsKept[dir]; !ok {
				var err error
				if u, err = w.walk(dir, skipping(writable)); err != nil {
					return dirUsage{}, false, err
				}
			}
			kept[dir] = u
		}
		if writable != "" {
			wu, err := w.measure(writable, measured)
			if err != nil {
				return dirUsage{}, false, err
			}
			u.bytes += wu.bytes
			u.inodes += wu.inodes
		}
		return u, true, nil
	})
	if err != nil {
		return FsUsage{}, fmt.Errorf("measure %s: %w", root, err)
	}
	return FsUsage{Mountpoint: root, UsedBytes: total.bytes, InodesUsed: total.inodes}, nil
}

// measure returns measured's figure of dir, or walks it when measured has none.
func (w *usageWalk) measure(dir string, measured map[string]FsUsage) (dirUsage, error) {
	if m, ok := measured[dir]; ok {
		return dirUsage{bytes: m.UsedBytes, inodes: m.InodesUsed}, nil
	}
	return w.walk(dir, nil)
}

// skipping is a walk's sub that leaves out the directory dir (none when dir is "").
func skipping(dir string) func(string) (dirUsage, bool, error) {
	if dir == "" {
		return nil
	}
	return func(d string) (dirUsage, bool, error) { return dirUsage{}, d == dir, nil }
}

// stableDirs returns the directories Usage measures apart, each with the directory in it
// that a container writes to ("" for none; the directory itself when all of it is): the
// directories of the complete image layers (those with a digest and without
// containers/storage's "incomplete" flag: see removeLeftovers), whose files no longer
// change; each container's directory (containers/storage's; crijournal writes nothing
// there); and each container's layer directory: with overlay, its upper directory (diff)
// is what changes (its work directory is empty between two operations, its merged
// directory a mount point), with vfs all of it, the container's root filesystem. None
// for a driver whose layout Usage does not know.
func (s *Store) stableDirs() (map[string]string, error) {
	driver := s.st.GraphDriverName()
	var layersDir string // of a root
	switch driver {
	case "overlay":
		layersDir = "overlay"
	case "vfs":
		layersDir = filepath.Join("vfs", "dir")
	default:
		return nil, nil
	}
	base := filepath.Join(s.st.GraphRoot(), layersDir)
	// Image layers pulled into the image store are there; those pulled before it was set,
	// and every container's, in the graph root.
	imageBases := []string{base}
	if is := s.st.ImageStore(); is != "" {
		imageBases = append(imageBases, filepath.Join(is, layersDir))
	}
	layers, err := s.st.Layers()
	if err != nil {
		return nil, err
	}
	containers, err := s.st.Containers()
	if err != nil {
		return nil, err
	}
	dirs := make(map[string]string, len(layers)+len(containers))
	for _, l := range layers {
		if (l.CompressedDigest != "" || l.UncompressedDigest != "") && l.Flags["incomplete"] != true {
			for _, b := range imageBases {
				dirs[filepath.Join(b, l.ID)] = ""
			}
		}
	}
	containersDir := filepath.Join(s.st.GraphRoot(), driver+"-containers")
	for _, c := range containers {
		dirs[filepath.Join(containersDir, c.ID)] = ""
		layer := filepath.Join(base, c.LayerID)
		if driver == "overlay" {
			dirs[layer] = filepath.Join(layer, "diff")
		} else {
			dirs[layer] = layer
		}
	}
	return dirs, nil
}

// dirUsage is what a directory tree holds: bytes allocated and distinct inodes.
type dirUsage struct{ bytes, inodes uint64 }

// usageWalk measures directory trees of one file system (dev), counting each inode once
// (seen, by inode number).
type usageWalk struct {
	ctx  context.Context
	dev  uint64
	seen map[uint64]bool
}

// walk measures the tree at dir. For each directory below dir, sub (when not nil) may
// answer its figure instead (true): the walk then adds it and does not descend.
func (w *usageWalk) walk(dir string, sub func(dir string) (dirUsage, bool, error)) (dirUsage, error) {
	var u dirUsage
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walk
			}
			return err
		}
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if sub != nil && path != dir && d.IsDir() {
			su, ok, err := sub(path)
			if err != nil {
				return err
			}
			if ok {
				u.bytes += su.bytes
				u.inodes += su.inodes
				return filepath.SkipDir
			}
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		stat, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("stat %s: no unix stat", path)
		}
		if stat.Dev != w.dev {
			if d.IsDir() {
				return filepath.SkipDir // a mount point
			}
			return nil
		}
		if w.seen[stat.Ino] {
			return nil
		}
		w.seen[stat.Ino] = true
		u.inodes++
		u.bytes += uint64(stat.Blocks) * 512
		return nil
	})
	return u, err
}

// prepareImageDirs creates the image cache directory and what containers/image needs in it,
// prepares its registries configuration (see prepareRegistries), and returns the
// SystemContext that points containers/image there.
func prepareImageDirs(dir string, opts Options) (*types.SystemContext, error) {
	sys := &types.SystemContext{
		BlobInfoCacheDir:     dir,
		BigFilesTemporaryDir: filepath.Join(dir, "tmp"),
		// Aliases a pull records (crijournal records none) would go here, never under $HOME.
		UserShortNameAliasConfPath: filepath.Join(dir, "short-name-aliases.conf"),
		// The only credentials file ever read: never $HOME/.docker/config.json or
		// /run/containers/0/auth.json.
		AuthFilePath: opts.AuthFile,
	}
	if sys.AuthFilePath == "" {
		sys.AuthFilePath = filepath.Join(dir, "auth.json")
	}
	for _, d := range []string{dir, sys.BigFilesTemporaryDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("image cache: %w", err)
		}
	}
	if err := prepareRegistries(sys, dir, opts.RegistriesConf, opts.RegistriesConfDir, opts.Registries); err != nil {
		return nil, err
	}
	return sys, nil
}
