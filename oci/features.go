package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

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

// featuresCache holds a runtime's features once asked: the binary does not change under a
// running daemon, and Status is polled, so the answer (or the failure) is kept.
type featuresCache struct {
	mu   sync.Mutex
	done bool
	f    Features
	err  error
}

// Features asks the runtime binary what it supports (`<runtime> features`), once; later
// calls return what the first one found, a failure too (a runtime without the features
// command supports none of them as far as crijournal can tell).
func (r *Runtime) Features(ctx context.Context) (Features, error) {
	r.features.mu.Lock()
	defer r.features.mu.Unlock()
	if !r.features.done {
		r.features.f, r.features.err = r.readFeatures(ctx)
		r.features.done = true
	}
	return r.features.f, r.features.err
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
