package server

import (
	"crypto/sha256"
	"encoding/hex"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Fingerprints tell a retry from a different request for the same thing (DESIGN §4, §6).
// They are stored in journal records, so their formats are on disk:
//
//   - "v3:<sha256 hex>" (fingerprintVersion): the request's config, deterministic
//     protobuf, without the fields a client changes from one call to the next for the
//     same thing (leaveOutPerCall), then each extra value after a NUL.
//   - "v2:<sha256 hex>": the same, leaving out only the kubelet's local pod annotations.
//   - "<sha256 hex>" (before v2): the whole config.
//
// Records written in an older format still hold it (a created one for as long as it
// lives): reserve accepts those through olderFingerprints, so no migration is needed and
// a journal stays readable by the binary that wrote it.
const fingerprintVersion = "v3:"

// fingerprintV2 is the prefix of the format before fingerprintVersion.
const fingerprintV2 = "v2:"

// kubeletLocalAnnotations are the pod annotations the kubelet manages by itself and leaves
// out when it decides whether a pod changed (isLocalAnnotationKey in the kubelet's
// pkg/kubelet/config): the first-seen time, stamped anew on every pod a restarted kubelet
// sees (so the retry of a RunPodSandbox that timed out before a kubelet restart carries a
// different one), the config source, and the mirror-pod hash. The kubelet copies all pod
// annotations into PodSandboxConfig. They say when and through what the kubelet learnt of
// the pod, not what the pod asks for.
var kubeletLocalAnnotations = []string{
	"kubernetes.io/config.seen",
	"kubernetes.io/config.source",
	"kubernetes.io/config.mirror",
}

// Container annotations the kubelet writes (pkg/kubelet/kuberuntime/labels.go).
const (
	annotationRestartCount           = "io.kubernetes.container.restartCount"
	annotationTerminationMessagePath = "io.kubernetes.container.terminationMessagePath"
)

// leaveOutPerCall returns a copy of a request's config without what a client changes
// from one call to the next while asking for the same thing (DESIGN §6: "the fingerprint
// covers what the request asks for, not who asked when"; "a hidden creation is known by
// what it is, not by the attempt that asked"). Everything else counts: a change there is
// a different request, and the hidden creation it finds is rolled back.
//
// A pod sandbox (PodSandboxConfig):
//   - metadata.attempt: which call this is, not what the pod asks for. The kubelet numbers
//     a pod's sandboxes from those the runtime lists; a hidden creation is not listed, so
//     its retry usually carries the same attempt, but not always (a listed dead sandbox
//     of the pod removed in between by the kubelet's garbage collection resets it).
//   - kubeletLocalAnnotations: see there.
//
// A container (ContainerConfig):
//   - metadata.attempt: the kubelet takes it from the runtime's status of the container,
//     and when there is none, as for a hidden creation, from its log directory: the
//     highest N of the files N.log, plus one. conmon made 0.log for the first attempt,
//     so the retry of a CreateContainer that timed out asks for attempt 1.
//   - log_path: "<attempt>.log", following the attempt.
//   - the annotation io.kubernetes.container.restartCount: the attempt again.
//   - the host path of the mount whose container path is the annotation
//     io.kubernetes.container.terminationMessagePath: the kubelet makes a new, randomly
//     named file (<pod dir>/containers/<name>/<8 hex digits>) for every call.
func leaveOutPerCall(msg proto.Message) proto.Message {
	switch cfg := msg.(type) {
	case *runtimeapi.PodSandboxConfig:
		if cfg == nil {
			return msg
		}
		c := leaveOutKubeletLocal(cfg)
		if c.Metadata != nil {
			c.Metadata.Attempt = 0
		}
		return c
	case *runtimeapi.ContainerConfig:
		if cfg == nil {
			return msg
		}
		c := proto.Clone(cfg).(*runtimeapi.ContainerConfig)
		if c.Metadata != nil {
			c.Metadata.Attempt = 0
		}
		c.LogPath = ""
		delete(c.Annotations, annotationRestartCount)
		if m := terminationMessageMount(c); m != nil {
			m.HostPath = ""
		}
		return c
	}
	return msg
}

// leaveOutKubeletLocal returns a copy of cfg without kubeletLocalAnnotations.
func leaveOutKubeletLocal(cfg *runtimeapi.PodSandboxConfig) *runtimeapi.PodSandboxConfig {
	c := proto.Clone(cfg).(*runtimeapi.PodSandboxConfig)
	for _, k := range kubeletLocalAnnotations {
		delete(c.Annotations, k)
	}
	return c
}

// terminationMessageMount returns the mount of cfg that the kubelet made for the
// termination message (its container path is the annotation naming that path), or nil.
func terminationMessageMount(cfg *runtimeapi.ContainerConfig) *runtimeapi.Mount {
	path := cfg.GetAnnotations()[annotationTerminationMessagePath]
	if path == "" {
		return nil
	}
	for _, m := range cfg.GetMounts() {
		if m.GetContainerPath() == path {
			return m
		}
	}
	return nil
}

// fingerprint digests a request (current format, see fingerprintVersion).
func fingerprint(msg proto.Message, extra ...string) string {
	return fingerprintVersion + digest(leaveOutPerCall(msg), extra...)
}

// olderFingerprints digests a request in each format written before fingerprintVersion,
// for the records written then.
func olderFingerprints(msg proto.Message, extra ...string) []string {
	v2 := msg
	if cfg, ok := msg.(*runtimeapi.PodSandboxConfig); ok && cfg != nil {
		v2 = leaveOutKubeletLocal(cfg)
	}
	return []string{fingerprintV2 + digest(v2, extra...), legacyFingerprint(msg, extra...)}
}

// legacyFingerprint digests a request as binaries before the v2 format did.
func legacyFingerprint(msg proto.Message, extra ...string) string {
	return digest(msg, extra...)
}

func digest(msg proto.Message, extra ...string) string {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		// Cannot happen for a message that was just unmarshalled. Should it, the error
		// stands in for the digest (requests that fail alike share it).
		return "unmarshalable:" + err.Error()
	}
	h := sha256.New()
	h.Write(b)
	for _, e := range extra {
		h.Write([]byte{0})
		h.Write([]byte(e))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// containerAsRetried is the config a claimed container is recorded with: the retry's
// own, which differs from the one it was made from (made) only in the per-call fields
// (leaveOutPerCall), so that its status shows the attempt, restart count and log path the
// claiming client asked for. The termination-message mount keeps the host path it was
// made with: that file is mounted in the container, and the one the retry's client made
// for it stays unused.
func containerAsRetried(made, retry *runtimeapi.ContainerConfig) *runtimeapi.ContainerConfig {
	c := proto.Clone(retry).(*runtimeapi.ContainerConfig)
	if m, was := terminationMessageMount(c), terminationMessageMount(made); m != nil && was != nil {
		m.HostPath = was.GetHostPath()
	}
	return c
}
