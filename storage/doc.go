// Package storage owns crijournal's images and the root filesystems of its containers. It
// wraps containers/storage (go.podman.io/storage), which keeps layers, images and containers
// on disk under a graph driver, and containers/image (go.podman.io/image/v5), which pulls
// images from registries into that store.
//
// # What lives where
//
// Everything is under directories crijournal owns, apart from the node's containers
// configuration, which is read, never written: the registries configuration
// (Options.RegistriesConf and RegistriesConfDir, /etc/containers/registries.conf and
// registries.conf.d by default), the signature policy (Options.SignaturePolicy,
// /etc/containers/policy.json), containers/image's signature lookaside configuration
// (/etc/containers/registries.d) and the per-registry certificate directories
// /etc/containers/certs.d and /etc/docker/certs.d. Nothing is written to /var/lib/containers
// or /var/cache/containers:
//
//	Options.Root           graph root: layers, images, containers, the per-container dirs
//	                       (config.Config.StorageRootDir, default /var/lib/crijournal/storage);
//	                       crijournal-checked-boot: the boot of Open's last check (repair.go)
//	Options.RunRoot        run root: mount counts and per-container run dirs; lost on reboot
//	                       (config.Config.StorageRunRootDir, default /run/crijournal/storage)
//	Options.RootfsDir      bind mounts of the root filesystems of containers in a user
//	                       namespace, <dir>/<container ID>/rootfs, nodev, in a 0700
//	                       directory of the container's mapped root (see rootfs.go);
//	                       made 0711 (default <run root>/rootfs)
//	Options.ImageCacheDir  (config.Config.ImageCacheDir, default <root>/image-cache)
//	  blob-info-cache-v1.sqlite   containers/image's blob info cache (BlobInfoCacheDir)
//	  auth.json                   registry credentials when Options.AuthFile is empty
//	                              (containers-auth.json(5) format); absent by default
//	  registries.conf             written only when the node has no registries.conf
//	  registries.conf.d/          rebuilt at every Open: copies of the node's drop-ins and
//	                              the drop-in of Options.Registries (see prepareRegistries)
//	  tmp/                        big temporary files of pulls (BigFilesTemporaryDir)
//
// # Images
//
// PullImage resolves short names as the registries configuration says (see
// Store.candidates): an alias, else the unqualified-search registries (refusing a name
// several of them could serve when short-name-mode is "enforcing"), else docker.io as the
// kubelet and Docker qualify names: "busybox" is docker.io/library/busybox:latest. A name
// without tag or digest gets ":latest", and a name with both a tag and a digest keeps only the
// digest (as CRI-O does). The qualified name is pulled as the registries configuration says
// (blocked, mirrors, insecure); Options.Registries add mirrors on top, tried first for their
// prefix. The image is stored under the qualified name, never under a mirror's.
//
// Image IDs are containers/storage IDs: the hex digest of the image's config, without the
// "sha256:" prefix. ImageStatus and RemoveImage accept a full ID (with or without "sha256:"),
// an ID prefix of at least 3 hex digits that matches exactly one image (as CRI-O), a name with
// a tag, or a name with a digest; a short name is looked up under each name it may stand for.
//
// Every pull must satisfy the signature policy (Options.SignaturePolicy), read afresh for
// each pull; signatures are verified as it says and not stored. A pull uses the credentials
// of its CRI request (Auth) for the registry its name says; without them, and for a mirror
// (containers/image never sends a request's credentials to another registry), those of the
// auth file (Options.AuthFile) if it exists, else none. No other credentials file
// ($HOME/.docker/config.json, /run/containers/0/auth.json) is read. A registry on a loopback
// address (127.0.0.0/8, ::1, localhost) may be plain HTTP, as with Docker and CRI-O.
//
// Pulls of the same names with the same credentials at the same time share one download
// (pullshare.go), detached from every caller and cancelled when the last has gone. A pull
// is answered only once the image is on disk for good, so that a power cut cannot take an
// image the kubelet was told it has (durable.go); the first Open of each boot removes what
// a cut damaged: images whose layers are gone, layers nothing uses (repair.go). A pull
// that waits on the registry and receives nothing for Options.PullProgressTimeout is
// cancelled (pullwatch.go, ErrPullNoProgress). A pull that fails, on a full disk
// (ErrDiskFull) or otherwise, leaves no layer and no temporary file (pullclean.go).
//
// # Root filesystems
//
// A container's root filesystem is a containers/storage container whose ID is the CRI
// container ID. CreateContainer is idempotent for the same ID and image, so that a creation
// step retried after a timeout or a crash finds what the first attempt made. Mount is
// idempotent too (a second Mount does not stack), and Unmount and DeleteContainer treat "not
// mounted" and "not found" as success, as every journal undo must.
//
// On overlay, root filesystems and image volumes are mounted nodev (the driver's mountopt,
// as containers-storage.conf(5) has it by default for CRI-O and Podman): a device node an
// image brings cannot be opened through them; a container's /dev is a tmpfs of the
// runtime's, where devices work. vfs root filesystems are plain directories under the
// graph root, with no mount of their own to carry nodev (vfs refuses mount options): there
// the options of the graph root's file system apply, and in an unprivileged container the
// devices cgroup denies every device its spec does not list.
//
// # Journal steps
//
// StepContainerStorage (see steps.go) records the creation of a storage container (and,
// for a container in a user namespace, the bind mount of its root filesystem under
// Options.RootfsDir); its undo, registered by RegisterUndos, unmounts that bind mount
// (or one an older daemon journaled, of the earlier layout: <dir>/<container ID>),
// removes its directories and deletes the container. StepImageVolume (see volume.go)
// records the creation of one image volume of a CRI container: a storage container of
// its own (ImageVolumeID, "<container ID>-imagevolume-<n>") from the volume's image,
// mounted read-only; its undo deletes it the same way. volume.go says why it is not
// MountImage.
//
// # Caveats
//
//   - Close leaves mounted root filesystems mounted: containers keep running across daemon
//     restarts. The mount counts live in the run root.
//   - containers/storage and containers/image log through logrus's global logger.
//   - containers/storage re-executes the binary for some operations: every main and every
//     TestMain of a package that opens a Store must call reexec.Init
//     (go.podman.io/storage/pkg/reexec) first and return when it reports true.
//   - An image being pulled can briefly appear in the store without its configuration;
//     ListImages skips such images.
package storage
