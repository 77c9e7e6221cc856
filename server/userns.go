package server

import (
	"context"
	"math"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
)

// podUserns checks the user namespace a pod asks for (namespace_options.userns_options)
// before anything is created, and reports whether the pod gets a user namespace of its
// own (mode POD). No options, or mode NODE, is the host's user namespace.
//
// Refusals:
//   - mode POD with the node's ipc or pid namespace (the kubelet never asks); with the
//     node's network namespace it is accepted where the kernel allows it
//     (oci.ProbeUsernsHostNetwork; FailedPrecondition elsewhere), as containerd (PR 12518)
//     and CRI-O (PR 9634) accept it;
//   - modes CONTAINER and TARGET, which the CRI does not define for user namespaces, and
//     mappings that are not exactly one uid and one gid range starting at container ID 0
//     with a length that fits: InvalidArgument (the request itself is wrong, wherever
//     it is sent; critest's user namespace specs expect these to fail);
//   - mode POD on a handler whose runtime cannot do it (no user namespaces or no
//     idmapped mounts in `runc features`, such as Debian's runc 1.1), or while crijournal
//     itself does not implement it: FailedPrecondition, because the same request
//     succeeds on a handler (or a node) that has the support, and Status already tells
//     the kubelet which handlers do (runtimeHandlers[].features.user_namespaces).
func (s *Server) podUserns(ctx context.Context, opts *runtimeapi.NamespaceOption, handler string) (bool, error) {
	u := opts.GetUsernsOptions()
	if u == nil {
		return false, nil
	}
	switch u.GetMode() {
	case runtimeapi.NamespaceMode_NODE:
		if len(u.GetUids()) > 0 || len(u.GetGids()) > 0 {
			return false, invalidf("user namespace mode NODE takes no uid or gid mappings")
		}
		return false, nil
	case runtimeapi.NamespaceMode_POD:
	default:
		return false, invalidf("user namespace mode %s is not supported (only POD and NODE are)", u.GetMode())
	}
	for _, n := range []struct {
		kind string
		mode runtimeapi.NamespaceMode
	}{{"ipc", opts.GetIpc()}, {"pid", opts.GetPid()}} {
		if n.mode == runtimeapi.NamespaceMode_NODE {
			// The kubelet refuses hostUsers: false with either: the node's
			// namespaces belong to the node's user namespace.
			return false, invalidf("user namespace mode POD cannot be combined with the node's %s namespace", n.kind)
		}
	}
	if opts.GetNetwork() == runtimeapi.NamespaceMode_NODE {
		// hostNetwork with hostUsers: false (the kubelet's UserNamespacesHostNetworkSupport,
		// sent when Status advertises user_namespaces_host_network): the containers get the
		// node's /sys bound (spec's sysMount), which the kernel must allow.
		if err := oci.ProbeUsernsHostNetwork(); err != nil {
			return false, newError(errWrongState, "user namespace mode POD with the node's network namespace is not supported on this node: %v", err)
		}
	}
	for _, m := range []struct {
		kind string
		maps []*runtimeapi.IDMapping
	}{{"uid", u.GetUids()}, {"gid", u.GetGids()}} {
		if err := checkIDMappings(m.kind, m.maps); err != nil {
			return false, err
		}
	}
	handler = s.handlers().Resolve(handler)
	if !s.handlerFeatures(ctx, handler).UserNamespaces {
		return false, newError(errWrongState, "runtime handler %q does not support user namespaces (its runtime needs user namespaces and idmapped mounts, runc 1.2 or later; see the handler's features in Status)", handler)
	}
	return true, nil
}

// idMaps returns the single mapping of a checked user namespace option (see
// checkIDMappings) as netns and storage take it (netns.IDMap and storage.IDMap are one
// type).
func idMaps(maps []*runtimeapi.IDMapping) []netns.IDMap {
	out := make([]netns.IDMap, len(maps))
	for i, m := range maps {
		out[i] = netns.IDMap{ContainerID: m.GetContainerId(), HostID: m.GetHostId(), Size: m.GetLength()}
	}
	return out
}

// checkIDMappings accepts exactly one mapping that maps container ID 0 and stays within
// 32-bit IDs, as containerd and CRI-O do.
func checkIDMappings(kind string, maps []*runtimeapi.IDMapping) error {
	if len(maps) != 1 {
		return invalidf("user namespace mode POD needs exactly one %s mapping, got %d", kind, len(maps))
	}
	m := maps[0]
	switch {
	case m.GetContainerId() != 0:
		return invalidf("user namespace %s mapping must map container ID 0, got container ID %d", kind, m.GetContainerId())
	case m.GetLength() == 0:
		return invalidf("user namespace %s mapping has length 0", kind)
	case uint64(m.GetHostId())+uint64(m.GetLength()) > math.MaxUint32:
		return invalidf("user namespace %s mapping %d+%d goes beyond the 32-bit IDs", kind, m.GetHostId(), m.GetLength())
	}
	return nil
}
