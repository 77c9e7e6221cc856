package spec

import (
	"fmt"
	"slices"
	"strings"
)

// The text of the default AppArmor profile, [DefaultAppArmorProfile].
//
// Its rules are those of the default container profile that Docker wrote and
// containerd maintains: github.com/containerd/containerd/v2/contrib/apparmor
// (template.go, v2.4.2), whose ancestor github.com/moby/profiles/apparmor CRI-O
// and Podman use too. A container may use the network, its capabilities and its
// files, but may not mount; may write in /proc only in the directories of
// processes (/proc/<pid>/) and to /proc/sys/kernel/shm*; may write in /sys only
// under /sys/fs/cgroup; and may not touch /proc/kcore, /proc/sysrq-trigger,
// /sys/firmware, powercap or securityfs at all.
//
// The generator is ours, not an import: containerd's package would bring its whole
// module and a dozen others into go.mod for this text, and moby's only loads the
// profile (through a temporary file, without a context) and does not show it. A
// change to the rules upstream should be followed here.

// AppArmorProfileInput is everything the text of the default profile depends on.
type AppArmorProfileInput struct {
	// Name is the profile's name.
	Name string
	// Daemon is the profile the daemon runs under ("unconfined" or "" for none). Its
	// processes may signal the containers. A name the policy language cannot hold
	// (see validAppArmorName) is left out.
	Daemon string
	// ABI says the node's policy has abi/3.0, which the profile then declares (so
	// that a newer parser does not apply rules the profile was not written for).
	ABI bool
	// Tunables says the node's policy has tunables/global, which the profile
	// includes; without it the profile defines @{PROC} itself.
	Tunables bool
	// Base says the node's policy has abstractions/base, which the profile includes.
	Base bool
}

// appArmorAllow is what a confined container may do: everything that the deny rules
// and the absence of mount rules do not take away again.
const appArmorAllow = `  network,
  capability,
  file,
  umount,
`

// appArmorDeny are the rules that make the profile a confinement. Deny rules win
// over the allow rules whatever their order.
const appArmorDeny = `  # No writes to files directly in /proc.
  deny @{PROC}/* w,
  # No writes under /proc/<entry>/ unless <entry> is a process (a number) or sys.
  deny @{PROC}/{[^1-9/],[^1-9/][^0-9/],[^1-9s/][^0-9y/][^0-9s/],[^1-9/][^0-9/][^0-9/][^0-9/]*}/** w,
  # Under /proc/sys, writes only to /proc/sys/k* (in effect kernel/)...
  deny @{PROC}/sys/[^k]** w,
  # ... and there only to shm*.
  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,

  deny mount,

  # Under /sys, writes only to the cgroup filesystem.
  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,
`

// appArmorSignalSenders are the profiles whose processes may signal a container's:
// host processes that run unconfined, and the OCI runtimes, which distributions
// confine under profiles named after them.
var appArmorSignalSenders = []string{"unconfined", "runc", "crun"}

// AppArmorProfile returns the text of the default profile for in. The same input
// gives the same text.
func AppArmorProfile(in AppArmorProfileInput) string {
	var b strings.Builder
	if in.ABI {
		b.WriteString("abi <abi/3.0>,\n\n")
	}
	if in.Tunables {
		b.WriteString("#include <tunables/global>\n\n")
	} else {
		b.WriteString("@{PROC}=/proc/\n\n")
	}
	name := appArmorName(in.Name)
	fmt.Fprintf(&b, "profile %s flags=(attach_disconnected,mediate_deleted) {\n", name)
	if in.Base {
		b.WriteString("  #include <abstractions/base>\n\n")
	}
	b.WriteString(appArmorAllow)

	b.WriteString("\n  # Who may signal the container's processes: the host's, the runtimes', the\n")
	b.WriteString("  # daemon's, and each other.\n")
	senders := appArmorSignalSenders
	if validAppArmorName(in.Daemon) && !slices.Contains(senders, in.Daemon) {
		senders = append(slices.Clone(senders), in.Daemon)
	}
	for _, p := range senders {
		fmt.Fprintf(&b, "  signal (receive) peer=%s,\n", appArmorName(p))
	}
	fmt.Fprintf(&b, "  signal (send,receive) peer=%s,\n\n", name)

	b.WriteString(appArmorDeny)

	b.WriteString("\n  # The container's processes may trace each other, where the other LSMs and\n")
	b.WriteString("  # Yama allow it.\n")
	fmt.Fprintf(&b, "  ptrace (trace,tracedby,read,readby) peer=%s,\n}\n", name)
	return b.String()
}

// appArmorName writes a profile name as the policy language wants it: quoted when it
// has white space. The name is one validAppArmorName accepts.
func appArmorName(name string) string {
	if strings.ContainsAny(name, " \t") {
		return `"` + name + `"`
	}
	return name
}

// validAppArmorName says whether name can be written in a profile: not empty, and
// without quotes, backslashes, commas, braces or control characters, which would
// end or change the rule it is in.
func validAppArmorName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || strings.ContainsRune("\"\\,{}#", r) {
			return false
		}
	}
	return true
}
