package oci

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// ErrInvalidSpec is returned when a container's configuration cannot be turned into a
// runtime spec: a relative or ".." container path, a missing host path, an unknown
// capability, a user that the image does not have, and so on. The server maps it to
// InvalidArgument.
var ErrInvalidSpec = errors.New("invalid container configuration")

// SpecVersion is the ociVersion written into every spec. It is the version runc 1.1
// (Debian 12) implements, not the newer version of the Go types: crun refuses specs
// that claim a version it does not know, and nothing this package sets is newer.
const SpecVersion = "1.0.2"

// DefaultCgroupParent is the cgroup parent of containers whose sandbox names none.
const DefaultCgroupParent = "/crijournal"

// cgroupsPath returns the cgroupfs path of the cgroup of a container, or of a sandbox's
// pause process, with the given ID under parent ("" for DefaultCgroupParent).
func cgroupsPath(parent, id string) (string, error) {
	if parent == "" {
		parent = DefaultCgroupParent
	}
	if !path.IsAbs(parent) || hasDotDot(parent) {
		return "", invalid("cgroup parent %q is not an absolute cgroupfs path", parent)
	}
	return path.Join(parent, cgroupPrefix+id), nil
}

// SandboxCgroup returns the cgroupfs path of the cgroup of a sandbox's pause process: a
// sibling of its containers' under the sandbox's cgroup_parent, as runc makes the
// cgroup of a pause container.
func SandboxCgroup(sandboxID string, sandbox *runtimeapi.PodSandboxConfig) (string, error) {
	return cgroupsPath(sandbox.GetLinux().GetCgroupParent(), sandboxID)
}

// cgroupPrefix starts the name of each container's own cgroup under its parent.
const cgroupPrefix = "crijournal-"

// defaultPath is the PATH of a process whose image and request set none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ImageConfig is the part of an image's configuration that shapes a container's
// process.
type ImageConfig struct {
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=value
	WorkingDir string
	User       string // "", "uid", "uid:gid", "name" or "name:group"
	StopSignal string // "SIGTERM", "TERM" or "15"; see ParseSignal
}

// SpecInput is everything Spec needs to build a container's runtime spec.
type SpecInput struct {
	// ID is the container ID; it names the container's cgroup.
	ID        string
	Container *runtimeapi.ContainerConfig
	Sandbox   *runtimeapi.PodSandboxConfig
	Image     ImageConfig
	// Rootfs is the mounted root filesystem (absolute).
	Rootfs string
	// Namespaces holds the pinned namespace paths of the sandbox, by kind: "net",
	// "ipc", "uts" and optionally "pid" and "user" (the pod's own user namespace,
	// which the container then joins, whatever its own option says). A kind that is absent means the host's
	// namespace for net, ipc and uts. The container joins the "pid" one only when
	// its own namespace option pid is POD; otherwise (CONTAINER, or no "pid"
	// path) it gets a new pid namespace, and the host's for pid NODE. The
	// container always gets a new mount namespace.
	Namespaces map[string]string
	// TargetPidNamespace is the pid namespace of the container that a container whose
	// pid option is TARGET joins (/proc/<target's init pid>/ns/pid); it is required in
	// that mode and ignored in the others.
	TargetPidNamespace string
	// Hostname is set in the container's UTS namespace when it has one (it defaults
	// to the sandbox config's hostname); with the host's UTS namespace it is ignored.
	Hostname string
	// CgroupParent is the cgroupfs parent of the container's cgroup, an absolute path
	// such as "/kubepods/burstable/pod<uid>". Empty means the sandbox config's
	// cgroup_parent, and if that is empty too, DefaultCgroupParent. The container's
	// cgroup is <parent>/crijournal-<ID>.
	CgroupParent string
	// ResolvConf, Hosts and ShmPath are optional bind sources for /etc/resolv.conf,
	// /etc/hosts and /dev/shm.
	ResolvConf, Hosts, ShmPath string
	// HostnameFile is an optional bind source for /etc/hostname.
	HostnameFile string
	// NoSeccomp says the node has no seccomp support (the configuration's
	// seccomp_unavailable): a container that asks for a seccomp profile is refused.
	NoSeccomp bool
	// RecursiveReadOnly says that the handler's runtime knows the "rro" mount option
	// (Features.RecursiveReadOnlyMounts); without it a recursive read-only mount is
	// refused.
	RecursiveReadOnly bool
	// ImageVolumes holds the mounted root of each image volume (see ImageVolumes) by
	// its container path.
	ImageVolumes map[string]string
}

// Spec builds the OCI runtime spec of a CRI container. See the package documentation
// for the rules; every refusal of the configuration wraps ErrInvalidSpec. It reads
// the daemon's own capability bounding set and oom_score_adj from /proc/self, the
// cgroup layout from /sys/fs/cgroup, the user and group databases from the
// container's root filesystem and, for a privileged container, the host's /dev. Where AppArmor is enabled and the
// container needs the default AppArmor profile, it loads that profile if it is not
// loaded (see [DefaultAppArmorProfile]); ctx bounds that, and a failure is
// [ErrNoDefaultAppArmor].
func Spec(ctx context.Context, in SpecInput) (*specs.Spec, error) {
	h, err := readHost()
	if err != nil {
		return nil, err
	}
	return buildSpec(ctx, in, h)
}

// host is what the spec depends on outside its input: facts about the daemon and the
// machine. Tests build their own.
type host struct {
	bounding    []string // capability names (CAP_*) in the daemon's bounding set
	oomScoreAdj int      // the daemon's own oom_score_adj
	// sysResource says the daemon has CAP_SYS_RESOURCE in its effective set, so its
	// runtime may give a container an oom_score_adj below the daemon's own.
	sysResource bool
	cgroup2     bool // pure cgroup v2 (unified) hierarchy
	hugetlb     bool // a hugetlb controller is available
	swap        bool // swap limits are available
	// devices lists the host's devices for privileged containers; nil means none.
	devices func() ([]specs.LinuxDevice, error)

	// seccomp: the kernel filters system calls (see seccomp.go).
	seccomp bool
	// apparmor: whether AppArmor confines processes, and its profiles (apparmor.go).
	apparmor appArmorHost
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
}

func buildSpec(ctx context.Context, in SpecInput, h host) (*specs.Spec, error) {
	c := in.Container
	if c == nil {
		return nil, invalid("no container config")
	}
	if err := validID(in.ID); err != nil {
		return nil, invalid("%v", err)
	}
	if !filepath.IsAbs(in.Rootfs) {
		return nil, invalid("root filesystem path %q is not absolute", in.Rootfs)
	}
	sc := c.GetLinux().GetSecurityContext()
	privileged := sc.GetPrivileged()

	args, err := processArgs(c.Command, c.Args, in.Image)
	if err != nil {
		return nil, err
	}
	cwd := c.WorkingDir
	if cwd == "" {
		cwd = in.Image.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	if !path.IsAbs(cwd) {
		return nil, invalid("working directory %q is not absolute", cwd)
	}
	user, home, err := resolveUser(in.Rootfs, sc, in.Image.User)
	if err != nil {
		return nil, err
	}
	env := mergeEnv(in.Image.Env, c.Envs, home)
	caps, err := capabilities(sc, h.bounding)
	if err != nil {
		return nil, err
	}
	adj := oomScoreAdj(c.GetLinux().GetResources().GetOomScoreAdj(), h)

	s := &specs.Spec{
		Version: SpecVersion,
		Process: &specs.Process{
			Terminal:        c.Tty,
			User:            user,
			Args:            args,
			Env:             env,
			Cwd:             cwd,
			Capabilities:    caps,
			NoNewPrivileges: sc.GetNoNewPrivs(),
			OOMScoreAdj:     &adj,
		},
		Root: &specs.Root{Path: in.Rootfs, Readonly: sc.GetReadonlyRootfs()},
		Linux: &specs.Linux{
			Sysctl: maps.Clone(in.Sandbox.GetLinux().GetSysctls()),
		},
	}
	if len(c.Annotations) > 0 {
		s.Annotations = maps.Clone(c.Annotations)
	}

	nss, utsShared, err := namespaces(in.Namespaces, in.TargetPidNamespace, sc.GetNamespaceOptions())
	if err != nil {
		return nil, err
	}
	s.Linux.Namespaces = nss
	if utsShared {
		s.Hostname = in.Hostname
		if s.Hostname == "" {
			s.Hostname = in.Sandbox.GetHostname()
		}
	}

	mounts, propagation, err := containerMounts(in, privileged, sc.GetReadonlyRootfs())
	if err != nil {
		return nil, err
	}
	s.Mounts = mounts
	s.Linux.RootfsPropagation = propagation

	parent := in.CgroupParent
	if parent == "" {
		parent = in.Sandbox.GetLinux().GetCgroupParent()
	}
	if s.Linux.CgroupsPath, err = cgroupsPath(parent, in.ID); err != nil {
		return nil, err
	}

	res, err := resources(c.GetLinux().GetResources(), h)
	if err != nil {
		return nil, err
	}
	s.Linux.Resources = res

	if privileged {
		s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
		if h.devices != nil {
			devs, err := h.devices()
			if err != nil {
				return nil, fmt.Errorf("host devices for privileged container: %w", err)
			}
			s.Linux.Devices = devs
		}
	} else {
		s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
		s.Linux.MaskedPaths = slices.Clone(defaultMaskedPaths)
		if p := sc.GetMaskedPaths(); len(p) > 0 {
			s.Linux.MaskedPaths = slices.Clone(p)
		}
		s.Linux.ReadonlyPaths = slices.Clone(defaultReadonlyPaths)
		if p := sc.GetReadonlyPaths(); len(p) > 0 {
			s.Linux.ReadonlyPaths = slices.Clone(p)
		}
	}
	for _, d := range c.Devices {
		dev, rule, err := criDevice(d)
		if err != nil {
			return nil, err
		}
		s.Linux.Devices = slices.DeleteFunc(s.Linux.Devices, func(x specs.LinuxDevice) bool { return x.Path == dev.Path })
		s.Linux.Devices = append(s.Linux.Devices, dev)
		if !privileged {
			s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, rule)
		}
	}
	if err := confine(ctx, s, sc, h, in.NoSeccomp); err != nil {
		return nil, err
	}
	return s, nil
}

// processArgs merges the CRI command and args with the image's entrypoint and cmd the
// way containerd and CRI-O do: command replaces the entrypoint, args replaces cmd, and
// a command given without args drops the image's cmd.
func processArgs(command, args []string, img ImageConfig) ([]string, error) {
	if len(command) == 0 {
		if len(args) == 0 {
			args = img.Cmd
		}
		// An entrypoint of [""] is the image's way of saying "none".
		if !(len(img.Entrypoint) == 1 && img.Entrypoint[0] == "") {
			command = img.Entrypoint
		}
	}
	out := append(slices.Clone(command), args...)
	if len(out) == 0 {
		return nil, invalid("no command specified: neither the request nor the image has one")
	}
	return out, nil
}

// mergeEnv returns the image's environment with the request's variables replacing or
// following it, then PATH and HOME if neither set them.
func mergeEnv(image []string, cri []*runtimeapi.KeyValue, home string) []string {
	var env []string
	index := map[string]int{}
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			env[i] = kv
			return
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	for _, kv := range image {
		if kv != "" {
			set(kv)
		}
	}
	for _, kv := range cri {
		if kv.GetKey() != "" {
			set(kv.GetKey() + "=" + string(kv.GetValue()))
		}
	}
	if _, ok := index["PATH"]; !ok {
		set("PATH=" + defaultPath)
	}
	if _, ok := index["HOME"]; !ok {
		if home == "" {
			home = "/"
		}
		set("HOME=" + home)
	}
	return env
}

func hasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// oomScoreAdj is the container's oom_score_adj: the requested one within the
// kernel's range [-1000, 1000], and not below the daemon's own when the daemon lacks
// CAP_SYS_RESOURCE (the kernel would refuse runc a lower one, as containerd knows).
func oomScoreAdj(requested int64, h host) int {
	adj := min(max(requested, -1000), 1000)
	if !h.sysResource {
		adj = max(adj, int64(h.oomScoreAdj))
	}
	return int(adj)
}

// Capabilities.

// capNames are the Linux capabilities by number (linux/capability.h), up to
// CAP_CHECKPOINT_RESTORE (40).
var capNames = []string{
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
		if !slices.Contains(capNames, c) {
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

// Namespaces.

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

// Mounts.

var defaultMaskedPaths = []string{
	"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
	"/sys/firmware", "/sys/devices/virtual/powercap",
}

var defaultReadonlyPaths = []string{
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
}

// allowedMountOptions are the CRI mount_options a bind mount may carry.
var allowedMountOptions = []string{
	"nosuid", "suid", "nodev", "dev", "noexec", "exec", "noatime", "atime",
	"nodiratime", "diratime", "relatime", "norelatime", "strictatime", "nostrictatime",
}

// containerMounts returns the container's mounts (the standard ones, the sandbox's
// files, then the request's, which replace a standard mount at the same destination)
// and the root filesystem propagation the request's mounts need.
func containerMounts(in SpecInput, privileged, readonlyRootfs bool) ([]specs.Mount, string, error) {
	sysOpt := "ro"
	if privileged {
		sysOpt = "rw"
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", sysOpt}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", sysOpt}},
	}
	if in.ShmPath != "" {
		if !filepath.IsAbs(in.ShmPath) {
			return nil, "", invalid("shm path %q is not absolute", in.ShmPath)
		}
		mounts = append(mounts, specs.Mount{Destination: "/dev/shm", Type: "bind", Source: in.ShmPath,
			Options: []string{"rbind", "rprivate", "nosuid", "nodev", "noexec", "rw"}})
	} else {
		mounts = append(mounts, specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}})
	}
	fileOpt := "rw"
	if readonlyRootfs {
		fileOpt = "ro"
	}
	for _, f := range []struct{ dst, src string }{{"/etc/resolv.conf", in.ResolvConf}, {"/etc/hosts", in.Hosts}, {"/etc/hostname", in.HostnameFile}} {
		if f.src == "" {
			continue
		}
		if !filepath.IsAbs(f.src) {
			return nil, "", invalid("%s source %q is not absolute", f.dst, f.src)
		}
		mounts = append(mounts, specs.Mount{Destination: f.dst, Type: "bind", Source: f.src,
			Options: []string{"rbind", "rprivate", fileOpt}})
	}

	var own []specs.Mount
	propagation := ""
	for _, m := range in.Container.GetMounts() {
		om, prop, err := criMount(m, in)
		if err != nil {
			return nil, "", err
		}
		switch {
		case prop == "rshared":
			propagation = "rshared"
		case prop == "rslave" && propagation == "":
			propagation = "rslave"
		}
		own = slices.DeleteFunc(own, func(x specs.Mount) bool { return x.Destination == om.Destination })
		own = append(own, om)
	}
	// Parents before children, whatever order the request used.
	slices.SortStableFunc(own, func(a, b specs.Mount) int {
		return strings.Count(a.Destination, "/") - strings.Count(b.Destination, "/")
	})
	mounts = slices.DeleteFunc(mounts, func(x specs.Mount) bool {
		return slices.ContainsFunc(own, func(o specs.Mount) bool { return o.Destination == x.Destination })
	})
	return append(mounts, own...), propagation, nil
}

// criMount checks one requested mount and turns it into a bind mount: of its host path,
// or of its image's mounted root (in.ImageVolumes) for an image volume. In a pod with a
// user namespace of its own (in.Namespaces["user"]) the mount is idmapped: with the
// mount's own uid/gid mappings when it has them, otherwise through the container's user
// namespace (runc 1.2's "idmap" without mappings), so that files keep their host IDs on
// disk and the container's root owns what the host's root owns, as containerd and CRI-O do.
func criMount(m *runtimeapi.Mount, in SpecInput) (specs.Mount, string, error) {
	userns := in.Namespaces["user"] != ""
	dst := m.GetContainerPath()
	if !path.IsAbs(dst) {
		return specs.Mount{}, "", invalid("mount container path %q is not absolute", dst)
	}
	if hasDotDot(dst) {
		return specs.Mount{}, "", invalid("mount container path %q contains \"..\"", dst)
	}
	dst = path.Clean(dst)
	switch {
	case !userns && (len(m.GetUidMappings()) > 0 || len(m.GetGidMappings()) > 0):
		return specs.Mount{}, "", invalid("mount %s: ID-mapped mounts need a pod with its own user namespace", dst)
	case (len(m.GetUidMappings()) > 0) != (len(m.GetGidMappings()) > 0):
		return specs.Mount{}, "", invalid("mount %s: an ID-mapped mount needs both uid and gid mappings", dst)
	}
	var real string
	var err error
	if m.GetImage() != nil {
		real, err = imageVolumeSource(m, dst, in.ImageVolumes)
	} else {
		real, err = bindSource(m, dst)
	}
	if err != nil {
		return specs.Mount{}, "", err
	}
	var prop string
	switch m.GetPropagation() {
	case runtimeapi.MountPropagation_PROPAGATION_PRIVATE:
		prop = "rprivate"
	case runtimeapi.MountPropagation_PROPAGATION_HOST_TO_CONTAINER:
		prop = "rslave"
	case runtimeapi.MountPropagation_PROPAGATION_BIDIRECTIONAL:
		prop = "rshared"
	default:
		return specs.Mount{}, "", invalid("mount %s: unknown propagation %v", dst, m.GetPropagation())
	}
	opts := []string{"rbind", prop}
	if m.GetReadonly() {
		opts = append(opts, "ro")
	} else {
		opts = append(opts, "rw")
	}
	if m.GetRecursiveReadOnly() {
		if err := recursiveReadOnly(m, dst, prop, in.RecursiveReadOnly); err != nil {
			return specs.Mount{}, "", err
		}
		opts = append(opts, "rro")
	}
	for _, o := range m.GetMountOptions() {
		if !slices.Contains(allowedMountOptions, o) {
			return specs.Mount{}, "", invalid("mount %s: mount option %q is not allowed", dst, o)
		}
		opts = append(opts, o)
	}
	om := specs.Mount{Destination: dst, Type: "bind", Source: real, Options: opts}
	if userns {
		om.Options = append(om.Options, "idmap")
		om.UIDMappings, om.GIDMappings = linuxIDMaps(m.GetUidMappings()), linuxIDMaps(m.GetGidMappings())
	}
	return om, prop, nil
}

func linuxIDMaps(maps []*runtimeapi.IDMapping) []specs.LinuxIDMapping {
	var out []specs.LinuxIDMapping
	for _, m := range maps {
		out = append(out, specs.LinuxIDMapping{ContainerID: m.GetContainerId(), HostID: m.GetHostId(), Size: m.GetLength()})
	}
	return out
}

// Resources.

// resources turns CRI resources into cgroup limits. Swap, hugepage and unified
// (cgroup v2) settings the machine cannot apply are left out, as runc would fail on
// them.
func resources(r *runtimeapi.LinuxContainerResources, h host) (*specs.LinuxResources, error) {
	res := &specs.LinuxResources{}
	if r == nil {
		return res, nil
	}
	if r.CpuPeriod < 0 || r.CpuShares < 0 || r.MemoryLimitInBytes < 0 || r.MemorySwapLimitInBytes < -1 {
		return nil, invalid("negative resource limit")
	}
	cpu := &specs.LinuxCPU{Cpus: r.CpusetCpus, Mems: r.CpusetMems}
	if r.CpuPeriod > 0 {
		p := uint64(r.CpuPeriod)
		cpu.Period = &p
	}
	if r.CpuQuota != 0 {
		q := r.CpuQuota
		cpu.Quota = &q
	}
	if r.CpuShares > 0 {
		s := uint64(r.CpuShares)
		cpu.Shares = &s
	}
	if *cpu != (specs.LinuxCPU{}) {
		res.CPU = cpu
	}
	if r.MemoryLimitInBytes > 0 {
		lim := r.MemoryLimitInBytes
		res.Memory = &specs.LinuxMemory{Limit: &lim}
		if r.MemorySwapLimitInBytes != 0 && h.swap {
			swap := r.MemorySwapLimitInBytes
			res.Memory.Swap = &swap
		}
	}
	if h.hugetlb {
		for _, l := range r.HugepageLimits {
			res.HugepageLimits = append(res.HugepageLimits, specs.LinuxHugepageLimit{Pagesize: l.PageSize, Limit: l.Limit})
		}
	}
	if h.cgroup2 && len(r.Unified) > 0 {
		res.Unified = maps.Clone(r.Unified)
	}
	return res, nil
}

// ParseSignal parses a stop signal as images write it: "SIGTERM", "TERM", "sigterm",
// "15", "SIGRTMIN+3" or "RTMAX-1". Empty means SIGTERM.
func ParseSignal(s string) (syscall.Signal, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if name == "" {
		return syscall.SIGTERM, nil
	}
	const rtmin, rtmax = 34, 64
	valid := func(n int) (syscall.Signal, error) {
		if n < 1 || n > rtmax {
			return 0, invalid("signal %q is out of range", s)
		}
		return syscall.Signal(n), nil
	}
	if n, err := strconv.Atoi(name); err == nil {
		return valid(n)
	}
	name = strings.TrimPrefix(name, "SIG")
	for _, rt := range []struct {
		prefix string
		base   int
	}{{"RTMIN", rtmin}, {"RTMAX", rtmax}} {
		rest, ok := strings.CutPrefix(name, rt.prefix)
		if !ok {
			continue
		}
		if rest == "" {
			return valid(rt.base)
		}
		n, err := strconv.Atoi(rest) // "+3" or "-1"
		if err != nil {
			return 0, invalid("unknown signal %q", s)
		}
		return valid(rt.base + n)
	}
	if sig := unix.SignalNum("SIG" + name); sig != 0 {
		return sig, nil
	}
	return 0, invalid("unknown signal %q", s)
}

// Resources converts CRI resources to OCI cgroup limits by the rules Spec uses, for
// UpdateContainerResources.
func Resources(r *runtimeapi.LinuxContainerResources) (*specs.LinuxResources, error) {
	h, err := readHost()
	if err != nil {
		return nil, err
	}
	return resources(r, h)
}
