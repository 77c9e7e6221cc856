package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	cstorage "go.podman.io/storage"
	"go.podman.io/storage/pkg/idtools"
	"go.podman.io/storage/types"
)

// ContainerInfo describes a storage container: the root filesystem of one CRI container.
type ContainerInfo struct {
	ID      string // the CRI container ID
	ImageID string
	Name    string // "" when created without one
}

// containerMetadata is stored with each storage container, for people reading the store.
type containerMetadata struct {
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// CreateContainer creates the storage container id (the CRI container ID, 64 lowercase hex)
// from image imageID (an ID or an unambiguous ID prefix), with name (the CRI container's,
// or "") in its metadata. It has no containers/storage name: a name is unique in the
// store, and the root filesystem of a removed container may still wait for its deletion
// (its undo is deferred: see RegisterUndos) when another is made under the same name. When
// a storage container id already exists and comes from the same image it is returned as is,
// so that a retried creation step finds the first attempt's work. ErrImageNotFound when the
// image is not in the store.
func (s *Store) CreateContainer(ctx context.Context, id, name, imageID string, labels map[string]string) (ContainerInfo, error) {
	c, _, err := s.createContainer(ctx, ContainerRequest{ID: id, Name: name, ImageID: imageID, Labels: labels})
	if err != nil {
		return ContainerInfo{}, err
	}
	return infoOf(c), nil
}

// createContainer is CreateContainer of a request, whose ID mappings, when set, are
// the user namespace the container runs in: its files are then owned by the IDs
// that are root (and so on) in that namespace, by idmapped mounts where the driver
// can (overlay on a kernel with idmapped overlay layers), else by a chowned copy.
// It returns the storage container, and made when this call made it (it then has never
// been mounted).
func (s *Store) createContainer(ctx context.Context, req ContainerRequest) (c *cstorage.Container, made bool, err error) {
	id, name, imageID := req.ID, req.Name, req.ImageID
	if err := ctx.Err(); err != nil {
		return nil, false, fmt.Errorf("create storage container %s: %w", id, err)
	}
	if len(id) != 64 || !isHex(id) {
		return nil, false, fmt.Errorf("create storage container: id %q is not 64 lowercase hex", id)
	}
	img, err := s.st.Image(imageID)
	if errors.Is(err, cstorage.ErrImageUnknown) || (err == nil && img.ID != imageID && !isPrefix(imageID, img.ID)) {
		return nil, false, fmt.Errorf("create storage container %s: image %s: %w", id, imageID, ErrImageNotFound)
	}
	if err != nil {
		return nil, false, fmt.Errorf("create storage container %s: image %s: %w", id, imageID, err)
	}
	if c, err := s.existing(id, img.ID); c != nil || err != nil {
		return c, false, err
	}
	meta, err := json.Marshal(containerMetadata{Name: name, Labels: req.Labels})
	if err != nil {
		return nil, false, fmt.Errorf("create storage container %s: %w", id, err)
	}
	var opts *cstorage.ContainerOptions
	if len(req.UIDMap) > 0 || len(req.GIDMap) > 0 {
		opts = &cstorage.ContainerOptions{IDMappingOptions: types.IDMappingOptions{
			UIDMap: idtoolsMaps(req.UIDMap), GIDMap: idtoolsMaps(req.GIDMap)}}
	}
	c, err = s.st.CreateContainer(id, nil, img.ID, "", string(meta), opts)
	if errors.Is(err, cstorage.ErrDuplicateID) {
		// Created concurrently by another attempt.
		if c, err := s.existing(id, img.ID); c != nil || err != nil {
			return c, false, err
		}
	}
	if err != nil {
		return nil, false, fmt.Errorf("create storage container %s from image %s: %w", id, img.ID, err)
	}
	s.log.Debug("storage container created", "id", id, "name", name, "image", img.ID)
	return c, true, nil
}

// existing returns storage container id when it exists and comes from image imageID; nil
// when it does not exist, and an error when it comes from another image.
func (s *Store) existing(id, imageID string) (*cstorage.Container, error) {
	c, err := s.st.Container(id)
	if errors.Is(err, cstorage.ErrContainerUnknown) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("create storage container %s: %w", id, err)
	}
	if c.ID != id {
		// Found by name or by ID prefix: not the container asked for.
		return nil, nil
	}
	if c.ImageID != imageID {
		return nil, fmt.Errorf("create storage container %s: it exists from image %s, not %s: %w",
			id, c.ImageID, imageID, cstorage.ErrDuplicateID)
	}
	return c, nil
}

func idtoolsMaps(maps []IDMap) []idtools.IDMap {
	out := make([]idtools.IDMap, len(maps))
	for i, m := range maps {
		out[i] = idtools.IDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)}
	}
	return out
}

// infoOf describes c; its name is the one in its metadata, or its first
// containers/storage name (containers made before names moved to the metadata).
func infoOf(c *cstorage.Container) ContainerInfo {
	info := ContainerInfo{ID: c.ID, ImageID: c.ImageID}
	var meta containerMetadata
	if json.Unmarshal([]byte(c.Metadata), &meta) == nil && meta.Name != "" {
		info.Name = meta.Name
	} else if len(c.Names) > 0 {
		info.Name = c.Names[0]
	}
	return info
}

func isPrefix(prefix, id string) bool {
	return len(prefix) >= minIDPrefix && len(prefix) <= len(id) && id[:len(prefix)] == prefix
}

// Mount mounts the root filesystem of storage container id and returns its path. Mounting
// a mounted root filesystem returns the same path and does not stack: one Unmount undoes
// any number of Mounts. ErrContainerNotFound for an unknown id.
func (s *Store) Mount(ctx context.Context, id string) (rootfs string, err error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("mount %s: %w", id, err)
	}
	c, err := s.container(id)
	if err != nil {
		return "", fmt.Errorf("mount: %w", err)
	}
	return s.mount(c, false)
}

// mount mounts the root filesystem of c, as Mount does; when made (c was made by
// createContainer just now, so never mounted), without first asking whether it is
// mounted: each question takes containers/storage's locks once more, and four
// creations at a time queue on them.
func (s *Store) mount(c *cstorage.Container, made bool) (rootfs string, err error) {
	s.mountMu.Lock()
	defer s.mountMu.Unlock()
	if !made {
		if n, err := s.st.Mounted(c.ID); err == nil && n > 0 {
			if layer, err := s.st.Layer(c.LayerID); err == nil && layer.MountPoint != "" {
				return layer.MountPoint, nil
			}
		}
	}
	path, err := s.st.Mount(c.ID, c.MountLabel())
	if err != nil {
		return "", fmt.Errorf("mount %s: %w", c.ID, err)
	}
	return path, nil
}

// Unmount unmounts the root filesystem of storage container id, however many times it was
// mounted. Not mounted, or no such container, is success.
func (s *Store) Unmount(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("unmount %s: %w", id, err)
	}
	c, err := s.container(id)
	if errors.Is(err, ErrContainerNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("unmount: %w", err)
	}
	s.mountMu.Lock()
	defer s.mountMu.Unlock()
	if _, err := s.st.Unmount(c.ID, true); err != nil && !isGone(err) && !errors.Is(err, cstorage.ErrLayerNotMounted) {
		return fmt.Errorf("unmount %s: %w", id, err)
	}
	return nil
}

// DeleteContainer unmounts (however many times it was mounted) and deletes storage
// container id, with its directories, and first the bind mount of its root filesystem
// for a user namespace (see rootfs.go) when there is one. No such container is success.
// containers/storage unmounts the layer itself, under the lock it deletes it with: an
// Unmount first would look the container up and take that lock once more.
func (s *Store) DeleteContainer(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete storage container %s: %w", id, err)
	}
	if err := s.unbindUserRootfs(id); err != nil {
		return fmt.Errorf("delete storage container: %w", err)
	}
	c, err := s.st.Container(id)
	if isGone(err) || (err == nil && c.ID != id) {
		return nil // unknown (or only a name or ID prefix of another)
	}
	if err != nil {
		return fmt.Errorf("delete storage container %s: %w", id, err)
	}
	if err := s.st.DeleteContainer(id); err != nil && !isGone(err) {
		return fmt.Errorf("delete storage container %s: %w", id, err)
	}
	s.log.Debug("storage container deleted", "id", id)
	return nil
}

// Containers returns the IDs of every storage container, for leak checks.
func (s *Store) Containers(ctx context.Context) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list storage containers: %w", err)
	}
	cs, err := s.st.Containers()
	if err != nil {
		return nil, fmt.Errorf("list storage containers: %w", err)
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids, nil
}

// container returns storage container id, which must be its full ID.
func (s *Store) container(id string) (*cstorage.Container, error) {
	c, err := s.st.Container(id)
	if isGone(err) || (err == nil && c.ID != id) {
		return nil, fmt.Errorf("%s: %w", id, ErrContainerNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("storage container %s: %w", id, err)
	}
	return c, nil
}

// isGone reports whether err says that a container or its layer does not exist.
func isGone(err error) bool {
	return errors.Is(err, cstorage.ErrContainerUnknown) || errors.Is(err, cstorage.ErrLayerUnknown) ||
		errors.Is(err, cstorage.ErrNotAContainer)
}
