package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go/features"
	"golang.org/x/sys/unix"
)

// Features is what the runtime binary of a handler says it supports (`runc features`),
// reduced to what the CRI's Status reports per handler.
type Features struct {
	// RecursiveReadOnlyMounts: the runtime knows the "rro" mount option and the kernel
	// has what it needs for it (mount_setattr, Linux 5.12; see onKernel).
	RecursiveReadOnlyMounts bool `json:"recursiveReadOnlyMounts"`
	// UserNamespaces: the runtime creates user namespaces and supports idmapped
	// mounts (which the CRI's user namespaces need for volumes).
	UserNamespaces bool `json:"userNamespaces"`
}

// featuresCache holds a runtime's features once the runtime has told them: the binary
// does not change under a running daemon, and Status is polled. A failure (the runtime
// slow or failing for a moment, say after a restart) is not kept for good: the next
// call after featuresRetry asks again, so one bad moment does not refuse user
// namespaces and rro until the daemon restarts; until then it is answered from the cache,
// so that polling a runtime without the features command forks nothing.
type featuresCache struct {
	mu       sync.Mutex
	known    bool // f is the runtime's answer
	f        Features
	err      error     // the last failure, while !known
	failedAt time.Time // when it happened
}

// featuresRetry is how long a failure to read the features is answered from the cache.
var featuresRetry = 30 * time.Second

// Features asks the runtime binary what it supports (`<runtime> features`). An answer
// is kept for the runtime's life; a failure for featuresRetry (a runtime without the
// features command supports none of them as far as crijournal can tell).
func (r *Runtime) Features(ctx context.Context) (Features, error) {
	c := &r.features
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.known || (c.err != nil && time.Since(c.failedAt) < featuresRetry) {
		return c.f, c.err
	}
	f, err := r.readFeatures(ctx)
	if err != nil {
		c.err, c.failedAt = err, time.Now()
		return Features{}, err
	}
	c.known, c.f, c.err = true, f, nil
	return f, nil
}

func (r *Runtime) readFeatures(ctx context.Context) (Features, error) {
	out, err := r.runtimeCmd(ctx, nil, "features")
	if err != nil {
		return Features{}, err
	}
	f, err := parseFeatures(out)
	if err != nil {
		return Features{}, fmt.Errorf("%s features: %w", r.handler, err)
	}
	return onKernel(f, kernelMountSetattr()), nil
}

// onKernel is what the runtime's features f come to on a kernel with or without
// mount_setattr(2) (hasSetattr): a runtime lists "rro" whatever the kernel, but applies it
// with mount_setattr's MOUNT_ATTR_RDONLY over a whole tree (Linux 5.12), and fails the
// container where the kernel lacks it; so recursive read-only mounts are advertised only
// where both have them (containerd checks the kernel's version, 5.12, for the same).
func onKernel(f Features, hasSetattr bool) Features {
	f.RecursiveReadOnlyMounts = f.RecursiveReadOnlyMounts && hasSetattr
	return f
}

// kernelMountSetattr reports whether the kernel has mount_setattr(2), asked once: a call
// with no file descriptor fails with EBADF where the system call exists, ENOSYS where it
// does not (before 5.12, or filtered out by a seccomp profile the daemon runs under).
var kernelMountSetattr = sync.OnceValue(func() bool {
	err := unix.MountSetattr(-1, "", unix.AT_EMPTY_PATH, &unix.MountAttr{})
	return !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM)
})

// parseFeatures reads the JSON of `runc features` (the OCI features document).
func parseFeatures(out []byte) (Features, error) {
	var doc features.Features
	if err := json.Unmarshal(out, &doc); err != nil {
		return Features{}, err
	}
	f := Features{RecursiveReadOnlyMounts: slices.Contains(doc.MountOptions, "rro")}
	if l := doc.Linux; l != nil && slices.Contains(l.Namespaces, "user") {
		idmap := l.MountExtensions != nil && l.MountExtensions.IDMap != nil &&
			l.MountExtensions.IDMap.Enabled != nil && *l.MountExtensions.IDMap.Enabled
		f.UserNamespaces = idmap
	}
	return f, nil
}
