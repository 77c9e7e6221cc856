package server

import (
	"context"
	"strings"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// PodSandboxStatus reports a created sandbox; verbose adds what containerd's verbose
// status holds (the pause process, the configuration, a runtime spec of the pod's
// namespaces; see sandboxVerboseInfo) and the journal's view of it.
//
// The answer carries the statuses of the sandbox's containers and the time they were
// read (containers_statuses and timestamp), always both: a kubelet with the Evented PLEG
// takes a non-zero timestamp to mean that containers_statuses is the whole pod and asks
// for no container status of its own, so a timestamp without the statuses would hide
// every container (containerd set only the timestamp and had to revert it). When one
// container cannot be read, neither is set, and the kubelet asks for each container
// itself. Both are set whatever verbose says: the kubelet asks with verbose false.
func (s *Server) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	sb, err := s.viewSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	// The exits that conmon's watch has not recorded yet, as ContainerStatus records
	// them; then the time, before the look, so nothing committed before it is missing.
	s.recordExits(ctx, sb.rec.ID)
	at := time.Now()
	if sb, err = s.viewSandbox(sb.rec.ID); err != nil {
		return nil, err
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: sb.status()}
	if statuses, ok := s.podContainerStatuses(sb.rec.ID); ok {
		resp.ContainersStatuses, resp.Timestamp = statuses, at.UnixNano()
	}
	if req.GetVerbose() {
		resp.Info = map[string]string{"info": infoJSON(s.sandboxVerboseInfo(sb))}
	}
	return resp, nil
}

// status is the sandbox's CRI status as its record has it: PodSandboxStatus's answer,
// and the sandbox status that the container events carry.
func (sb sandbox) status() *runtimeapi.PodSandboxStatus {
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
	return st
}

// recordExits records the exits of a sandbox's started containers that conmon's watch
// has not recorded yet (see recordExit); a container it cannot ask about is logged and
// reported as its record has it.
func (s *Server) recordExits(ctx context.Context, sandboxID string) {
	if s.runtimes == nil {
		return
	}
	for _, rec := range s.createdContainersOf(sandboxID) {
		_, started := rec.Marker(markerStartedAt)
		if _, finished := rec.Marker(markerFinishedAt); !started || finished {
			continue
		}
		c, err := s.listedContainer(rec)
		if err == nil {
			err = s.recordExit(ctx, c)
		}
		if err != nil {
			s.log.Warn("container exit not readable", "id", rec.ID, "name", rec.Name, "err", err)
		}
	}
}

// podContainerStatuses returns the statuses of a sandbox's created containers, oldest
// first, as the journal has them now; ok is false when one of them cannot be decoded.
func (s *Server) podContainerStatuses(sandboxID string) (statuses []*runtimeapi.ContainerStatus, ok bool) {
	statuses = []*runtimeapi.ContainerStatus{}
	for _, rec := range s.createdContainersOf(sandboxID) {
		c, err := s.listedContainer(rec)
		if err != nil {
			s.log.Warn("container of the sandbox not decodable: its status goes without its containers", "id", rec.ID, "name", rec.Name, "sandbox", sandboxID, "err", err)
			return nil, false
		}
		statuses = append(statuses, c.status())
	}
	return statuses, true
}

// ListPodSandbox lists created sandboxes; cached and in-progress ones are hidden.
func (s *Server) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	resp := &runtimeapi.ListPodSandboxResponse{}
	err := s.eachPodSandbox(req.GetFilter(), func(p *runtimeapi.PodSandbox) error {
		resp.Items = append(resp.Items, p)
		return nil
	})
	return resp, err
}

// eachPodSandbox hands emit, in turn, each created sandbox that passes the filter, as it
// decodes it (ListPodSandbox collects them, StreamPodSandboxes sends them as they come);
// an error from emit stops it.
func (s *Server) eachPodSandbox(f *runtimeapi.PodSandboxFilter, emit func(*runtimeapi.PodSandbox) error) error {
	recs := s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindSandbox && r.State == journal.StateCreated &&
			strings.HasPrefix(r.ID, f.GetId())
	})
	if f.GetId() == "" {
		s.sandboxCache.keepOnly(recs)
	}
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
		if err := emit(&runtimeapi.PodSandbox{
			Id: rec.ID, Metadata: sb.config.GetMetadata(), State: sb.state(),
			CreatedAt: sb.obj.CreatedAt.UnixNano(), Labels: sb.config.GetLabels(),
			Annotations: sb.config.GetAnnotations(), RuntimeHandler: sb.obj.RuntimeHandler,
		}); err != nil {
			return err
		}
	}
	return nil
}
