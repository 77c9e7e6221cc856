package server

import (
	"context"
	"strconv"
	"strings"
	"syscall"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/oci"
)

// ContainerStatus reports a container; verbose adds what containerd's verbose status
// holds (pid, config, runtimeSpec) and the journal's view (containerVerboseInfo).
func (s *Server) ContainerStatus(ctx context.Context, req *runtimeapi.ContainerStatusRequest) (*runtimeapi.ContainerStatusResponse, error) {
	c, err := s.viewContainer(req.GetContainerId())
	if err != nil {
		return nil, err
	}
	if err := s.recordExit(ctx, c); err != nil {
		s.log.Warn("container exit not readable", "id", c.rec.ID, "name", c.rec.Name, "err", err)
	}
	if c, err = s.viewContainer(c.rec.ID); err != nil {
		return nil, err
	}
	resp := &runtimeapi.ContainerStatusResponse{Status: c.status()}
	if req.GetVerbose() {
		resp.Info = map[string]string{"info": infoJSON(s.containerVerboseInfo(ctx, c))}
	}
	return resp, nil
}

// status is the container's CRI status as its record has it: ContainerStatus's answer,
// and the statuses that PodSandboxStatus and the container events carry.
func (c container) status() *runtimeapi.ContainerStatus {
	st := &runtimeapi.ContainerStatus{
		Id: c.rec.ID, Metadata: c.config.GetMetadata(), State: c.state(),
		CreatedAt: c.obj.CreatedAt.UnixNano(), StartedAt: markerTime(c.rec, markerStartedAt),
		FinishedAt: markerTime(c.rec, markerFinishedAt),
		Image:      c.statusImage(), ImageRef: c.obj.ImageRef, ImageId: c.obj.ImageID,
		Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(),
		Mounts: c.mounts(), LogPath: c.obj.LogPath,
		User: c.user(), Resources: c.resources(), StopSignal: criSignal(c.stopSignal()),
	}
	if v, ok := c.rec.Marker(markerExitCode); ok {
		code, _ := strconv.Atoi(v)
		st.ExitCode = int32(code)
		st.Reason, _ = c.rec.Marker(markerReason)
	}
	return st
}

// statusImage is the image a container's status names: the image as the user wrote it
// when the kubelet passed that along (UserSpecifiedImage; the kubelet's Image is then
// the image's ID, and it shows this field as the pod's container image, which it
// compares with the pod spec's to tell an image update has taken effect), as CRI-O and
// containerd 2 answer; otherwise the image as the creation named it.
func (c container) statusImage() *runtimeapi.ImageSpec {
	img := c.config.GetImage()
	if img.GetUserSpecifiedImage() == "" || img.GetImage() == img.GetUserSpecifiedImage() {
		return img
	}
	out := proto.Clone(img).(*runtimeapi.ImageSpec)
	out.Image = img.GetUserSpecifiedImage()
	return out
}

// ListContainers lists created containers; cached and in-progress ones are hidden.
func (s *Server) ListContainers(ctx context.Context, req *runtimeapi.ListContainersRequest) (*runtimeapi.ListContainersResponse, error) {
	resp := &runtimeapi.ListContainersResponse{}
	err := s.eachContainer(req.GetFilter(), func(c *runtimeapi.Container) error {
		resp.Containers = append(resp.Containers, c)
		return nil
	})
	return resp, err
}

// eachContainer hands emit, in turn, each created container that passes the filter, as
// it decodes it (see eachPodSandbox); an error from emit stops it.
func (s *Server) eachContainer(f *runtimeapi.ContainerFilter, emit func(*runtimeapi.Container) error) error {
	recs := s.journal.Snapshot(func(r *journal.Record) bool {
		return r.Kind == journal.KindContainer && r.State == journal.StateCreated && strings.HasPrefix(r.ID, f.GetId()) &&
			(f.GetPodSandboxId() == "" || strings.HasPrefix(r.Parent, f.GetPodSandboxId()))
	})
	if f.GetId() == "" && f.GetPodSandboxId() == "" {
		s.containerCache.keepOnly(recs)
	}
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
		if err := emit(&runtimeapi.Container{
			Id: rec.ID, PodSandboxId: c.obj.SandboxID, Metadata: c.config.GetMetadata(), Image: c.config.GetImage(),
			ImageRef: c.obj.ImageRef, ImageId: c.obj.ImageID, State: c.state(), CreatedAt: c.obj.CreatedAt.UnixNano(),
			Labels: c.config.GetLabels(), Annotations: c.config.GetAnnotations(),
		}); err != nil {
			return err
		}
	}
	return nil
}

// What ContainerStatus reports beyond the journal's markers: the process's user as the
// spec set it, the resources as last set, and the stop signal.

// user is the container's effective user as its spec set it: uid, gid, and the
// supplemental groups the process holds (the primary group among them, as `id -G`
// shows them). nil for a container created before the user was recorded.
func (c container) user() *runtimeapi.ContainerUser {
	u := c.obj.User
	if u == nil {
		return nil
	}
	groups := []int64{int64(u.GID)}
	for _, g := range u.AdditionalGids {
		if g != u.GID {
			groups = append(groups, int64(g))
		}
	}
	return &runtimeapi.ContainerUser{Linux: &runtimeapi.LinuxContainerUser{
		Uid: int64(u.UID), Gid: int64(u.GID), SupplementalGroups: groups,
	}}
}

// resources are the container's resources as last set: by UpdateContainerResources, else
// by its creation config.
func (c container) resources() *runtimeapi.ContainerResources {
	linux := c.config.GetLinux().GetResources()
	if len(c.obj.Resources) > 0 {
		updated := &runtimeapi.LinuxContainerResources{}
		if err := proto.Unmarshal(c.obj.Resources, updated); err == nil {
			linux = updated
		}
	}
	if linux == nil {
		return nil
	}
	return &runtimeapi.ContainerResources{Linux: linux}
}

// criSignalName turns a CRI signal (SIGNAL_SIGRTMINPLUS1) into a name ParseSignal reads
// (SIGRTMIN+1).
func criSignalName(sig runtimeapi.Signal) string {
	name := strings.TrimPrefix(sig.String(), "SIGNAL_")
	name = strings.Replace(name, "PLUS", "+", 1)
	return strings.Replace(name, "MINUS", "-", 1)
}

// criSignal is the CRI's name of a signal (oci.SignalName, SIGRTMIN+1 spelt
// SIGNAL_SIGRTMINPLUS1); RUNTIME_DEFAULT when the CRI has none.
func criSignal(sig syscall.Signal) runtimeapi.Signal {
	name := strings.Replace(oci.SignalName(sig), "+", "PLUS", 1)
	name = strings.Replace(name, "-", "MINUS", 1)
	return runtimeapi.Signal(runtimeapi.Signal_value["SIGNAL_"+name])
}
