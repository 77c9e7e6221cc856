package server

import (
	"context"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
)

// kubeletPod is a PodSandboxConfig shaped as the kubelet sends it: pod labels plus its
// io.kubernetes.pod.* labels, and every pod annotation, the kubelet's own included.
func kubeletPod(seen string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: "web-0", Namespace: "default", Uid: "6f1c1d4e-0a0b-4c1d-9e8f-0123456789ab", Attempt: 0},
		Hostname: "web-0", LogDirectory: "/var/log/pods/default_web-0_6f1c1d4e-0a0b-4c1d-9e8f-0123456789ab",
		Labels: map[string]string{
			"app": "web", "io.kubernetes.pod.name": "web-0", "io.kubernetes.pod.namespace": "default",
			"io.kubernetes.pod.uid": "6f1c1d4e-0a0b-4c1d-9e8f-0123456789ab",
		},
		Annotations: map[string]string{
			"kubernetes.io/config.seen":   seen,
			"kubernetes.io/config.source": "api",
			"example.com/owner":           "team-a",
		},
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: "/kubepods/besteffort/pod6f1c1d4e"},
	}
}

// TestFingerprintLeavesOutKubeletBookkeeping (defect 9): the annotations the kubelet
// stamps by itself (config.seen anew after each of its restarts) do not change the
// fingerprint; anything the pod asks for does.
func TestFingerprintLeavesOutKubeletBookkeeping(t *testing.T) {
	base := fingerprint(kubeletPod("2026-12-01T07:00:00.000000000Z"), "runc")
	tests := []struct {
		name   string
		change func(c *runtimeapi.PodSandboxConfig)
		same   bool
	}{
		{"config.seen stamped anew by a restarted kubelet", func(c *runtimeapi.PodSandboxConfig) {
			c.Annotations["kubernetes.io/config.seen"] = "2026-12-01T07:05:00.123456789Z"
		}, true},
		{"config.seen missing", func(c *runtimeapi.PodSandboxConfig) { delete(c.Annotations, "kubernetes.io/config.seen") }, true},
		{"config.source", func(c *runtimeapi.PodSandboxConfig) { c.Annotations["kubernetes.io/config.source"] = "file" }, true},
		{"config.mirror added", func(c *runtimeapi.PodSandboxConfig) { c.Annotations["kubernetes.io/config.mirror"] = "abc" }, true},
		{"a user annotation", func(c *runtimeapi.PodSandboxConfig) { c.Annotations["example.com/owner"] = "team-b" }, false},
		{"config.hash (the static pod's content)", func(c *runtimeapi.PodSandboxConfig) { c.Annotations["kubernetes.io/config.hash"] = "x" }, false},
		{"a label", func(c *runtimeapi.PodSandboxConfig) { c.Labels["app"] = "db" }, false},
		{"the cgroup parent", func(c *runtimeapi.PodSandboxConfig) { c.Linux.CgroupParent = "/kubepods/burstable/pod6f1c1d4e" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := kubeletPod("2026-12-01T07:00:00.000000000Z")
			tt.change(c)
			if got := fingerprint(c, "runc") == base; got != tt.same {
				t.Errorf("same fingerprint = %v, want %v", got, tt.same)
			}
		})
	}
	// The caller's config is not changed by leaving annotations out.
	c := kubeletPod("t")
	fingerprint(c)
	if c.Annotations["kubernetes.io/config.seen"] != "t" {
		t.Error("fingerprint changed the request's annotations")
	}
	if base == legacyFingerprint(kubeletPod("2026-12-01T07:00:00.000000000Z"), "runc") {
		t.Error("the current and the legacy format are indistinguishable")
	}
}

// TestRetryAfterKubeletRestartClaimsCached (defect 9): the retry of a sandbox creation
// that was cached, sent by a restarted kubelet with a new config.seen, claims it.
func TestRetryAfterKubeletRestartClaimsCached(t *testing.T) {
	s := testServer(t)
	first, retry := kubeletPod("2026-12-01T07:00:00Z"), kubeletPod("2026-12-01T07:09:30Z")
	r, err := s.journal.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: fingerprint(first, "")})
	if err != nil {
		t.Fatal(err)
	}
	settle(t, s, r.ID, false)
	res, err := s.reserve(context.Background(), journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: fingerprint(retry, "")},
		legacyFingerprint(retry, ""))
	if err != nil || res.existingID != r.ID {
		t.Fatalf("retry after a kubelet restart = %+v, %v; want the cached %s", res, err, r.ID)
	}
}

// TestLegacyFingerprintStillClaims: a record written before the current fingerprint
// format (a bare digest of the whole config) is still recognised as the same request.
func TestLegacyFingerprintStillClaims(t *testing.T) {
	for _, state := range []string{"cached", "created"} {
		t.Run(state, func(t *testing.T) {
			s := testServer(t)
			cfg := kubeletPod("2026-12-01T07:00:00Z")
			r, err := s.journal.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: legacyFingerprint(cfg, "runc")})
			if err != nil {
				t.Fatal(err)
			}
			settle(t, s, r.ID, state == "created")
			again := proto.Clone(cfg).(*runtimeapi.PodSandboxConfig)
			res, err := s.reserve(context.Background(), journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: fingerprint(again, "runc")},
				legacyFingerprint(again, "runc"))
			if err != nil || res.existingID != r.ID {
				t.Fatalf("same request, legacy record = %+v, %v; want %s", res, err, r.ID)
			}
		})
	}
}
