package server

import (
	"context"
	"errors"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// exitReaper deletes the runtime container (runc delete, which removes its cgroup) of a
// container whose exit is recorded, in the background, as containerd deletes a task when
// it exits (oci.Runtime.Release). The container stays for the CRI: its record, status,
// log, bundle (the spec NRI plugins are shown) and root filesystem are the removal's,
// whose undo of the runtime step (oci.Runtime.Delete) then has no runtime container left
// to delete. So a pod's removal no longer waits for runc, and a StopPodSandbox's kill
// lets the delete run while the CNI DEL waits on the kernel.
//
// The release is part of the runtime step's undo, done early and idempotent; the step
// stays done in the journal, since its bundle and state remain until the removal. A
// release that fails or is cut short is the removal's to finish. One worker releases one
// container at a time, in the order the exits came.
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

// reapExited releases the runtime container of exited container id (see exitReaper). A
// container being removed, or not exited, is left alone. A removal that starts meanwhile
// needs no lock of ours: the runtime keeps Release and Delete of one ID apart, and a
// Release after Delete finds no exit file (ErrNoExit) and does nothing.
func (s *Server) reapExited(ctx context.Context, id string) {
	c, err := s.findContainer(id)
	if err != nil || c.rec.State != journal.StateCreated || c.state() != runtimeapi.ContainerState_CONTAINER_EXITED {
		return
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, removalTimeout)
	defer cancel()
	switch err := rt.Release(rctx, id); {
	case err == nil:
		s.log.Debug("exited container's runtime container deleted", "id", id, "name", c.rec.Name)
	case ctx.Err() != nil, errors.Is(err, oci.ErrNoExit):
	default:
		s.log.Warn("exited container's runtime container not deleted; its removal will", "id", id, "name", c.rec.Name, "err", err)
	}
}
