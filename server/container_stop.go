package server

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci"
)

// stopSignal is the container's stop signal: the image's, else SIGTERM.
func stopSignal(name string) syscall.Signal {
	if name == "" {
		return syscall.SIGTERM
	}
	sig, err := oci.ParseSignal(name)
	if err != nil {
		return syscall.SIGTERM
	}
	return sig
}

// StopContainer sends the stop signal, waits up to the timeout, then SIGKILL. Stopping a
// stopped container is success, and so is stopping an unknown one (per the CRI).
func (s *Server) StopContainer(ctx context.Context, req *runtimeapi.StopContainerRequest) (*runtimeapi.StopContainerResponse, error) {
	c, err := s.findContainer(req.GetContainerId())
	if errors.Is(err, errNotFound) {
		return &runtimeapi.StopContainerResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	if err := s.stopContainer(ctx, c, time.Duration(req.GetTimeout())*time.Second); err != nil {
		return nil, err
	}
	return &runtimeapi.StopContainerResponse{}, nil
}

func (s *Server) stopContainer(ctx context.Context, c container, timeout time.Duration) error {
	exited := c.state() == runtimeapi.ContainerState_CONTAINER_EXITED
	if reason, _ := c.rec.Marker(markerReason); exited && reason != oci.ReasonUnknown {
		return nil
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		return err
	}
	// An exit recorded as unknown was concluded without conmon's word; earlier versions
	// did so on any failed runtime query, while the container ran on. Stop it anyway:
	// stopping a stopped container costs one runtime query.
	started := c.state() != runtimeapi.ContainerState_CONTAINER_CREATED
	err = rt.Stop(ctx, c.rec.ID, started, c.stopSignal(), timeout)
	if errors.Is(err, oci.ErrNotFound) {
		// The runtime definitely does not know it: nothing runs.
		if exited {
			return nil
		}
		return s.recordExit(ctx, c)
	}
	if err != nil {
		return fmt.Errorf("stop container %s: %w", c.rec.ID, err)
	}
	if exited {
		return nil
	}
	if c.state() == runtimeapi.ContainerState_CONTAINER_CREATED {
		// Never started: the runtime's init process is killed; record a plain exit.
		return s.exitMarkers(ctx, c, map[string]*string{
			markerExitCode: stringPtr("0"), markerReason: stringPtr(oci.ReasonCompleted), markerFinishedAt: nowMarker(),
		})
	}
	// Stop has waited for conmon to record the exit (its exit file), so the status
	// says how it ended.
	if err := s.recordExit(ctx, c); err != nil {
		return err
	}
	s.log.Info("container stopped", "id", c.rec.ID, "name", c.rec.Name)
	return nil
}

// stopSignal is the signal that stops the container: its config's stop_signal, else its
// image's, else SIGTERM.
func (c container) stopSignal() syscall.Signal {
	if sig := c.config.GetStopSignal(); sig != runtimeapi.Signal_SIGNAL_RUNTIME_DEFAULT {
		if s, err := oci.ParseSignal(criSignalName(sig)); err == nil {
			return s
		}
	}
	return stopSignal(c.obj.StopSig)
}
