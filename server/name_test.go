package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/config"
)

func TestSandboxName(t *testing.T) {
	md := func(name, ns, uid string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: ns, Uid: uid, Attempt: 2}}
	}
	tests := []struct {
		name    string
		cfg     *runtimeapi.PodSandboxConfig
		want    string
		wantErr string
	}{
		{"valid", md("nginx", "default", "abc-123"), "k8s_nginx_default_abc-123_2", ""},
		{"dots allowed", md("web.v1", "kube-system", "1.2"), "k8s_web.v1_kube-system_1.2_2", ""},
		{"no config", nil, "", "config is required"},
		{"no metadata", &runtimeapi.PodSandboxConfig{}, "", "metadata is required"},
		{"no name", md("", "default", "u"), "", "metadata.name is required"},
		{"no namespace", md("n", "", "u"), "", "metadata.namespace is required"},
		{"no uid", md("n", "default", ""), "", "metadata.uid is required"},
		{"slash", md("a/b", "default", "u"), "", "invalid"},
		{"path escape", md("../../etc", "default", "u"), "", `must not contain ".."`},
		{"underscore would make names ambiguous", md("a_b", "default", "u"), "", "invalid"},
		{"leading dash", md("-rf", "default", "u"), "", "invalid"},
		{"newline", md("a\nb", "default", "u"), "", "invalid"},
		{"too long", md(strings.Repeat("a", 254), "default", "u"), "", "invalid"},
		{"bad hostname", withHostname("a b"), "", "hostname"},
		{"hostname starting with a dash", withHostname("-a"), "", "hostname"},
		{"hostname of 65 bytes", withHostname(strings.Repeat("a", 65)), "", "hostname"},
		{"hostname of 64 bytes (the kernel's limit)", withHostname(strings.Repeat("a", 64)), "k8s_n_d_u_0", ""},
		{"absolute FQDN hostname (setHostnameAsFQDN, no cluster domain)", withHostname("hostfqdn-32837.t.hostfqdn-6428.svc."), "k8s_n_d_u_0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sandboxName(tt.cfg)
			if tt.wantErr != "" {
				if status.Code(toStatus(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("sandboxName = %v, want InvalidArgument containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("sandboxName = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestFingerprintTellsRequestsApart(t *testing.T) {
	a := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "n"}, Labels: map[string]string{"x": "1", "y": "2"}}
	b := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "n"}, Labels: map[string]string{"y": "2", "x": "1"}}
	c := &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "n"}, Labels: map[string]string{"x": "1"}}
	if fingerprint(a) != fingerprint(b) {
		t.Error("equal requests have different fingerprints")
	}
	if fingerprint(a) == fingerprint(c) {
		t.Error("different requests have the same fingerprint")
	}
	if fingerprint(a, "runc") == fingerprint(a, "crun") {
		t.Error("the runtime handler is not part of the fingerprint")
	}
}

func TestRunPodSandboxRefusesUnknownRuntimeHandler(t *testing.T) {
	s := testServer(t)
	s.cfg.Runtimes = map[string]config.Runtime{"runc": {}}
	req := &runtimeapi.RunPodSandboxRequest{
		Config:         &runtimeapi.PodSandboxConfig{Metadata: &runtimeapi.PodSandboxMetadata{Name: "n", Namespace: "d", Uid: "u"}},
		RuntimeHandler: "kata",
	}
	_, err := s.RunPodSandbox(context.Background(), req)
	if status.Code(toStatus(err)) != codes.InvalidArgument || !strings.Contains(err.Error(), "kata") {
		t.Fatalf("RunPodSandbox with an unknown handler = %v, want InvalidArgument naming it", err)
	}
	if recs := s.journal.List(nil); len(recs) != 0 {
		t.Fatalf("a refused request left records: %v", recs)
	}
}

// withHostname is a valid sandbox config with the given hostname.
func withHostname(h string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{Hostname: h, Metadata: &runtimeapi.PodSandboxMetadata{Name: "n", Namespace: "d", Uid: "u"}}
}
