package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go/features"
)

// Features is what the runtime binary of a handler says it supports (`runc features`),
// reduced to what the CRI's Status reports per handler.
type Features struct {
	// RecursiveReadOnlyMounts: the runtime knows the "rro" mount option.
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
	return f, nil
}

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
