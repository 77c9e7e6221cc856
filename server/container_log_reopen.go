package server

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ReopenContainerLog asks conmon to reopen the container's log file (after rotation).
func (s *Server) ReopenContainerLog(ctx context.Context, req *runtimeapi.ReopenContainerLogRequest) (*runtimeapi.ReopenContainerLogResponse, error) {
	c, err := s.findContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if st := c.state(); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, errContainerState(c.rec.ID, st, "RUNNING")
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return nil, err
	}
	if err := rt.ReopenLog(ctx, c.rec.ID); err != nil {
		return nil, fmt.Errorf("reopen log of %s: %w", c.rec.ID, err)
	}
	return &runtimeapi.ReopenContainerLogResponse{}, nil
}
