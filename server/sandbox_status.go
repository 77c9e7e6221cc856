package server

import (
	"context"
	"strings"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

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
