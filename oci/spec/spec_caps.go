package spec

import (
	"maps"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Capabilities of the spec: the default set, the CRI add and drop, and the daemon's
// bounding set for privileged containers.

// CapNames are the Linux capabilities by number (linux/capability.h), up to
// CAP_CHECKPOINT_RESTORE (40).
var CapNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
	"CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
	"CAP_PERFMON", "CAP_BPF", "CAP_CHECKPOINT_RESTORE",
}

// DefaultCapabilities is the capability set of an unprivileged container before the
// request's add and drop: containerd's default set.
var DefaultCapabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// normalizeCap turns "net_admin", "NET_ADMIN" or "CAP_NET_ADMIN" into "CAP_NET_ADMIN"
// ("ALL" stays "ALL").
func normalizeCap(name string) string {
	n := strings.ToUpper(strings.TrimSpace(name))
	if n == "ALL" || strings.HasPrefix(n, "CAP_") {
		return n
	}
	return "CAP_" + n
}

// capabilities computes the container's capability sets. Privileged gets every
// capability of the daemon's bounding set; otherwise the default set (as far as the
// daemon has it) with the request's add and drop applied, "ALL" first, as containerd
// does. Naming a capability the daemon does not have is refused: runc would fail with
// "unable to apply caps".
func capabilities(sc *runtimeapi.LinuxContainerSecurityContext, bounding []string) (*specs.LinuxCapabilities, error) {
	have := map[string]bool{}
	for _, c := range bounding {
		have[c] = true
	}
	set := map[string]bool{}
	addAll := func() {
		for _, c := range bounding {
			set[c] = true
		}
	}
	check := func(c, what string) error {
		if !slices.Contains(CapNames, c) {
			return invalid("%s: unknown capability %q", what, c)
		}
		if !have[c] {
			return invalid("%s: capability %s is not in crijournal's own bounding set, so the runtime cannot grant it", what, c)
		}
		return nil
	}
	var ambient []string
	if sc.GetPrivileged() {
		addAll()
	} else {
		for _, c := range DefaultCapabilities {
			if have[c] {
				set[c] = true
			}
		}
		add := sc.GetCapabilities().GetAddCapabilities()
		drop := sc.GetCapabilities().GetDropCapabilities()
		if slices.ContainsFunc(add, func(c string) bool { return normalizeCap(c) == "ALL" }) {
			addAll()
		}
		if slices.ContainsFunc(drop, func(c string) bool { return normalizeCap(c) == "ALL" }) {
			clear(set)
		}
		for _, c := range add {
			if c = normalizeCap(c); c == "ALL" {
				continue
			}
			if err := check(c, "add capability"); err != nil {
				return nil, err
			}
			set[c] = true
		}
		for _, c := range drop {
			if c = normalizeCap(c); c != "ALL" {
				delete(set, c)
			}
		}
	}
	for _, c := range sc.GetCapabilities().GetAddAmbientCapabilities() {
		c = normalizeCap(c)
		if err := check(c, "add ambient capability"); err != nil {
			return nil, err
		}
		set[c] = true
		ambient = append(ambient, c)
	}
	list := slices.Sorted(maps.Keys(set))
	slices.Sort(ambient)
	ambient = slices.Compact(ambient)
	return &specs.LinuxCapabilities{
		Bounding:    list,
		Effective:   slices.Clone(list),
		Permitted:   slices.Clone(list),
		Inheritable: ambient,
		Ambient:     slices.Clone(ambient),
	}, nil
}
