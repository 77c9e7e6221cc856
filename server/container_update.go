package server

import (
	"context"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/nri"
	"github.com/crijournal/crijournal/oci"
)

// UpdateContainerResources changes a container's cgroup limits. NRI plugins are asked
// first (UpdateContainer: they may change the resources, and ask for updates of other
// containers) and told after (PostUpdateContainer).
func (s *Server) UpdateContainerResources(ctx context.Context, req *runtimeapi.UpdateContainerResourcesRequest) (*runtimeapi.UpdateContainerResourcesResponse, error) {
	c, err := s.findContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	res := req.GetLinux()
	if s.nri.Plugged() && res != nil {
		pod, ctr, err := s.nriOf(c)
		if err != nil {
			return nil, err
		}
		adjusted, others, err := s.nri.UpdateContainer(ctx, pod, ctr, nri.Resources(res))
		if err != nil {
			return nil, err
		}
		res = nri.CRIResources(adjusted, res)
		defer s.nriApply(ctx, others, nil)
	}
	if err := s.updateResources(ctx, c, res); err != nil {
		return nil, err
	}
	s.nriEvent(ctx, c, "PostUpdateContainer", s.nri.PostUpdateContainer)
	return &runtimeapi.UpdateContainerResourcesResponse{}, nil
}

// updateResources sets a container's resources (the CRI's own fields) and records them:
// the path of UpdateContainerResources and of the updates NRI plugins ask for.
func (s *Server) updateResources(ctx context.Context, c container, linux *runtimeapi.LinuxContainerResources) error {
	if st := c.state(); st == runtimeapi.ContainerState_CONTAINER_EXITED {
		return errContainerState(c.rec.ID, st, "CREATED or RUNNING")
	}
	res, err := oci.Resources(linux)
	if err != nil {
		return invalidf("%w", err)
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return err
	}
	if err := rt.UpdateResources(ctx, c.rec.ID, res); err != nil {
		return fmt.Errorf("update resources of %s: %w", c.rec.ID, err)
	}
	return s.recordResources(ctx, c, linux)
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
