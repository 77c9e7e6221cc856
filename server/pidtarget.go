package server

import (
	"context"
	"errors"
	"fmt"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci"
)

// targetPidNamespace returns the pid namespace a new container joins when its pid
// option is TARGET (kubectl debug --target): /proc/<init pid>/ns/pid of the target
// container, which must be a created container of the same sandbox and running. It
// returns "" for the other modes. The runtime names the namespace
// (oci.Runtime.PidNamespace).
func (s *Server) targetPidNamespace(ctx context.Context, sb sandbox, cfg *runtimeapi.ContainerConfig) (string, error) {
	opts := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	if opts.GetPid() != runtimeapi.NamespaceMode_TARGET {
		return "", nil
	}
	id := opts.GetTargetId()
	if id == "" {
		return "", invalidf("pid namespace TARGET needs namespace_options.target_id")
	}
	target, err := s.findContainer(id)
	if err != nil {
		return "", fmt.Errorf("pid namespace TARGET: target container: %w", err)
	}
	if target.obj.SandboxID != sb.rec.ID {
		return "", invalidf("pid namespace TARGET: target container %s is in sandbox %s, not in this container's sandbox %s",
			target.rec.ID, target.obj.SandboxID, sb.rec.ID)
	}
	if st := target.state(); st != runtimeapi.ContainerState_CONTAINER_RUNNING {
		return "", fmt.Errorf("pid namespace TARGET: %w", errContainerState(target.rec.ID, st, "RUNNING"))
	}
	rt, err := s.runtimes.Runtime(target.obj.Handler)
	if err != nil {
		return "", err
	}
	ns, err := rt.PidNamespace(ctx, target.rec.ID)
	switch {
	case errors.Is(err, oci.ErrNotFound):
		return "", newError(errWrongState, "pid namespace TARGET: target container %s is not known to its runtime: it does not run", target.rec.ID)
	case errors.Is(err, oci.ErrNotRunning):
		return "", newError(errWrongState, "pid namespace TARGET: target %v", err)
	case err != nil:
		return "", fmt.Errorf("pid namespace TARGET: state of target container %s: %w", target.rec.ID, err)
	}
	return ns, nil
}
