package storage

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.podman.io/image/v5/manifest"
	istorage "go.podman.io/image/v5/storage"
	cstorage "go.podman.io/storage"
	"go.podman.io/storage/pkg/archive"
)

// ImageAnnotations returns the annotations of the OCI manifest of image id (its full
// ID), as a checkpoint image carries them (package checkpoint); an image whose manifest
// is Docker's has none.
func (s *Store) ImageAnnotations(ctx context.Context, id string) (map[string]string, error) {
	ref, err := istorage.Transport.NewStoreReference(s.st, nil, id)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", id, err)
	}
	src, err := ref.NewImageSource(ctx, s.sys)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", id, err)
	}
	defer src.Close()
	b, mime, err := src.GetManifest(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", id, err)
	}
	if manifest.NormalizedMIMEType(mime) != "application/vnd.oci.image.manifest.v1+json" {
		return nil, nil
	}
	m, err := manifest.OCI1FromManifest(b)
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", id, err)
	}
	return m.Annotations, nil
}

// ImageFiles returns the files of image id (its full ID) as a tar stream: the
// uncompressed diff of its one layer, as a checkpoint image has it (buildah's from
// scratch and add make one). An image of several layers is refused (ErrLayered), as
// one that is not in the store is (ErrImageNotFound). The caller closes it.
func (s *Store) ImageFiles(ctx context.Context, id string) (io.ReadCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	img, err := s.st.Image(id)
	if errors.Is(err, cstorage.ErrImageUnknown) {
		return nil, fmt.Errorf("image %s: %w", id, ErrImageNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", id, err)
	}
	if img.TopLayer == "" {
		return nil, fmt.Errorf("image %s has no layer: %w", id, ErrLayered)
	}
	layer, err := s.st.Layer(img.TopLayer)
	if err != nil {
		return nil, fmt.Errorf("image %s: layer %s: %w", id, img.TopLayer, err)
	}
	if layer.Parent != "" {
		return nil, fmt.Errorf("image %s: %w", id, ErrLayered)
	}
	uncompressed := archive.Uncompressed
	rc, err := s.st.Diff("", layer.ID, &cstorage.DiffOptions{Compression: &uncompressed})
	if err != nil {
		return nil, fmt.Errorf("image %s: layer %s: %w", id, layer.ID, err)
	}
	return drainCloser{rc}, nil
}

// drainCloser reads its stream to the end before it closes it: containers/storage's
// Diff assembles the layer's tar in a goroutine of its own, which races with a Close
// that comes before the end (the race detector's finding; a reader of a checkpoint image
// stops once it has the metadata).
type drainCloser struct{ io.ReadCloser }

func (d drainCloser) Close() error {
	_, _ = io.Copy(io.Discard, d.ReadCloser)
	return d.ReadCloser.Close()
}

// ErrLayered is ImageFiles's error for an image that has not exactly one layer.
var ErrLayered = errors.New("the image has not exactly one layer")
