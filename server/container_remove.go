package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// RemoveContainer stops (SIGKILL) and removes a container: the journal undoes its steps,
// last first (the runtime container, then its storage), and deletes the record. It
// answers once the runtime container is deleted; the root filesystem is deleted right
// after, by the journal's Maintain (storage.RegisterUndos). An unknown ID is success, per
// the CRI.
func (s *Server) RemoveContainer(ctx context.Context, req *runtimeapi.RemoveContainerRequest) (*runtimeapi.RemoveContainerResponse, error) {
	rec, err := s.findRecord(journal.KindContainer, req.GetContainerId())
	if errors.Is(err, errNotFound) {
		return &runtimeapi.RemoveContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.removeContainer(ctx, rec); err != nil {
		return nil, err
	}
	return &runtimeapi.RemoveContainerResponse{}, nil
}

// removalTimeout bounds the undos of a container's removal: the runtime's delete, then the
// storage container's.
const removalTimeout = 4 * time.Minute

func (s *Server) removeContainer(ctx context.Context, rec journal.Record) error {
	rctx, cancel := detached(ctx, removalTimeout)
	defer cancel()
	err := s.journal.Remove(rctx, rec.ID)
	var uerr *journal.UndoError
	switch {
	case errors.As(err, &uerr):
		s.log.Warn("container removed, but an undo failed and will be retried", "id", rec.ID, "name", rec.Name, "err", err)
	case errors.Is(err, journal.ErrNotFound):
	case err != nil:
		return fmt.Errorf("remove container %s: %w", rec.ID, err)
	default:
		s.log.Info("container removed", "id", rec.ID, "name", rec.Name)
	}
	return nil
}
