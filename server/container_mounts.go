package server

import (
	"context"
	"errors"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/storage"
)

// The mounts of a container being created that need more than its spec: image volumes
// (a step each), host paths that do not exist yet, and the runtime's support of
// recursive read-only mounts.

// imageVolume is one image volume of a container being created, with its image found.
type imageVolume struct {
	oci.ImageVolume
	imageID string // the image's full storage ID
}

// findImageVolumes checks the image volumes of cfg (InvalidArgument) and finds their
// images, which must be present like the container's own (NotFound).
func (s *Server) findImageVolumes(ctx context.Context, cfg *runtimeapi.ContainerConfig) ([]imageVolume, error) {
	vols, err := oci.ImageVolumes(cfg)
	if err != nil {
		return nil, err
	}
	out := make([]imageVolume, len(vols))
	for i, v := range vols {
		img, err := s.images.ImageStatus(ctx, v.Image)
		if errors.Is(err, storage.ErrImageNotFound) {
			return nil, newError(errNotFound, "image %q of the image volume at %s is not present on this node: pull it first", v.Image, v.Destination)
		}
		if err != nil {
			return nil, err
		}
		out[i] = imageVolume{ImageVolume: v, imageID: img.ID}
	}
	return out, nil
}

// mountImageVolumes mounts the image volumes of container id, one step each (see
// storage.ImageVolumeStep), and returns their mounted roots by container path.
func (s *Server) mountImageVolumes(c *creation.Creation, id string, vols []imageVolume) (map[string]string, error) {
	if len(vols) == 0 {
		return nil, nil
	}
	roots := make(map[string]string, len(vols))
	for i, v := range vols {
		root, err := creation.Step(c, creation.Limit{Max: storageCreateTimeout}, storage.ImageVolumeStep(s.images, storage.ImageVolumeRequest{
			ContainerID: id, Index: i, ImageID: v.imageID, Destination: v.Destination}))
		if err != nil {
			return nil, err
		}
		roots[v.Destination] = root
	}
	return roots, nil
}

// imageVolumeIDs returns the image ID of each image volume by container path, as the
// container's record keeps them.
func imageVolumeIDs(vols []imageVolume) map[string]string {
	if len(vols) == 0 {
		return nil
	}
	ids := make(map[string]string, len(vols))
	for _, v := range vols {
		ids[v.Destination] = v.imageID
	}
	return ids
}

// createHostPaths creates the missing host paths of cfg's bind mounts (see
// oci.CreateHostPaths: not a step, nothing removes them) and logs each.
func (s *Server) createHostPaths(cfg *runtimeapi.ContainerConfig, name string) error {
	created, err := oci.CreateHostPaths(cfg)
	for _, p := range created {
		s.log.Info("missing host path of a bind mount created", "container", name, "path", p, "mode", "0755")
	}
	return err
}

// supportsRecursiveReadOnly reports whether the runtime of handler lists the "rro" mount option
// in its features (a runtime that cannot say supports nothing).
func (s *Server) supportsRecursiveReadOnly(ctx context.Context, handler string) bool {
	return s.handlerFeatures(ctx, handler).RecursiveReadOnlyMounts
}

// mounts returns the container's mounts as ContainerStatus reports them: the request's,
// with the image ID (what PullImage answered, and the kubelet put in image.image) as the
// image_ref of each image volume.
func (c container) mounts() []*runtimeapi.Mount {
	ms := c.config.GetMounts()
	if len(c.obj.ImageVolumes) == 0 {
		return ms
	}
	out := make([]*runtimeapi.Mount, len(ms))
	for i, m := range ms {
		out[i] = m
		if m.GetImage() == nil {
			continue
		}
		vols, err := oci.ImageVolumes(&runtimeapi.ContainerConfig{Mounts: []*runtimeapi.Mount{m}})
		if err != nil || len(vols) != 1 {
			continue
		}
		if id, ok := c.obj.ImageVolumes[vols[0].Destination]; ok {
			m = proto.Clone(m).(*runtimeapi.Mount)
			m.Image.ImageRef = id
			out[i] = m
		}
	}
	return out
}
