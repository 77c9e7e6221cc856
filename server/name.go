package server

import (
	"fmt"
	"regexp"
	"strings"

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
		return "", invalidf("hostname %q is invalid: at most 64 letters, digits, '-' and '.', starting with a letter or digit", h)
	}
	return fmt.Sprintf("k8s_%s_%s_%s_%d", md.GetName(), md.GetNamespace(), md.GetUid(), md.GetAttempt()), nil
}

// sandboxIdentity is what a sandbox creation makes whatever its attempt: a sandbox of
// the pod (journal.Record.Identity).
func sandboxIdentity(cfg *runtimeapi.PodSandboxConfig) string {
	md := cfg.GetMetadata()
	return md.GetNamespace() + "/" + md.GetName() + "/" + md.GetUid()
}

// hostnamePattern is what a pod's hostname may be: what the kernel takes for a UTS
// hostname (at most 64 bytes), in the characters of DNS names, starting with a letter or
// digit. It may end with a dot: with setHostnameAsFQDN and no cluster domain the kubelet
// sends an absolute name such as "web-0.sub.default.svc.", which the anchors set as it is.
var hostnamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,63}$`)

// containerName validates a container config and returns its name,
// k8s_<container>_<pod>_<namespace>_<uid>_<attempt>.
func containerName(cfg *runtimeapi.ContainerConfig, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	if cfg == nil {
		return "", invalidf("config is required")
	}
	md := cfg.GetMetadata()
	if md == nil {
		return "", invalidf("config.metadata is required")
	}
	if err := checkNamePart("metadata.name", md.GetName()); err != nil {
		return "", err
	}
	if cfg.GetImage().GetImage() == "" {
		return "", invalidf("config.image.image is required")
	}
	if sc := cfg.GetLinux().GetSecurityContext(); sc.GetRunAsGroup() != nil && sc.GetRunAsUser() == nil && sc.GetRunAsUsername() == "" {
		return "", invalidf("config.linux.security_context.run_as_group needs run_as_user or run_as_username")
	}
	smd := sandbox.GetMetadata()
	return fmt.Sprintf("k8s_%s_%s_%s_%s_%d", md.GetName(), smd.GetName(), smd.GetNamespace(), smd.GetUid(), md.GetAttempt()), nil
}

// containerIdentity is what a container creation makes whatever its attempt: the
// container of that name in the sandbox (journal.Record.Identity).
func containerIdentity(sandboxID string, cfg *runtimeapi.ContainerConfig) string {
	return sandboxID + "/" + cfg.GetMetadata().GetName()
}
