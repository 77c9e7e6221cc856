package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/internal/procs"
	"github.com/crijournal/crijournal/internal/residency"
	"github.com/crijournal/crijournal/storage"
)

// imageService is the CRI ImageService over containers/storage and containers/image.
type imageService struct {
	runtimeapi.UnimplementedImageServiceServer
	s *Server
}

func (i *imageService) store() (*storage.Store, error) {
	if i.s.images == nil {
		return nil, newError(errUnavailable, "image storage is not available on this daemon")
	}
	return i.s.images, nil
}

// storeFor returns the store and the image reference a request names, which is required.
func (i *imageService) storeFor(spec *runtimeapi.ImageSpec) (*storage.Store, string, error) {
	st, err := i.store()
	if err != nil {
		return nil, "", err
	}
	ref := spec.GetImage()
	if ref == "" {
		return nil, "", invalidf("image reference (image.image) is required")
	}
	return st, ref, nil
}

func toCRIImage(img storage.Image) *runtimeapi.Image {
	out := &runtimeapi.Image{
		Id: img.ID, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Size: img.Size,
		Pinned: img.Pinned, Spec: &runtimeapi.ImageSpec{Image: img.ID},
	}
	// The image's user as CRI wants it: a numeric uid, or a user name.
	uid, _, _ := strings.Cut(img.Config.User, ":")
	if uid != "" {
		var n int64
		if _, err := fmt.Sscanf(uid, "%d", &n); err == nil && fmt.Sprint(n) == uid {
			out.Uid = &runtimeapi.Int64Value{Value: n}
		} else {
			out.Username = uid
		}
	}
	return out
}

// PullImage pulls an image through the configured registries and mirrors.
func (i *imageService) PullImage(ctx context.Context, req *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	st, ref, err := i.storeFor(req.GetImage())
	if err != nil {
		return nil, err
	}
	var auth *storage.Auth
	if a := req.GetAuth(); a != nil {
		auth = &storage.Auth{Username: a.GetUsername(), Password: a.GetPassword(), Auth: a.GetAuth(),
			IdentityToken: a.GetIdentityToken(), RegistryToken: a.GetRegistryToken()}
	}
	// Decompressing and hashing the layers is the daemon's one CPU-bound job: it gets
	// every core while it runs (package procs).
	defer procs.Busy()()
	start := time.Now()
	img, err := st.PullImage(ctx, ref, auth)
	if err != nil {
		return nil, err // storage names the image
	}
	i.s.log.Info("image pulled", "image", ref, "id", img.ID, "took", time.Since(start).Round(time.Millisecond))
	// A pull maps the registry client's code and grows the heap by its decompression
	// buffers, for this pull only.
	if err := residency.Trim(); err != nil {
		i.s.log.Debug("could not trim after the pull", "err", err)
	}
	return &runtimeapi.PullImageResponse{ImageRef: img.ID}, nil
}

// ListImages lists the images in storage, optionally those matching a reference.
func (i *imageService) ListImages(ctx context.Context, req *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	st, err := i.store()
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ListImagesResponse{}
	err = eachImage(ctx, st, req.GetFilter(), func(img *runtimeapi.Image) error {
		resp.Images = append(resp.Images, img)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// ImageStatus reports an image; an unknown image is a nil image, not an error (CRI).
func (i *imageService) ImageStatus(ctx context.Context, req *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	st, ref, err := i.storeFor(req.GetImage())
	if err != nil {
		return nil, err
	}
	img, err := st.ImageStatus(ctx, ref)
	if errors.Is(err, storage.ErrImageNotFound) {
		return &runtimeapi.ImageStatusResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	resp := &runtimeapi.ImageStatusResponse{Image: toCRIImage(img)}
	if req.GetVerbose() {
		resp.Info = map[string]string{"info": infoJSON(img)}
	}
	return resp, nil
}

// RemoveImage removes an image by ID, tag or digest; an unknown image is success (CRI).
// An image a container still uses is refused with FailedPrecondition. The root
// filesystems of removed containers whose deletion has not run yet (see
// storage.RegisterUndos) are deleted first: they are no use of the image.
func (i *imageService) RemoveImage(ctx context.Context, req *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	st, ref, err := i.storeFor(req.GetImage())
	if err != nil {
		return nil, err
	}
	unfinished := i.s.journal.FinishRemovals(ctx)
	if unfinished != nil {
		// What failed is retried later; the image's removal says whether it mattered.
		i.s.log.Warn("removing an image: finishing the removals under way failed", "image", ref, "err", unfinished)
	}
	err = st.RemoveImage(ctx, ref)
	if errors.Is(err, storage.ErrImageInUse) && unfinished != nil {
		// The containers it names may be removed ones, which crictl no longer lists.
		return nil, fmt.Errorf("remove image %s: %w; they may be removed containers whose root filesystems could not be deleted yet (%v): the daemon retries their deletion, retry the image's removal later", ref, err, unfinished)
	}
	if err != nil && !errors.Is(err, storage.ErrImageNotFound) {
		return nil, fmt.Errorf("remove image %s: %w", ref, err)
	}
	return &runtimeapi.RemoveImageResponse{}, nil
}

// ImageFsInfo reports the usage of the images' file system (image_filesystems) and of the
// containers' writable layers' (container_filesystems): the image store and the graph root
// when the storage keeps images apart (image_store), else the graph root in both, as CRI-O
// does. The kubelet's cadvisor stats provider with KubeletSeparateDiskGC (on since 1.31)
// refuses an answer without container_filesystems ("missing image stats"), and takes the
// image file system as split when the two mount points differ
// (pkg/kubelet/stats/cadvisor_stats_provider.go, v1.37.2); its CRI stats provider, which a
// kubelet on crijournal uses, reads image_filesystems only. The containers' writable
// layers are counted as their stats count them, from the background collector's figures
// (a stats period old, an idle container's up to a minute: see layerCollector), so that a
// call does not walk every container's layer again.
func (i *imageService) ImageFsInfo(ctx context.Context, req *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	st, err := i.store()
	if err != nil {
		return nil, err
	}
	var measured map[string]storage.FsUsage
	if i.s.layers != nil {
		measured = i.s.layers.byDir()
	}
	u, err := st.Usage(ctx, measured)
	if err != nil {
		return nil, err
	}
	now := time.Now().UnixNano()
	usage := func(u storage.FsUsage) *runtimeapi.FilesystemUsage {
		return &runtimeapi.FilesystemUsage{
			Timestamp:  now,
			FsId:       &runtimeapi.FilesystemIdentifier{Mountpoint: u.Mountpoint},
			UsedBytes:  &runtimeapi.UInt64Value{Value: u.UsedBytes},
			InodesUsed: &runtimeapi.UInt64Value{Value: u.InodesUsed},
		}
	}
	return &runtimeapi.ImageFsInfoResponse{
		ImageFilesystems:     []*runtimeapi.FilesystemUsage{usage(u.Images)},
		ContainerFilesystems: []*runtimeapi.FilesystemUsage{usage(u.Containers)},
	}, nil
}
