package server

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// StartContainer starts a created container; NRI plugins are told before
// (StartContainer, whose failure fails the call) and after (PostStartContainer).
func (s *Server) StartContainer(ctx context.Context, req *runtimeapi.StartContainerRequest) (*runtimeapi.StartContainerResponse, error) {
	c, err := s.findContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if st := c.state(); st != runtimeapi.ContainerState_CONTAINER_CREATED {
		return nil, errContainerState(c.rec.ID, st, "CREATED")
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return nil, err
	}
	if s.nri.Plugged() {
		// A container that exits at once waits with its StopContainer event until the
		// PostStartContainer below is sent.
		defer s.nriStops.start(c.rec.ID)()
		pod, ctr, err := s.nriOf(c)
		if err == nil {
			err = s.nri.StartContainer(ctx, pod, ctr)
		}
		if err != nil {
			return nil, fmt.Errorf("start container %s: %w", c.rec.ID, err)
		}
	}
	if err := s.startContainer(ctx, c, rt); err != nil { // a restore, for a container from a checkpoint
		return nil, fmt.Errorf("start container %s: %w", c.rec.ID, err)
	}
	// The start is recorded without a commit of its own: it rides on the next one. A
	// crash that loses it leaves a record without it for a container that runs, which
	// reconciliation at the next start finds and marks started from the runtime's
	// answer (recordExit), as it does when the daemon dies between runc start and
	// this line.
	if err := s.journal.SetMarkerLazily(c.rec.ID, markerStartedAt, nowMarker()); err != nil {
		return nil, err
	}
	s.log.Info("container started", "id", c.rec.ID, "name", c.rec.Name)
	if s.layers != nil {
		s.layers.measureSoon(c.rec.ID) // its stats and metrics have a writable layer soon
	}
	if c, err := s.findContainer(c.rec.ID); err == nil {
		s.nriEvent(ctx, c, "PostStartContainer", s.nri.PostStartContainer)
	}
	return &runtimeapi.StartContainerResponse{}, nil
}
