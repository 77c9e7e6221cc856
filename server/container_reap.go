package server

import (
	"context"
	"errors"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// exitReaper deletes the runtime container (runc delete, conmon's files, the cgroup) of
// a container whose exit is recorded, in the background, as containerd deletes a task
// when it exits. The container stays for the CRI: its record, status, log and root file
// system are the removal's. What is left for RemoveContainer is then the storage, so a
// pod's removal no longer waits for runc; a StopPodSandbox's kill lets the delete run
// while the CNI DEL waits on the kernel.
//
// The delete is the undo of the container's runtime steps (oci.StepRuntimeContainer,
// oci.StepConmon), journaled as such: the steps are marked undone once it succeeded, and
// a delete that fails or is cut short leaves them done, for the removal to run again.
// One worker deletes one container at a time, in the order the exits came.
type exitReaper struct {
	exited *idQueue      // the containers whose exit was recorded
	done   chan struct{} // closed when run returns
}

func newExitReaper() *exitReaper {
	return &exitReaper{exited: newIDQueue(), done: make(chan struct{})}
}

// add queues container id; it never blocks (the exit watcher calls it).
func (r *exitReaper) add(id string) { r.exited.add(id) }

// run calls reap for each queued ID until ctx ends; it closes done when it returns.
func (r *exitReaper) run(ctx context.Context, reap func(ctx context.Context, id string)) {
	defer close(r.done)
	for {
		select {
		case <-r.exited.wake:
			for _, id := range r.exited.take() {
				if ctx.Err() != nil {
					return
				}
				reap(ctx, id)
			}
		case <-ctx.Done():
			return
		}
	}
}

// reapExited deletes the runtime container of exited container id (see exitReaper).
// A container removed meanwhile, or not exited, is left alone; it runs apart from the
// container's removal (teardowns), which then finds the runtime steps undone.
func (s *Server) reapExited(ctx context.Context, id string) {
	unlock, err := s.teardowns.lock(ctx, id)
	if err != nil {
		return // the daemon is stopping: the removal deletes it
	}
	defer unlock()
	c, err := s.findContainer(id)
	if err != nil || c.rec.State != journal.StateCreated || c.state() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, removalTimeout)
	defer cancel()
	err = s.journal.UndoSteps(rctx, id, nil, oci.StepRuntimeContainer, oci.StepConmon)
	switch {
	case err == nil:
		s.log.Debug("exited container's runtime container deleted", "id", id, "name", c.rec.Name)
	case errors.Is(err, journal.ErrNotFound), ctx.Err() != nil:
	default:
		s.log.Warn("exited container's runtime container not deleted; its removal will", "id", id, "name", c.rec.Name, "err", err)
	}
}
