package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// TestUpdatePodSandboxResourcesRefusals checks the codes of the requests
// UpdatePodSandboxResources refuses before it touches a cgroup, and that a refused
// update leaves the pod's record as it was.
func TestUpdatePodSandboxResourcesRefusals(t *testing.T) {
	s := scaleServer(t)
	podIDs, _ := populate(t, s, 2)
	stopped := podIDs[1]
	if err := s.journal.SetMarker(stopped, markerStopped, nowMarker()); err != nil {
		t.Fatal(err)
	}
	res := &runtimeapi.LinuxContainerResources{CpuShares: 512, CpuPeriod: 100000, CpuQuota: 50000, MemoryLimitInBytes: 128 << 20}
	for _, tc := range []struct {
		name    string
		req     *runtimeapi.UpdatePodSandboxResourcesRequest
		code    codes.Code
		message string
	}{
		{"unknown pod", &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: "0123456789abcdef", Resources: res}, codes.NotFound, ""},
		{"no pod", &runtimeapi.UpdatePodSandboxResourcesRequest{Resources: res}, codes.InvalidArgument, "required"},
		{"nothing to update", &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: podIDs[0]}, codes.InvalidArgument, "nothing to update"},
		{"negative memory", &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: podIDs[0],
			Resources: &runtimeapi.LinuxContainerResources{MemoryLimitInBytes: -5}}, codes.InvalidArgument, "negative memory_limit_in_bytes"},
		{"period of 10 s", &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: podIDs[0],
			Resources: &runtimeapi.LinuxContainerResources{CpuPeriod: 10000000, CpuQuota: 50000}}, codes.InvalidArgument, "cpu_period"},
		{"stopped pod", &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: stopped, Resources: res}, codes.FailedPrecondition, "ready"},
		// populate's pods name a cgroup_parent that nothing made.
		{"no pod cgroup", &runtimeapi.UpdatePodSandboxResourcesRequest{PodSandboxId: podIDs[0], Resources: res}, codes.FailedPrecondition, "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := s.findSandbox(podIDs[0])
			_, err := s.UpdatePodSandboxResources(context.Background(), tc.req)
			err = toStatus(err)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("UpdatePodSandboxResources = %v; want %v saying %q", err, tc.code, tc.message)
			}
			after, _ := s.findSandbox(podIDs[0])
			if string(after.obj.Config) != string(before.obj.Config) {
				t.Fatal("a refused update changed the pod's record")
			}
		})
	}
}
