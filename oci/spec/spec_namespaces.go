package spec

import (
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Namespaces of the spec: the sandbox's pinned ones by path, the pid namespace by the
// pid option.

// namespaces returns the container's namespaces and whether it has a UTS namespace of
// its own or its pod's (so that a hostname may be set). target is the pid namespace of
// the target container, for pid TARGET.
func namespaces(paths map[string]string, target string, opts *runtimeapi.NamespaceOption) ([]specs.LinuxNamespace, bool, error) {
	for k, p := range paths {
		switch k {
		case "net", "ipc", "uts", "pid", "user":
		default:
			return nil, false, invalid("unknown namespace kind %q", k)
		}
		if p != "" && !filepath.IsAbs(p) {
			return nil, false, invalid("%s namespace path %q is not absolute", k, p)
		}
	}
	if u := opts.GetUsernsOptions(); u != nil && u.GetMode() != runtimeapi.NamespaceMode_NODE && paths["user"] == "" {
		return nil, false, invalid("user namespace mode %s: the pod has no user namespace of its own", u.GetMode())
	}
	nss := []specs.LinuxNamespace{{Type: specs.MountNamespace}}
	if p := paths["user"]; p != "" {
		// The pod's user namespace, whatever the container's own option says: the
		// pod's other namespaces belong to it. No uid or gid mappings: runc reads
		// them from the namespace it joins (and warns when both are given).
		nss = append(nss, specs.LinuxNamespace{Type: specs.UserNamespace, Path: p})
	}
	pid, ok, err := pidNamespace(paths["pid"], target, opts)
	if err != nil {
		return nil, false, err
	}
	if ok {
		nss = append(nss, pid)
	}
	for _, k := range []struct {
		key string
		typ specs.LinuxNamespaceType
	}{{"net", specs.NetworkNamespace}, {"ipc", specs.IPCNamespace}, {"uts", specs.UTSNamespace}} {
		if p := paths[k.key]; p != "" {
			nss = append(nss, specs.LinuxNamespace{Type: k.typ, Path: p})
		}
	}
	return nss, paths["uts"] != "", nil
}

// pidNamespace returns the container's pid namespace for its pid option, and false for
// the host's (NODE). pod is the pod's shared pid namespace ("" for none), target the
// target container's (for TARGET).
func pidNamespace(pod, target string, opts *runtimeapi.NamespaceOption) (specs.LinuxNamespace, bool, error) {
	switch mode := opts.GetPid(); {
	case mode == runtimeapi.NamespaceMode_NODE:
		return specs.LinuxNamespace{}, false, nil
	case mode == runtimeapi.NamespaceMode_TARGET:
		// The target container's (kubectl debug --target).
		if target == "" || !filepath.IsAbs(target) {
			return specs.LinuxNamespace{}, false, invalid("pid namespace TARGET (target %q) needs the absolute path of the target's pid namespace, got %q", opts.GetTargetId(), target)
		}
		return specs.LinuxNamespace{Type: specs.PIDNamespace, Path: target}, true, nil
	case mode == runtimeapi.NamespaceMode_POD && pod != "":
		// The pod's shared pid namespace (held by its pause process).
		return specs.LinuxNamespace{Type: specs.PIDNamespace, Path: pod}, true, nil
	default:
		// CONTAINER (and POD in a pod without a shared pid namespace): its own.
		return specs.LinuxNamespace{Type: specs.PIDNamespace}, true, nil
	}
}
