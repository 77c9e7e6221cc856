package server

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/netns"
)

// TestRunPodSandboxRefusesBadPodFiles: a DNS configuration that cannot be written
// as a resolv.conf, or a host port out of range, is InvalidArgument before anything
// is journaled.
func TestRunPodSandboxRefusesBadPodFiles(t *testing.T) {
	md := &runtimeapi.PodSandboxMetadata{Name: "n", Namespace: "d", Uid: "u"}
	for _, tc := range []struct {
		name string
		cfg  *runtimeapi.PodSandboxConfig
		want string
	}{
		{"server not an IP", &runtimeapi.PodSandboxConfig{Metadata: md, DnsConfig: &runtimeapi.DNSConfig{Servers: []string{"dns.example"}}}, "dns.example"},
		{"search with a newline", &runtimeapi.PodSandboxConfig{Metadata: md, DnsConfig: &runtimeapi.DNSConfig{Searches: []string{"a\nnameserver 1.2.3.4"}}}, "search domain"},
		{"host port out of range", &runtimeapi.PodSandboxConfig{Metadata: md, PortMappings: []*runtimeapi.PortMapping{{HostPort: 70000, ContainerPort: 80}}}, "host port"},
		{"container port missing", &runtimeapi.PodSandboxConfig{Metadata: md, PortMappings: []*runtimeapi.PortMapping{{HostPort: 8080}}}, "container port"},
		{"host IP not an IP", &runtimeapi.PodSandboxConfig{Metadata: md, PortMappings: []*runtimeapi.PortMapping{{HostPort: 8080, ContainerPort: 80, HostIp: "node"}}}, "host IP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := testServer(t)
			_, err := s.RunPodSandbox(context.Background(), &runtimeapi.RunPodSandboxRequest{Config: tc.cfg})
			if status.Code(toStatus(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RunPodSandbox = %v, want InvalidArgument about %q", err, tc.want)
			}
			if recs := s.journal.List(nil); len(recs) != 0 {
				t.Fatalf("a refused request left records: %v", recs)
			}
		})
	}
}

// TestPodPortMappings: mappings without a host port are left out (the kubelet sends
// every container port), protocols are CNI's lower-case names.
func TestPodPortMappings(t *testing.T) {
	got, err := podPortMappings(&runtimeapi.PodSandboxConfig{PortMappings: []*runtimeapi.PortMapping{
		{ContainerPort: 80},
		{HostPort: 8080, ContainerPort: 80},
		{Protocol: runtimeapi.Protocol_UDP, HostPort: 5353, ContainerPort: 53, HostIp: "127.0.0.1"},
		{Protocol: runtimeapi.Protocol_SCTP, HostPort: 9999, ContainerPort: 9999},
	}})
	want := []netns.PortMapping{
		{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
		{HostPort: 5353, ContainerPort: 53, Protocol: "udp", HostIP: "127.0.0.1"},
		{HostPort: 9999, ContainerPort: 9999, Protocol: "sctp"},
	}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("podPortMappings = %+v, %v; want %+v", got, err, want)
	}
	if got, err := podPortMappings(&runtimeapi.PodSandboxConfig{}); err != nil || got != nil {
		t.Fatalf("podPortMappings of a pod without ports = %+v, %v; want none", got, err)
	}
}
