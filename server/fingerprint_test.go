package server

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/creation"
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

// TestFingerprintLeavesOutKubeletBookkeeping: the annotations the kubelet
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

// TestRetryAfterKubeletRestartClaimsCached: the retry of a sandbox creation
// that was cached, sent by a restarted kubelet with a new config.seen, claims it.
func TestRetryAfterKubeletRestartClaimsCached(t *testing.T) {
	s := testServer(t)
	first, retry := kubeletPod("2026-12-01T07:00:00Z"), kubeletPod("2026-12-01T07:09:30Z")
	r, err := s.journal.Begin(journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: fingerprint(first, "")})
	if err != nil {
		t.Fatal(err)
	}
	settle(t, s, r.ID, false)
	res, err := s.creations.Reserve(context.Background(), journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: fingerprint(retry, "")},
		creation.Same{Older: olderFingerprints(retry, "")})
	if err != nil || res.ExistingID != r.ID {
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
			res, err := s.creations.Reserve(context.Background(), journal.BeginRequest{Kind: journal.KindSandbox, Name: "pod", Fingerprint: fingerprint(again, "runc")},
				creation.Same{Older: olderFingerprints(again, "runc")})
			if err != nil || res.ExistingID != r.ID {
				t.Fatalf("same request, legacy record = %+v, %v; want %s", res, err, r.ID)
			}
		})
	}
}

// kubeletContainer is a ContainerConfig shaped as the kubelet sends it for attempt n,
// with the termination-message file the kubelet makes anew for every call.
func kubeletContainer(attempt uint32, terminationFile string) *runtimeapi.ContainerConfig {
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app", Attempt: attempt},
		Image:    &runtimeapi.ImageSpec{Image: "sha256:0123", UserSpecifiedImage: "busybox"},
		Command:  []string{"sleep", "3600"},
		LogPath:  fmt.Sprintf("app/%d.log", attempt),
		Labels:   map[string]string{"io.kubernetes.container.name": "app", "io.kubernetes.pod.name": "web-0"},
		Annotations: map[string]string{
			"io.kubernetes.container.hash":                     "1a2b3c",
			annotationRestartCount:                             fmt.Sprint(attempt),
			annotationTerminationMessagePath:                   "/dev/termination-log",
			"io.kubernetes.container.terminationMessagePolicy": "File",
		},
		Mounts: []*runtimeapi.Mount{
			{ContainerPath: "/etc/hosts", HostPath: "/var/lib/kubelet/pods/6f1c/etc-hosts"},
			{ContainerPath: "/dev/termination-log", HostPath: "/var/lib/kubelet/pods/6f1c/containers/app/" + terminationFile},
		},
		Envs: []*runtimeapi.KeyValue{{Key: "MODE", Value: []byte("a")}},
	}
}

// TestContainerFingerprintLeavesOutPerCallFields: what the kubelet changes when it
// retries a CreateContainer that timed out (the attempt, the log path, the restart count
// annotation, the termination-message file) does not change the fingerprint; anything the
// container asks for does, the termination-message mount's container path included.
func TestContainerFingerprintLeavesOutPerCallFields(t *testing.T) {
	base := fingerprint(kubeletContainer(0, "5e2f0a11"), "sandbox")
	tests := []struct {
		name   string
		change func(c *runtimeapi.ContainerConfig)
		same   bool
	}{
		{"the kubelet's retry: attempt, log path, restart count and termination file", func(c *runtimeapi.ContainerConfig) {
			*c = *kubeletContainer(1, "9c0d7b3e")
		}, true},
		{"an image", func(c *runtimeapi.ContainerConfig) { c.Image.Image = "sha256:4567" }, false},
		{"a command", func(c *runtimeapi.ContainerConfig) { c.Command = []string{"sleep", "1"} }, false},
		{"an environment variable", func(c *runtimeapi.ContainerConfig) { c.Envs[0].Value = []byte("b") }, false},
		{"another mount's host path", func(c *runtimeapi.ContainerConfig) { c.Mounts[0].HostPath = "/elsewhere" }, false},
		{"the termination message path", func(c *runtimeapi.ContainerConfig) {
			c.Annotations[annotationTerminationMessagePath] = "/tmp/msg"
			c.Mounts[1].ContainerPath = "/tmp/msg"
		}, false},
		{"the container hash annotation", func(c *runtimeapi.ContainerConfig) { c.Annotations["io.kubernetes.container.hash"] = "ffff" }, false},
		{"the container name", func(c *runtimeapi.ContainerConfig) { c.Metadata.Name = "other" }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := kubeletContainer(0, "5e2f0a11")
			tt.change(c)
			if got := fingerprint(c, "sandbox") == base; got != tt.same {
				t.Errorf("same fingerprint = %v, want %v", got, tt.same)
			}
		})
	}
	if fingerprint(kubeletContainer(0, "5e2f0a11"), "another sandbox") == base {
		t.Error("the sandbox does not count")
	}
	// The caller's config is not changed by leaving fields out.
	c := kubeletContainer(3, "5e2f0a11")
	fingerprint(c)
	if c.Metadata.Attempt != 3 || c.LogPath != "app/3.log" || c.Annotations[annotationRestartCount] != "3" || c.Mounts[1].HostPath == "" {
		t.Errorf("fingerprint changed the request: %v", c)
	}
}

// TestSandboxFingerprintLeavesOutAttempt: a sandbox's attempt is which call asked, not
// what the pod asks for.
func TestSandboxFingerprintLeavesOutAttempt(t *testing.T) {
	c := kubeletPod("2026-12-01T07:00:00Z")
	c.Metadata.Attempt = 2
	if fingerprint(c, "runc") != fingerprint(kubeletPod("2026-12-01T07:00:00Z"), "runc") {
		t.Error("the attempt changes a sandbox's fingerprint")
	}
}

// TestOlderFingerprintsAreTheFormatsWrittenBefore: the v2 and legacy digests reserve
// accepts for records written by earlier binaries are exactly what those wrote.
func TestOlderFingerprintsAreTheFormatsWrittenBefore(t *testing.T) {
	pod := kubeletPod("2026-12-01T07:00:00Z")
	noLocal := kubeletPod("")
	delete(noLocal.Annotations, "kubernetes.io/config.seen")
	delete(noLocal.Annotations, "kubernetes.io/config.source")
	ctr := kubeletContainer(0, "5e2f0a11")
	for _, tt := range []struct {
		name string
		got  []string
		want []string
	}{
		{"sandbox", olderFingerprints(pod, "runc"), []string{"v2:" + digest(noLocal, "runc"), digest(pod, "runc")}},
		{"container", olderFingerprints(ctr, "sb"), []string{"v2:" + digest(ctr, "sb"), digest(ctr, "sb")}},
	} {
		if fmt.Sprint(tt.got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: older fingerprints %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}

// TestContainerAsRetried: a claimed container is recorded with the retry's config, but
// keeps the termination-message file it has mounted.
func TestContainerAsRetried(t *testing.T) {
	made, retry := kubeletContainer(0, "5e2f0a11"), kubeletContainer(1, "9c0d7b3e")
	got := containerAsRetried(made, retry)
	if got.Metadata.Attempt != 1 || got.LogPath != "app/1.log" || got.Annotations[annotationRestartCount] != "1" {
		t.Errorf("per-call fields not the retry's: %v", got)
	}
	if p := terminationMessageMount(got).HostPath; p != "/var/lib/kubelet/pods/6f1c/containers/app/5e2f0a11" {
		t.Errorf("termination-message mount %q, want the one made", p)
	}
	if terminationMessageMount(retry).HostPath != "/var/lib/kubelet/pods/6f1c/containers/app/9c0d7b3e" {
		t.Error("containerAsRetried changed the retry's config")
	}
}
