package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci"
)

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

// Exec validates an exec request (the container exists and runs, a command is given)
// and returns the URL of its session.
func (s *Server) Exec(ctx context.Context, req *runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error) {
	c, err := s.runningContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if len(req.GetCmd()) == 0 {
		return nil, invalidf("cmd is required")
	}
	st := s.streams.Load()
	if st == nil {
		return nil, errNoStreams
	}
	req.ContainerId = c.rec.ID
	return st.GetExec(req)
}

// Attach validates an attach request (the container exists and runs) and returns the
// URL of its session.
func (s *Server) Attach(ctx context.Context, req *runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error) {
	c, err := s.runningContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	st := s.streams.Load()
	if st == nil {
		return nil, errNoStreams
	}
	req.ContainerId = c.rec.ID
	return st.GetAttach(req)
}
