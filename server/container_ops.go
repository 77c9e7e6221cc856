package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// ContainerStatus reports a container.
func (s *Server) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	c, err := s.findContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := s.recordExit(ctx, c); err != nil {
		s.log.Warn("container exit not readable", "id", c.rec.ID, "name", c.rec.Name, "err", err)
	}
	if c, err = s.findContainer(c.rec.ID); err != nil {
		return nil, err
	}
	st := &runtimeapi.ContainerStatus{
		Id: c.rec.ID, Metadata: c.config.GetMetadata(), State: c.state(),
		CreatedAt: c.obj.CreatedAt.UnixNano(), StartedAt: markerTime(c.rec, markerStartedAt),
		FinishedAt: markerTime(c.rec, markerFinishedAt),
		Image:      c.config.GetImage(), ImageRef: c.obj.ImageRef, ImageId: c.obj.ImageID,
		Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(),
		Mounts: c.mounts(), LogPath: c.obj.LogPath,
		User: c.user(), Resources: c.resources(), StopSignal: criSignal(c.stopSignal()),
	}
	if v, ok := c.rec.Marker(markerExitCode); ok {
		code, _ := strconv.Atoi(v)
		st.ExitCode = int32(code)
		st.Reason, _ = c.rec.Marker(markerReason)
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: st}
	if req.GetVerbose() {
		resp.Info = map[string]string{"info": infoJSON(map[string]any{
			"sandbox_id": c.obj.SandboxID, "runtime_handler": c.obj.Handler, "bundle": c.obj.Bundle, "rootfs": c.obj.Rootfs,
			"journal": map[string]any{"state": c.rec.State, "steps": c.rec.Steps, "markers": c.rec.Markers},
		})}
	}
	return resp, nil
}

// ListContainers lists created containers; cached and in-progress ones are hidden.
func (s *Server) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	f := req.GetFilter()
	recs := s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindContainer && r.State == journal.StateCreated && strings.HasPrefix(r.ID, f.GetId()) &&
			(f.GetPodSandboxId() == "" || strings.HasPrefix(r.Parent, f.GetPodSandboxId()))
	})
	if f.GetId() == "" && f.GetPodSandboxId() == "" {
		s.containerCache.keepOnly(recs)
	}
	resp := &runtimeapi.ListContainersResponse{}
	for _, rec := range recs {
		c, err := s.listedContainer(rec)
		if err != nil {
			s.log.Warn("skipping undecodable container", "id", rec.ID, "name", rec.Name, "err", err)
			continue
		}
		if f.GetState() != nil && f.GetState().GetState() != c.state() {
			continue
		}
		if !labelsMatch(c.config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		resp.Containers = append(resp.Containers, &runtimeapi.Container{
			Id: rec.ID, PodSandboxId: c.obj.SandboxID, Metadata: c.config.GetMetadata(), Image: c.config.GetImage(),
			ImageRef: c.obj.ImageRef, ImageId: c.obj.ImageID, State: c.state(), CreatedAt: c.obj.CreatedAt.UnixNano(),
			Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(),
		})
	}
	return resp, nil
}

// ExecSync runs a command in a running container and returns its output and exit code.
func (s *Server) ExecSync(ctx context.Context, req *runtimeapi.ExecSyncRequest) (*runtimeapi.ExecSyncResponse, error) {
	c, err := s.findContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCmd()) == 0 {
		return nil, invalidf("cmd is required")
	}
	if st := c.state(); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return nil, errContainerState(c.rec.ID, st, "RUNNING")
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return nil, err
	}
	stdout, stderr, code, err := rt.ExecSync(ctx, c.rec.ID, req.GetCmd(), time.Duration(req.GetTimeout())*time.Second)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, oci.ErrExecTimeout) {
			return nil, newError(errTimedOut, "exec in container %s timed out after %ds: %v", c.rec.ID, req.GetTimeout(), err)
		}
		return nil, fmt.Errorf("exec in container %s: %w", c.rec.ID, err)
	}
	return &runtimeapi.ExecSyncResponse{Stdout: stdout, Stderr: stderr, ExitCode: int32(code)}, nil
}

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

// OnContainerExit records a container's exit as soon as conmon reports it (the runtimes'
// exit watchers call it), so the status survives a restart without polling.
func (s *Server) OnContainerExit(id string) {
	c, err := s.findContainer(id)
	if err != nil {
		return // not ours, or not yet created: ContainerStatus will record it
	}
	if err := s.recordExit(context.Background(), c); err != nil {
		s.log.Warn("container exit not recorded", "id", id, "name", c.rec.Name, "err", err)
		return
	}
	s.log.Info("container exited", "id", id, "name", c.rec.Name)
}
