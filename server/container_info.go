package server

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

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

// recordResources keeps the resources UpdateContainerResources set, for ContainerStatus.
func (s *Server) recordResources(ctx context.Context, c container, res *runtimeapi.LinuxContainerResources) error {
	if res == nil {
		return nil
	}
	c.obj.Resources = mustMarshal(res)
	if err := s.journal.SetObject(c.rec.ID, c.obj); err != nil {
		return fmt.Errorf("record resources of %s: %w", c.rec.ID, err)
	}
	return nil
}

// criSignalName turns a CRI signal (SIGNAL_SIGRTMINPLUS1) into a name ParseSignal reads
// (SIGRTMIN+1).
func criSignalName(sig runtimeapi.Signal) string {
	name := strings.TrimPrefix(sig.String(), "SIGNAL_")
	name = strings.Replace(name, "PLUS", "+", 1)
	return strings.Replace(name, "MINUS", "-", 1)
}

// criSignal is the CRI's name of a signal; RUNTIME_DEFAULT when the CRI has none.
func criSignal(sig syscall.Signal) runtimeapi.Signal {
	const rtmin, rtmax = 34, 64
	var name string
	switch n := int(sig); {
	case n == rtmin:
		name = "SIGRTMIN"
	case n > rtmin && n <= rtmin+15:
		name = fmt.Sprintf("SIGRTMINPLUS%d", n-rtmin)
	case n > rtmin+15 && n < rtmax:
		name = fmt.Sprintf("SIGRTMAXMINUS%d", rtmax-n)
	case n == rtmax:
		name = "SIGRTMAX"
	default:
		name = unix.SignalName(sig)
	}
	return runtimeapi.Signal(runtimeapi.Signal_value["SIGNAL_"+name])
}
