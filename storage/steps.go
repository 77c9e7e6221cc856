package storage

import (
	"context"
	"fmt"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/crijournal/crijournal/journal"
)

// StepContainerStorage creates the storage container (the root filesystem) of a CRI
// container. Args: ArgID. Made by ContainerStep. The string is stored in the journal:
// never change it.
const StepContainerStorage journal.StepKind = "storage-container"

// StageContainer is the stage of a StepContainerStorage, as inspect, logs and waiting
// requests show it.
const StageContainer = "container storage creation"

// ArgID is the key of StepContainerStorage's argument: the storage container's ID.
const ArgID = "id"

// ContainerRequest is what a CRI container's storage container is made from.
type ContainerRequest struct {
	ID      string // the CRI container's ID, which the storage container takes
	Name    string
	ImageID string
	Labels  map[string]string
	// UIDMap and GIDMap are the user namespace the container runs in (its pod's), or
	// none for the node's: the root filesystem is then owned by the mapped IDs.
	UIDMap, GIDMap []IDMap
}

// IDMap is one range of a user namespace's uid or gid map: Size IDs from ContainerID
// inside map to HostID outside. It is the OCI spec's type, as netns.IDMap is, so that
// one mapping serves both.
type IDMap = specs.LinuxIDMapping

// ContainerStep returns the step that creates and mounts the storage container of a CRI
// container in store s (see Store.CreateContainer and Store.Mount), and for a container
// in a user namespace bind-mounts its root filesystem where that namespace's root can
// reach it (see rootfs.go). Its result is the mounted root filesystem, the path to give
// the runtime: for a container in a user namespace, its bind mount under
// Options.RootfsDir. Its undo, Store.DeleteContainer, undoes all three.
func ContainerStep(s *Store, req ContainerRequest) journal.Action[string] {
	return journal.Action[string]{Kind: StepContainerStorage, Stage: StageContainer,
		Args: map[string]string{ArgID: req.ID},
		Run: func(ctx context.Context) (string, error) {
			c, made, err := s.createContainer(ctx, req)
			if err != nil {
				return "", err
			}
			rootfs, err := s.mount(c, made) // a retried step's container may be mounted already
			if err != nil {
				return "", err
			}
			if len(req.UIDMap) > 0 || len(req.GIDMap) > 0 {
				// Reached through a directory of the store's own that only the
				// namespace's root may search, not the store's 0700 directories
				// (see rootfs.go).
				owner, err := mappedRoot(req)
				if err != nil {
					return "", fmt.Errorf("storage container %s: %w", req.ID, err)
				}
				if rootfs, err = s.bindUserRootfs(req.ID, rootfs, owner); err != nil {
					return "", fmt.Errorf("storage container %s: %w", req.ID, err)
				}
			}
			return rootfs, nil
		}}
}

// RegisterUndos registers the undo of every step kind this package owns. stores hands out
// the open Store when an undo runs (at start-up recovery it may not be open yet: its error
// fails the undo, which is retried later). Both are deferred (journal.RegisterDeferred): a
// container's removal answers once its runtime container is deleted, and its root
// filesystem and image volumes, which only the daemon reaches, are deleted right after,
// off the removal's way: containers/storage deletes a layer under the lock every other
// layer's creation, mount and deletion waits for.
func RegisterUndos(reg *journal.Registry, stores func() (*Store, error)) {
	reg.RegisterDeferred(StepContainerStorage, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		id := step.Args[ArgID]
		if id == "" {
			return fmt.Errorf("undo %s of %s: no %q argument", step.Kind, rec.ID, ArgID)
		}
		s, err := stores()
		if err != nil {
			return fmt.Errorf("undo %s of %s: %w", step.Kind, rec.ID, err)
		}
		return s.DeleteContainer(ctx, id)
	})
	// An image volume's storage container goes the way a root filesystem does.
	reg.RegisterDeferred(StepImageVolume, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		id := step.Args[ArgID]
		if !validImageVolumeID(id) {
			return fmt.Errorf("undo %s of %s: %q argument %q is not an image volume ID", step.Kind, rec.ID, ArgID, id)
		}
		s, err := stores()
		if err != nil {
			return fmt.Errorf("undo %s of %s: %w", step.Kind, rec.ID, err)
		}
		return s.DeleteContainer(ctx, id)
	})
}
