package server

import (
	"context"
	"errors"
	"fmt"
	"sync"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
)

// StopPodSandbox tears the pod's network down (CNI DEL, journaled as the undo of the
// attach step) and marks the sandbox stopped in its record. It is idempotent, and an
// unknown ID is success, as in CRI-O. Teardowns of one sandbox run one at a time.
func (s *Server) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	sb, err := s.findSandbox(req.GetPodSandboxId())
	if errors.Is(err, errNotFound) {
		s.log.Info("stop of an unknown sandbox: nothing to do", "id", req.GetPodSandboxId())
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	unlock, err := s.teardowns.lock(ctx, sb.rec.ID)
	if err != nil {
		return nil, fmt.Errorf("stop sandbox %s: waiting for another stop or removal of it: %w", sb.rec.ID, err)
	}
	defer unlock()
	// Look again: the teardown that ran meanwhile may have stopped or removed it.
	if sb, err = s.findSandbox(sb.rec.ID); errors.Is(err, errNotFound) {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	} else if err != nil {
		return nil, err
	}
	// No container creation may be running in the pod while it is stopped: one that
	// finished afterwards would run in a stopped pod, with its /dev/shm unmounted under
	// it. Those running now are waited for (and their containers stopped below); later
	// ones find the sandbox stopped.
	reopen, err := s.pods.close(ctx, sb.rec.ID)
	if err != nil {
		return nil, fmt.Errorf("stop sandbox %s: a container creation in it is still running; retry the stop once it has ended: %w", sb.rec.ID, err)
	}
	defer reopen()
	// The pod's containers are killed at once (as containerd does: the kubelet has
	// already stopped them gracefully), side by side, while the network is torn down: the
	// stop takes the longer of the kill and the CNI DEL, not their sum. NRI plugins are
	// shown the pod's stop after its containers' and before its network's teardown, as in
	// containerd and CRI-O; so where a plugin may be registered, the teardown waits for
	// the containers.
	waitContainers := s.stopContainersOf(ctx, sb.rec.ID)
	if s.nri.Plugged() {
		if err := waitContainers(); err != nil {
			return nil, fmt.Errorf("stop sandbox %s: %w", sb.rec.ID, err)
		}
	}
	_, wasStopped := sb.rec.Marker(markerStopped)
	var netErr error
	if !wasStopped {
		// NRI's StopPodSandbox, CNI DEL (the undo of the attach step), the pod's /dev/shm
		// unmounted (as CRI-O does at stop: no container of the pod runs again), and the
		// markers in one commit.
		nctx, cancel := detached(ctx, s.cfg.NetworkTimeout)
		at := nowMarker()
		markers := map[string]*string{markerNetworkStopped: at, markerStopped: at}
		s.nriStopPod(nctx, sb, markers)
		netErr = s.journal.UndoSteps(nctx, sb.rec.ID, markers, netns.StepAttach, netns.StepShm)
		cancel()
	}
	if err := errors.Join(waitContainers(), netErr); err != nil {
		return nil, fmt.Errorf("stop sandbox %s: %w", sb.rec.ID, err)
	}
	if !wasStopped {
		s.log.Info("pod sandbox stopped", "id", sb.rec.ID, "name", sb.rec.Name)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// stopContainersOf kills every created container of sandbox sandboxID (StopContainer with
// no grace), each in a goroutine of its own, and returns the wait for them: it returns
// their joined errors once all have ended, and may be called again. The caller must call
// it before it returns.
func (s *Server) stopContainersOf(ctx context.Context, sandboxID string) (wait func() error) {
	var containers []container
	for _, rec := range s.containersOf(sandboxID) {
		if c, err := decodeContainer(rec); err == nil && rec.State == journal.StateCreated {
			containers = append(containers, c)
		}
	}
	errs := make([]error, len(containers))
	var wg sync.WaitGroup
	for i, c := range containers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.stopContainer(ctx, c, 0)
		}()
	}
	return sync.OnceValue(func() error {
		wg.Wait()
		return errors.Join(errs...)
	})
}

// RemovePodSandbox removes a sandbox: the journal undoes every step still in effect (CNI
// DEL unless stopped, the pod's files, the pause process and its cgroup, then the
// namespace pins), last first, and deletes the record. The record is marked removing
// before anything is undone, so a crash part way is finished at the next start. An
// unknown ID is success, per the CRI. Teardowns of one sandbox run one at a time.
func (s *Server) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	rec, err := s.findRecord(journal.KindSandbox, req.GetPodSandboxId())
	if errors.Is(err, errNotFound) {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	unlock, err := s.teardowns.lock(ctx, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("remove sandbox %s: waiting for another stop or removal of it: %w", rec.ID, err)
	}
	defer unlock()
	if rec, err = s.findRecord(journal.KindSandbox, rec.ID); errors.Is(err, errNotFound) {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	} else if err != nil {
		return nil, err
	}
	// No container creation may be running in the pod while its containers are
	// listed and removed: one that finished afterwards would belong to no pod.
	reopen, err := s.pods.close(ctx, rec.ID)
	if err != nil {
		return nil, fmt.Errorf("remove sandbox %s: a container creation in it is still running; retry the removal once it has ended: %w", rec.ID, err)
	}
	defer reopen()
	// The pod's containers first; cached or half-made ones are rolled back.
	for _, c := range s.containersOf(rec.ID) {
		if c.State == journal.StateCreated {
			if err := s.removeContainer(ctx, c); err != nil {
				return nil, fmt.Errorf("remove sandbox %s: %w", rec.ID, err)
			}
		} else if c.State == journal.StateCached {
			if err := s.creations.Rollback(ctx, c); err != nil {
				return nil, fmt.Errorf("remove sandbox %s: rolling back its cached container %s: %w", rec.ID, c.ID, err)
			}
		}
	}
	rctx, cancel := detached(ctx, s.cfg.NetworkTimeout)
	defer cancel()
	err = s.journal.Remove(rctx, rec.ID)
	var uerr *journal.UndoError
	switch {
	case errors.As(err, &uerr):
		// The sandbox is gone for the kubelet; what could not be cleaned is the journal's
		// to retry.
		s.log.Warn("pod sandbox removed, but an undo failed and will be retried", "id", rec.ID, "name", rec.Name, "err", err)
	case errors.Is(err, journal.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("remove sandbox %s: %w", rec.ID, err)
	default:
		s.log.Info("pod sandbox removed", "id", rec.ID, "name", rec.Name)
	}
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}
