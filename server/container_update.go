package server

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci"
)

// UpdateContainerResources changes a container's cgroup limits.
func (s *Server) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, err := s.findContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if st := c.state(); st == runtimeapi.ContainerState_CONTAINER_EXITED {
		return nil, errContainerState(c.rec.ID, st, "CREATED or RUNNING")
	}
	res, err := oci.Resources(req.GetLinux())
	if err != nil {
		return nil, invalidf("%w", err)
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return nil, err
	}
	if err := rt.UpdateResources(ctx, c.rec.ID, res); err != nil {
		return nil, fmt.Errorf("update resources of %s: %w", c.rec.ID, err)
	}
	if err := s.recordResources(ctx, c, req.GetLinux()); err != nil {
		return nil, err
	}
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// recordResources keeps the resources UpdateContainerResources set, for ContainerStatus.
func (s *Server) recordResources(ctx context.Context, c container, res *runtimeapi.LinuxContainerResources) error {
	if res == nil {
		return nil
	}
	c.obj.Resources = mustMarshal(res)
	if err := s.journal.SetObject(c.rec.ID, c.obj); err != nil {
		return fmt.Errorf("record resources of %s: %w", c.rec.ID, err)
	}
	return nil
}
