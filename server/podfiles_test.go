package server

import (
	"context"
	"os"
	"path/filepath"
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

// TestSandboxPodFilesLost: a sandbox whose files are gone (a reboot emptied run_root)
// can never make a container again, even without a namespace of its own to lose; the
// host's /dev/shm and records made before the files existed lose nothing.
func TestSandboxPodFilesLost(t *testing.T) {
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 10.0.0.10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		obj  sandboxObject
		lost string // a part of what lost says; "" for nothing
	}{
		{"written before pod files", sandboxObject{}, ""},
		{"files there, host shm", sandboxObject{ResolvConf: resolv, HostnameFile: resolv, Shm: netns.HostShm}, ""},
		{"resolv.conf gone", sandboxObject{ResolvConf: filepath.Join(dir, "gone"), Shm: netns.HostShm}, "pod file"},
		{"shm not mounted", sandboxObject{ResolvConf: resolv, Shm: dir}, "pod shm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sandbox{obj: tc.obj}.lost()
			if (tc.lost == "") != (got == "") || !strings.Contains(got, tc.lost) {
				t.Fatalf("lost() = %q, want %q", got, tc.lost)
			}
		})
	}
}
