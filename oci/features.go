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

// featuresCache holds a runtime's features once read: the binary does not change under
// a running daemon, and Status is polled.
type featuresCache struct {
	mu   sync.Mutex
	done bool
	f    Features
}

// Features asks the runtime binary what it supports (`<runtime> features`), once; a
// later call returns what the first successful one found. A runtime without the
// features command gives an error.
func (r *Runtime) Features(ctx context.Context) (Features, error) {
	r.features.mu.Lock()
	defer r.features.mu.Unlock()
	if r.features.done {
		return r.features.f, nil
	}
	out, err := r.runtimeCmd(ctx, nil, "features")
	if err != nil {
		return Features{}, err
	}
	f, err := parseFeatures(out)
	if err != nil {
		return Features{}, fmt.Errorf("%s features: %w", r.handler, err)
	}
	r.features.done, r.features.f = true, f
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
