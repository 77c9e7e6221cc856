package storage

import (
	"slices"
	"testing"

	cstorage "go.podman.io/storage"
)

// TestOrphanLayers: the layers failed pulls left are the pulled ones (with a digest) that
// no image and no container uses, incomplete ones included, each before its parent.
func TestOrphanLayers(t *testing.T) {
	const digest = "sha256:0123"
	pulledLayer := func(id, parent string) cstorage.Layer {
		return cstorage.Layer{ID: id, Parent: parent, CompressedDigest: digest, UncompressedDigest: digest}
	}
	incomplete := func(l cstorage.Layer) cstorage.Layer {
		l.Flags = map[string]any{"incomplete": true}
		return l
	}
	for _, tc := range []struct {
		name       string
		layers     []cstorage.Layer
		images     []cstorage.Image
		containers []cstorage.Container
		want       []string
	}{
		{"an image's layers", []cstorage.Layer{pulledLayer("base", ""), pulledLayer("top", "base")},
			[]cstorage.Image{{TopLayer: "top"}}, nil, nil},
		{"a failed pull's chain, child first", []cstorage.Layer{pulledLayer("base", ""), pulledLayer("top", "base")},
			nil, nil, []string{"top", "base"}},
		// The CI case: the base layer's finished record was not written on a full disk,
		// and containers/storage could not delete it either.
		{"a failed pull's layer left incomplete", []cstorage.Layer{incomplete(pulledLayer("base", ""))},
			nil, nil, []string{"base"}},
		{"a container's layer being made keeps its parent", []cstorage.Layer{pulledLayer("base", ""), {ID: "rw", Parent: "base"}},
			nil, nil, nil},
		{"a container's layer keeps its image's", []cstorage.Layer{pulledLayer("base", ""), {ID: "rw", Parent: "base"}},
			nil, []cstorage.Container{{LayerID: "rw"}}, nil},
		{"a mapped top layer is used", []cstorage.Layer{pulledLayer("base", ""), pulledLayer("mapped", "base"), pulledLayer("top", "base")},
			[]cstorage.Image{{TopLayer: "top", MappedTopLayers: []string{"mapped"}}}, nil, nil},
		{"beside an image, only the failed pull's", []cstorage.Layer{pulledLayer("base", ""), pulledLayer("top", "base"), pulledLayer("other", "base")},
			[]cstorage.Image{{TopLayer: "top"}}, nil, []string{"other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := orphanLayers(tc.layers, tc.images, tc.containers); !slices.Equal(got, tc.want) {
				t.Errorf("orphanLayers = %q, want %q", got, tc.want)
			}
		})
	}
}
