package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	cstorage "go.podman.io/storage"

	"github.com/crijournal/crijournal/journal"
)

// Image volumes (the CRI's Mount.image, KEP 4639): an image's files mounted read-only into
// a container.
//
// Each image volume is a storage container of its own, made from the image and mounted
// read-only (the "ro" mount option of its layer), not containers/storage's MountImage.
// MountImage counts mounts per image (its top layer's MountCount, shared by every user of
// the image) and UnmountImage takes one count away: an undo cannot tell whether the mount
// it undoes was ever made (a crash may come between the journaled intent and the mount),
// so an idempotent undo would take away another container's count, and DeleteImage of a
// mounted image unmounts it and deletes its layers under the containers that use it. A
// storage container of its own is owned by one CRI container: its undo is
// DeleteContainer, where "no such container" is success, and the image it comes from
// cannot be removed while the volume exists (ErrImageInUse), as for a root filesystem.

// StepImageVolume creates and mounts the storage container of one image volume of a CRI
// container. Args: ArgID (the volume's storage container ID, see ImageVolumeID). Made by
// ImageVolumeStep. The string is stored in the journal: never change it.
const StepImageVolume journal.StepKind = "storage-image-volume"

// StageImageVolume is the stage of a StepImageVolume, as inspect, logs and waiting
// requests show it.
const StageImageVolume = "image volume mount"

// imageVolumeInfix joins a CRI container ID and a volume's index in ImageVolumeID.
const imageVolumeInfix = "-imagevolume-"

// ImageVolumeID is the storage container ID of image volume index (0, 1, ...) of CRI
// container containerID: "<containerID>-imagevolume-<index>". It starts with the CRI
// container's ID so that whoever reads the store sees whose volume it is.
func ImageVolumeID(containerID string, index int) string {
	return containerID + imageVolumeInfix + strconv.Itoa(index)
}

// validImageVolumeID reports whether id is an ImageVolumeID.
func validImageVolumeID(id string) bool {
	ctr, n, ok := strings.Cut(id, imageVolumeInfix)
	if !ok || len(ctr) != 64 || !isHex(ctr) {
		return false
	}
	i, err := strconv.Atoi(n)
	return err == nil && i >= 0 && strconv.Itoa(i) == n
}

// ImageVolumeRequest is what one image volume is made from.
type ImageVolumeRequest struct {
	ContainerID string // the CRI container's ID
	Index       int    // the volume's index among the container's image volumes
	ImageID     string // the image's full ID
	Destination string // the container path, for people reading the store
}

// ImageVolumeStep returns the step that creates and mounts, read-only, the storage
// container of one image volume; its result is the mounted root of the image's files.
func ImageVolumeStep(s *Store, req ImageVolumeRequest) journal.Action[string] {
	id := ImageVolumeID(req.ContainerID, req.Index)
	return journal.Action[string]{Kind: StepImageVolume, Stage: StageImageVolume,
		Args: map[string]string{ArgID: id},
		Run: func(ctx context.Context) (string, error) {
			return s.MountImageVolume(ctx, id, req.ImageID, map[string]string{
				"io.crijournal.container": req.ContainerID, "io.crijournal.image-volume": req.Destination})
		}}
}

// MountImageVolume creates storage container id (an ImageVolumeID) from image imageID (its
// full ID), mounted read-only, and mounts it; it returns the mount's path. A retry finds
// the first attempt's container (from the same image) and mount. ErrImageNotFound when the
// image is not in the store. Undone by DeleteContainer.
func (s *Store) MountImageVolume(ctx context.Context, id, imageID string, labels map[string]string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("image volume %s: %w", id, err)
	}
	if !validImageVolumeID(id) {
		return "", fmt.Errorf("image volume: id %q is not <container ID>%s<n>", id, imageVolumeInfix)
	}
	img, err := s.st.Image(imageID)
	if errors.Is(err, cstorage.ErrImageUnknown) || (err == nil && img.ID != imageID) {
		return "", fmt.Errorf("image volume %s: image %s: %w", id, imageID, ErrImageNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("image volume %s: image %s: %w", id, imageID, err)
	}
	c, err := s.existing(id, img.ID)
	if err != nil {
		return "", fmt.Errorf("image volume: %w", err)
	}
	if c == nil {
		meta, err := json.Marshal(containerMetadata{Labels: labels})
		if err != nil {
			return "", fmt.Errorf("image volume %s: %w", id, err)
		}
		_, err = s.st.CreateContainer(id, nil, img.ID, "", string(meta), &cstorage.ContainerOptions{MountOpts: s.imageVolumeMountOpts()})
		if errors.Is(err, cstorage.ErrDuplicateID) {
			c, err = s.existing(id, img.ID) // created concurrently by another attempt
			if err == nil && c == nil {
				err = fmt.Errorf("image volume %s: %w", id, cstorage.ErrDuplicateID)
			}
		}
		if err != nil {
			return "", fmt.Errorf("image volume %s from image %s: %w", id, img.ID, err)
		}
		s.log.Debug("image volume created", "id", id, "image", img.ID)
	}
	root, err := s.Mount(ctx, id)
	if err != nil {
		return "", fmt.Errorf("image volume: %w", err)
	}
	return root, nil
}

// imageVolumeMountOpts returns the mount options of an image volume's storage container.
// "ro": the overlay driver mounts the layers without an upper directory, so the files
// cannot be changed through this mount at all (the container's bind mount is read-only
// too). "nodev" on overlay: a container's own options replace the driver's mountopt,
// which has it for root filesystems (see Open); vfs refuses every option but "ro".
func (s *Store) imageVolumeMountOpts() []string {
	if s.Driver() == DriverOverlay {
		return []string{"ro", "nodev"}
	}
	return []string{"ro"}
}
