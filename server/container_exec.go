package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci"
)

// ExecSync runs a command in a running container and returns its output (at most 15 MiB
// of stdout and stderr together, see oci.Runtime.ExecSync) and exit code. At most
// exec_sync_max_concurrent calls run at once; one more is refused with ResourceExhausted
// (see execSlots).
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
	release, err := s.execSyncs.take()
	if err != nil {
		return nil, fmt.Errorf("exec in container %s: %w", c.rec.ID, err)
	}
	defer release()
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

// execSlots caps the ExecSync calls that run at once: a buffered channel holding a token
// per call running, its capacity exec_sync_max_concurrent. A nil one caps nothing.
type execSlots chan struct{}

// take takes a slot for a call and returns its release, or refuses at once (errBusy)
// when every slot is taken. It does not wait for one: the kubelet throws away an exec
// probe that failed with an error and probes again at its next period, whereas a probe
// that waited out its deadline would count as failed (the CRI client turns
// DeadlineExceeded into a timed-out probe) and could restart a healthy container on a
// node that is only busy.
func (e execSlots) take() (release func(), err error) {
	if e == nil {
		return func() {}, nil
	}
	select {
	case e <- struct{}{}:
		return func() { <-e }, nil
	default:
		return nil, newError(errBusy, "%d ExecSync calls are running, as many as exec_sync_max_concurrent allows; try again later", cap(e))
	}
}
