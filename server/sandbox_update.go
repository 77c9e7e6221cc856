package server

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci"
)

// UpdatePodSandboxResources sets a pod's pod-level resources (the kubelet's in-place
// resize of a pod, InPlacePodLevelResourcesVerticalScaling): its overhead and the sum of
// its containers' resources, added up (oci.PodResources) on the pod's own cgroup, its
// cgroup_parent (oci.SetPodResources: a cgroupfs directory, or a slice with the systemd
// driver), and kept in the sandbox's record, so that its status, its NRI view and a
// restarted daemon see them. NRI plugins are asked first (UpdatePodSandbox: one may
// refuse) and told after (PostUpdatePodSandbox).
//
// The kubelet sets the pod's cgroup itself too, right after this call, to the same
// figures; setting them here first keeps a node without a kubelet (crictl) and the
// record in step with the cgroup. It is not a journaled step: it makes nothing that
// would need an undo, and a crash between the cgroup and the record leaves the record
// with the old figures, which the kubelet's next resize (or its rollback) sets again.
func (s *Server) UpdatePodSandboxResources(ctx context.Context, req *runtimeapi.UpdatePodSandboxResourcesRequest) (*runtimeapi.UpdatePodSandboxResourcesResponse, error) {
	sb, err := s.findSandbox(req.GetPodSandboxId())
	if err != nil {
		return nil, err
	}
	res, err := oci.PodResources(req.GetOverhead(), req.GetResources())
	if err != nil {
		return nil, invalidf("pod %s: %w", sb.rec.ID, err)
	}
	if st := sb.state(); st != runtimeapi.PodSandboxState_SANDBOX_READY {
		return nil, newError(errWrongState, "pod %s is %v: only a ready pod's resources can be updated", sb.rec.ID, st)
	}
	if s.nri.Plugged() {
		if err := s.nri.UpdatePodSandbox(ctx, nriPod(sb), req.GetOverhead(), req.GetResources()); err != nil {
			return nil, err
		}
	}
	if err := oci.SetPodResources(ctx, sb.config.GetLinux().GetCgroupParent(), s.cfg.SystemdCgroup(), res); err != nil {
		return nil, fmt.Errorf("pod %s: %w", sb.rec.ID, err)
	}
	if err := s.recordPodResources(sb, req.GetOverhead(), req.GetResources()); err != nil {
		return nil, err
	}
	if s.nri.Plugged() {
		ectx, cancel := detached(ctx, nriEventTimeout)
		defer cancel()
		if sb, err := s.findSandbox(sb.rec.ID); err == nil {
			if err := s.nri.PostUpdatePodSandbox(ectx, nriPod(sb)); err != nil {
				s.log.Warn("NRI event failed", "event", "PostUpdatePodSandbox", "id", sb.rec.ID, "name", sb.rec.Name, "err", err)
			}
		}
	}
	s.log.Info("pod resources updated", "id", sb.rec.ID, "name", sb.rec.Name, "cpu_shares", res.CpuShares,
		"cpu_quota", res.CpuQuota, "cpu_period", res.CpuPeriod, "memory_limit", res.Memory)
	return &runtimeapi.UpdatePodSandboxResourcesResponse{}, nil
}

// recordPodResources keeps a pod's updated overhead and resources in its config, as
// the record holds it (a part not given stays as it was).
func (s *Server) recordPodResources(sb sandbox, overhead, resources *runtimeapi.LinuxContainerResources) error {
	cfg := proto.Clone(sb.config).(*runtimeapi.PodSandboxConfig)
	if cfg.Linux == nil {
		cfg.Linux = &runtimeapi.LinuxPodSandboxConfig{}
	}
	if overhead != nil {
		cfg.Linux.Overhead = overhead
	}
	if resources != nil {
		cfg.Linux.Resources = resources
	}
	sb.obj.Config = mustMarshal(cfg)
	if err := s.journal.SetObject(sb.rec.ID, sb.obj); err != nil {
		return fmt.Errorf("record the resources of pod %s: %w", sb.rec.ID, err)
	}
	return nil
}
