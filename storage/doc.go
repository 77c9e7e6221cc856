// Package storage owns crijournal's images and the root filesystems of its containers. It
// wraps containers/storage (go.podman.io/storage), which keeps layers, images and containers
// on disk under a graph driver, and containers/image (go.podman.io/image/v5), which pulls
// images from registries into that store.
//
// # What lives where
//
// Everything is under directories crijournal owns; nothing is read from or written to
// /var/lib/containers, /var/cache/containers or /etc/containers, apart from the per-registry
// certificate directories /etc/containers/certs.d and /etc/docker/certs.d, which are read
// when they exist (they hold the CA certificates of private registries):
//
//	Options.Root           graph root: layers, images, containers, the per-container dirs
//	                       (config.Config.StorageRootDir, default /var/lib/crijournal/storage)
//	Options.RunRoot        run root: mount counts and per-container run dirs; lost on reboot
//	                       (config.Config.StorageRunRootDir, default /run/crijournal/storage)
//	Options.ImageCacheDir  (config.Config.ImageCacheDir, default <root>/image-cache)
//	  blob-info-cache-v1.sqlite   containers/image's blob info cache (BlobInfoCacheDir)
//	  auth.json                   optional registry credentials (containers-auth.json(5)
//	                              format); absent by default
//	  registries.conf             generated from Options.Registries at every Open
//	  registries.conf.d/          empty: no drop-ins are read
//	  registries.d/               empty: no signature lookaside configuration is read
//	  tmp/                        big temporary files of pulls (BigFilesTemporaryDir)
//
// # Images
//
// PullImage qualifies short names the way the kubelet and Docker do, without search
// registries or alias tables: "busybox" is docker.io/library/busybox:latest, "k8s/pause:3.9"
// is docker.io/k8s/pause:3.9, a name without tag or digest gets ":latest", and a name with
// both a tag and a digest keeps only the digest (as CRI-O does). The qualified name is then
// redirected by Options.Registries (the longest matching prefix wins) and the image is stored
// under the qualified name, never under the redirected one.
//
// Image IDs are containers/storage IDs: the hex digest of the image's config, without the
// "sha256:" prefix. ImageStatus and RemoveImage accept a full ID (with or without "sha256:"),
// an ID prefix of at least 3 hex digits that matches exactly one image (as CRI-O), a name with
// a tag, or a name with a digest; short names are qualified as for pulls.
//
// Signatures are neither verified nor stored: the signature policy is built in code and
// accepts anything (insecureAcceptAnything), as with an /etc/containers/policy.json that says
// so. A pull uses the credentials of its CRI request (Auth) for the registry its name says;
// without them, and for a redirected pull (containers/image never sends a request's
// credentials to another registry), those of <ImageCacheDir>/auth.json if it exists, else
// none. No other credentials file ($HOME/.docker/config.json, /run/containers/0/auth.json)
// is read. A registry on a loopback address (127.0.0.0/8, ::1, localhost) may be plain HTTP,
// as with Docker and CRI-O.
//
// # Root filesystems
//
// A container's root filesystem is a containers/storage container whose ID is the CRI
// container ID. CreateContainer is idempotent for the same ID and image, so that a creation
// step retried after a timeout or a crash finds what the first attempt made. Mount is
// idempotent too (a second Mount does not stack), and Unmount and DeleteContainer treat "not
// mounted" and "not found" as success, as every journal undo must.
//
// # Journal steps
//
// StepContainerStorage (see steps.go) records the creation of a storage container; its undo,
// registered by RegisterUndos, deletes the container.
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
