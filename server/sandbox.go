package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
)

// Markers of a sandbox record. They are stored on disk.
const (
	markerNetworkStopped = "network_stopped"
	markerStopped        = "stopped"
	// markerPauseExited is set when the pause process holding the pod's shared pid
	// namespace exits while the sandbox lives: no process can join it again.
	markerPauseExited = "pause_exited"
)

// sandboxObject is what the journal keeps of a created sandbox (Record.Object).
type sandboxObject struct {
	Config         []byte            `json:"config"` // PodSandboxConfig, protobuf
	RuntimeHandler string            `json:"runtime_handler,omitempty"`
	HostNetwork    bool              `json:"host_network,omitempty"`
	Namespaces     map[string]string `json:"namespaces,omitempty"` // kind -> pinned path
	IPs            []string          `json:"ips,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	// The pod's files its containers bind-mount (see podfiles.go); empty in records
	// written before they were made, whose containers get none.
	ResolvConf   string `json:"resolv_conf,omitempty"`
	HostnameFile string `json:"hostname_file,omitempty"`
	Shm          string `json:"shm,omitempty"` // the pod's tmpfs, or netns.HostShm for ipc NODE
}

// sandbox is a created sandbox as the server sees it.
type sandbox struct {
	rec    journal.Record
	obj    sandboxObject
	config *runtimeapi.PodSandboxConfig
}

func decodeSandbox(rec journal.Record) (sandbox, error) {
	sb := sandbox{rec: rec, config: &runtimeapi.PodSandboxConfig{}}
	err := decodeObject(rec, &sb.obj, &sb.obj.Config, sb.config)
	return sb, err
}

func (sb sandbox) state() runtimeapi.PodSandboxState {
	if _, gone := sb.rec.Marker(markerPauseExited); gone {
		return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	if _, stopped := sb.rec.Marker(markerStopped); stopped {
		return runtimeapi.PodSandboxState_SANDBOX_NOTREADY
	}
	return runtimeapi.PodSandboxState_SANDBOX_READY
}

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
	// The pod's containers first, killed at once (as containerd does: the kubelet has
	// already stopped them gracefully).
	for _, rec := range s.containersOf(sb.rec.ID) {
		c, err := decodeContainer(rec)
		if err != nil || rec.State != journal.StateCreated {
			continue
		}
		if err := s.stopContainer(ctx, c, 0); err != nil {
			return nil, fmt.Errorf("stop sandbox %s: %w", sb.rec.ID, err)
		}
	}
	if _, stopped := sb.rec.Marker(markerStopped); !stopped {
		// CNI DEL (the undo of the attach step), the pod's /dev/shm unmounted (as CRI-O
		// does at stop: no container of the pod runs again), and both markers in one commit.
		nctx, cancel := detached(ctx, s.cfg.NetworkTimeout)
		at := nowMarker()
		err := s.journal.UndoSteps(nctx, sb.rec.ID, map[string]*string{markerNetworkStopped: at, markerStopped: at}, netns.StepAttach, netns.StepShm)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("stop sandbox %s: %w", sb.rec.ID, err)
		}
		s.log.Info("pod sandbox stopped", "id", sb.rec.ID, "name", sb.rec.Name)
	}
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes a sandbox: the journal undoes every step still in effect (CNI
// DEL unless stopped, the pod's files, the pause process, then the namespace pins), last first, and deletes the record. The
// record is marked removing before anything is undone, so a crash part way is finished at
// the next start. An unknown ID is success, per the CRI. Teardowns of one sandbox run one
// at a time.
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
			if err := s.rollback(ctx, c); err != nil {
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

// PodSandboxStatus reports a created sandbox; verbose adds the journal's view of it.
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := s.findSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	st := &runtimeapi.PodSandboxStatus{
		Id:             sb.rec.ID,
		Metadata:       sb.config.GetMetadata(),
		State:          sb.state(),
		CreatedAt:      sb.obj.CreatedAt.UnixNano(),
		Labels:         sb.config.GetLabels(),
		Annotations:    sb.config.GetAnnotations(),
		RuntimeHandler: sb.obj.RuntimeHandler,
		Linux: &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
			Options: sb.config.GetLinux().GetSecurityContext().GetNamespaceOptions(),
		}},
	}
	if _, stopped := sb.rec.Marker(markerNetworkStopped); !stopped && len(sb.obj.IPs) > 0 {
		st.Network = &runtimeapi.PodSandboxNetworkStatus{Ip: sb.obj.IPs[0]}
		for _, ip := range sb.obj.IPs[1:] {
			st.Network.AdditionalIps = append(st.Network.AdditionalIps, &runtimeapi.PodIP{Ip: ip})
		}
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: st}
	if req.GetVerbose() {
		resp.Info = map[string]string{"info": infoJSON(map[string]any{
			"namespaces": sb.obj.Namespaces, "host_network": sb.obj.HostNetwork,
			"journal": map[string]any{"state": sb.rec.State, "steps": sb.rec.Steps, "markers": sb.rec.Markers},
		})}
	}
	return resp, nil
}

// ListPodSandbox lists created sandboxes; cached and in-progress ones are hidden.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	recs := s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindSandbox && r.State == journal.StateCreated &&
			strings.HasPrefix(r.ID, f.GetId())
	})
	if f.GetId() == "" {
		s.sandboxCache.keepOnly(recs)
	}
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, rec := range recs {
		sb, err := s.listedSandbox(rec)
		if err != nil {
			s.log.Warn("skipping undecodable sandbox", "id", rec.ID, "name", rec.Name, "err", err)
			continue
		}
		if f.GetState() != nil && f.GetState().GetState() != sb.state() {
			continue
		}
		if !labelsMatch(sb.config.GetLabels(), f.GetLabelSelector()) {
			continue
		}
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{
			Id: rec.ID, Metadata: sb.config.GetMetadata(), State: sb.state(),
			CreatedAt: sb.obj.CreatedAt.UnixNano(), Labels: sb.config.GetLabels(),
			Annotations: sb.config.GetAnnotations(), RuntimeHandler: sb.obj.RuntimeHandler,
		})
	}
	return resp, nil
}

// watchPause watches the pause process holding a sandbox's shared pid namespace, without
// polling, from creation (or, for one made before a restart, from recovery; or at the
// latest from its claim) until it exits. If it exits while the sandbox lives, a created
// sandbox is marked not ready at once, and a cached one, which nobody holds yet, is rolled
// back so that the retry builds a sound one instead of claiming a broken one. The removal
// of the sandbox kills the pause itself: that exit is ignored. A sandbox is watched once.
// The watch belongs to the server: it ends with that exit, or when Close is called.
func (s *Server) watchPause(id, name, path string) {
	if _, watched := s.pauseWatches.LoadOrStore(id, struct{}{}); watched {
		return
	}
	err := netns.WatchPause(s.lifetime, path, func() {
		defer s.pauseWatches.Delete(id)
		rec, err := s.journal.Get(id)
		if err != nil {
			return
		}
		if _, done := rec.Marker(markerPauseExited); done {
			return
		}
		switch rec.State {
		case journal.StateCached:
			s.log.Warn("the pause process of the cached sandbox exited: rolling it back", "id", id, "name", rec.Name)
			uctx, cancel := context.WithTimeout(s.lifetime, undoTimeout)
			err := s.undo(uctx, rec)
			cancel()
			if err != nil {
				s.log.Warn("cannot roll back the cached sandbox whose pause process exited; its expiry will", "id", id, "name", rec.Name, "err", err)
			}
		case journal.StateCreated:
			s.log.Warn("the pause process of the sandbox exited: the sandbox is not ready", "id", id, "name", rec.Name)
			if err := s.journal.SetMarker(id, markerPauseExited, nowMarker()); err != nil {
				s.log.Warn("cannot mark the sandbox not ready", "id", id, "name", rec.Name, "err", err)
			}
		}
	})
	if err != nil {
		s.pauseWatches.Delete(id)
		s.log.Warn("cannot watch the pause process; its exit will be noticed at the next start", "id", id, "name", name, "err", err)
	}
}
