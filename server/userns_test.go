package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
)

func TestPodUserns(t *testing.T) {
	s := testServer(t)
	s.cfg = config.Default()
	s.runtimes = nil // no handler can say it supports anything
	one := func(container, host, length uint32) []*runtimeapi.IDMapping {
		return []*runtimeapi.IDMapping{{ContainerId: container, HostId: host, Length: length}}
	}
	pod := func(u *runtimeapi.UserNamespace) *runtimeapi.NamespaceOption {
		return &runtimeapi.NamespaceOption{UsernsOptions: u}
	}
	for _, tc := range []struct {
		name string
		opts *runtimeapi.NamespaceOption
		own  bool
		code codes.Code
	}{
		{"no options", nil, false, codes.OK},
		{"no userns options", &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE}, false, codes.OK},
		{"NODE", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE}), false, codes.OK},
		{"NODE with mappings", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_NODE, Uids: one(0, 1000, 10)}), false, codes.InvalidArgument},
		{"CONTAINER", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_CONTAINER}), false, codes.InvalidArgument},
		{"TARGET", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_TARGET}), false, codes.InvalidArgument},
		{"POD without mappings", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD}), false, codes.InvalidArgument},
		{"POD with two uid mappings", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: append(one(0, 1000, 100000), one(0, 2000, 100000)...), Gids: one(0, 1000, 100000)}), false, codes.InvalidArgument},
		{"POD without container ID 0", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: one(1, 1000, 100000), Gids: one(1, 1000, 100000)}), false, codes.InvalidArgument},
		{"POD with an empty gid mapping", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: one(0, 1000, 100000), Gids: one(0, 1000, 0)}), false, codes.InvalidArgument},
		{"POD beyond 32 bits", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: one(0, 1<<32-10, 100), Gids: one(0, 1000, 100)}), false, codes.InvalidArgument},
		// Valid (user_namespaces_host_network), but refused here: no handler supports
		// user namespaces, or (not root) the kernel probe failed.
		{"POD with the host's network", &runtimeapi.NamespaceOption{Network: runtimeapi.NamespaceMode_NODE, UsernsOptions: &runtimeapi.UserNamespace{
			Mode: runtimeapi.NamespaceMode_POD, Uids: one(0, 1000, 100000), Gids: one(0, 1000, 100000)}}, false, codes.FailedPrecondition},
		{"POD with the host's pid", &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_NODE, UsernsOptions: &runtimeapi.UserNamespace{
			Mode: runtimeapi.NamespaceMode_POD, Uids: one(0, 1000, 100000), Gids: one(0, 1000, 100000)}}, false, codes.InvalidArgument},
		{"POD with the host's ipc", &runtimeapi.NamespaceOption{Ipc: runtimeapi.NamespaceMode_NODE, UsernsOptions: &runtimeapi.UserNamespace{
			Mode: runtimeapi.NamespaceMode_POD, Uids: one(0, 1000, 100000), Gids: one(0, 1000, 100000)}}, false, codes.InvalidArgument},
		// Valid, but no handler here supports user namespaces.
		{"POD on a handler without support", pod(&runtimeapi.UserNamespace{Mode: runtimeapi.NamespaceMode_POD,
			Uids: one(0, 1000, 100000), Gids: one(0, 1000, 100000)}), false, codes.FailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own, err := s.podUserns(context.Background(), tc.opts, "")
			if got := status.Code(toStatus(err)); got != tc.code || own != tc.own {
				t.Errorf("podUserns = %v, %v (code %v), want %v, code %v", own, err, got, tc.own, tc.code)
			}
		})
	}
}
