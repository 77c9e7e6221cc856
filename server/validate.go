package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// namePart is what a pod name, namespace or UID may be made of: letters, digits, '-' and
// '.', starting and ending with a letter or digit, at most 253 characters. '_' is refused
// because it separates the parts of a sandbox name; '/' and ".." because names must never
// escape a path.
var namePart = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$`)

func checkNamePart(field, value string) error {
	switch {
	case value == "":
		return invalidf("%s is required", field)
	case strings.Contains(value, ".."):
		return invalidf("%s %q must not contain \"..\"", field, value)
	case !namePart.MatchString(value):
		return invalidf("%s %q is invalid: use letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters", field, value)
	}
	return nil
}

// sandboxName validates a pod sandbox config and returns its name,
// k8s_<name>_<namespace>_<uid>_<attempt> (as CRI-O and containerd name them).
func sandboxName(cfg *runtimeapi.PodSandboxConfig) (string, error) {
	if cfg == nil {
		return "", invalidf("config is required")
	}
	md := cfg.GetMetadata()
	if md == nil {
		return "", invalidf("config.metadata is required")
	}
	for _, f := range []struct{ field, value string }{
		{"metadata.name", md.GetName()}, {"metadata.namespace", md.GetNamespace()}, {"metadata.uid", md.GetUid()},
	} {
		if err := checkNamePart(f.field, f.value); err != nil {
			return "", err
		}
	}
	if h := cfg.GetHostname(); h != "" && !hostnamePattern.MatchString(h) {
		return "", invalidf("hostname %q is invalid: at most 63 letters, digits, '-' and '.'", h)
	}
	return fmt.Sprintf("k8s_%s_%s_%s_%d", md.GetName(), md.GetNamespace(), md.GetUid(), md.GetAttempt()), nil
}

var hostnamePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,61}[A-Za-z0-9])?$`)

// Fingerprints tell a retry from a different request under the same name (DESIGN §4). They
// are stored in journal records, so their format is on disk:
//
//   - "v2:<sha256 hex>" (fingerprintVersion): the request's config, deterministic
//     protobuf, without kubeletLocalAnnotations, then each extra value after a NUL.
//   - "<sha256 hex>" (written before v2): the same over the whole config. Records written
//     then still hold it (a created record for as long as it lives): reserve accepts it
//     through legacyFingerprint, so no migration is needed and a journal stays readable
//     by the binary that wrote it.
const fingerprintVersion = "v2:"

// kubeletLocalAnnotations are the pod annotations the kubelet manages by itself and leaves
// out when it decides whether a pod changed (isLocalAnnotationKey in the kubelet's
// pkg/kubelet/config): the first-seen time, stamped anew on every pod a restarted kubelet
// sees (so the retry of a RunPodSandbox that timed out before a kubelet restart carries a
// different one), the config source, and the mirror-pod hash. The kubelet copies all pod
// annotations into PodSandboxConfig. DESIGN §6: "the fingerprint covers what the request
// asks for, not who asked when" — these say when and through what the kubelet learnt of
// the pod, not what the pod asks for, so they stay out of it. Everything else, labels,
// other annotations, metadata, DNS, ports, namespaces, cgroup parent and security context
// included, counts: a change there is a different request.
var kubeletLocalAnnotations = []string{
	"kubernetes.io/config.seen",
	"kubernetes.io/config.source",
	"kubernetes.io/config.mirror",
}

// fingerprint digests a request (current format, see fingerprintVersion).
func fingerprint(msg proto.Message, extra ...string) string {
	if cfg, ok := msg.(*runtimeapi.PodSandboxConfig); ok && cfg != nil {
		stripped := proto.Clone(cfg).(*runtimeapi.PodSandboxConfig)
		for _, k := range kubeletLocalAnnotations {
			delete(stripped.Annotations, k)
		}
		msg = stripped
	}
	return fingerprintVersion + digest(msg, extra...)
}

// legacyFingerprint digests a request as binaries before fingerprintVersion did, for
// records they wrote.
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
