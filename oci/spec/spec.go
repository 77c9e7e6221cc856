package spec

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
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

// DefaultPath is the PATH of a process whose image and request set none.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
	// SystemdCgroup says the cgroup driver is systemd: the parent is a slice name and
	// the container's cgroup the scope <parent>:crijournal:<ID> (see CgroupsPath).
	SystemdCgroup bool
	// ResolvConf, Hosts and ShmPath are optional bind sources for /etc/resolv.conf,
	// /etc/hosts and /dev/shm.
	ResolvConf, Hosts, ShmPath string
	// HostnameFile is an optional bind source for /etc/hostname. It, ResolvConf and
	// Hosts are mounted read-only when they are the node's own file at their container
	// path (the host's /etc/hosts for a pod on the host's network) or the root
	// filesystem is read-only, read-write otherwise.
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

// Host is what the spec depends on outside its input: facts about the daemon and the
// machine, and the lookups that read the node or the root filesystem. oci reads them
// (oci.Spec); tests build their own.
type Host struct {
	// User resolves the container's user and home directory from its root filesystem's
	// user and group databases (oci's resolveUser); nil means the root user, home "".
	User func(rootfs string, sc *runtimeapi.LinuxContainerSecurityContext, imageUser string) (specs.User, string, error)

	Bounding    []string // capability names (CAP_*) in the daemon's bounding set
	OOMScoreAdj int      // the daemon's own oom_score_adj
	// SysResource says the daemon has CAP_SYS_RESOURCE in its effective set, so its
	// runtime may give a container an oom_score_adj below the daemon's own.
	SysResource bool
	Cgroup2     bool // pure cgroup v2 (unified) hierarchy
	Hugetlb     bool // a hugetlb controller is available
	Swap        bool // swap limits are available
	// Devices lists the host's devices for privileged containers; nil means none.
	Devices func() ([]specs.LinuxDevice, error)
	// ThermalThrottle: the CPUs' thermal_throttle directories, masked after
	// defaultMaskedPaths (see thermalThrottlePaths).
	ThermalThrottle []string

	// Seccomp: the kernel filters system calls (see seccomp.go).
	Seccomp bool
	// AppArmor: whether AppArmor confines processes, and its profiles (apparmor.go).
	AppArmor AppArmorHost
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidSpec, fmt.Sprintf(format, args...))
}

// Build builds the OCI runtime spec of a CRI container from in, with the facts and
// lookups of h (see the package documentation of oci for the rules); every refusal of
// the configuration wraps ErrInvalidSpec. Where AppArmor is enabled and the container
// needs the default AppArmor profile, it has h load it if it is not loaded; ctx bounds
// that, and a failure is ErrNoDefaultAppArmor.
func Build(ctx context.Context, in SpecInput, h Host) (*specs.Spec, error) {
	c := in.Container
	if c == nil {
		return nil, invalid("no container config")
	}
	if err := ValidID(in.ID); err != nil {
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
	var user specs.User
	var home string
	if h.User != nil {
		if user, home, err = h.User(in.Rootfs, sc, in.Image.User); err != nil {
			return nil, err
		}
	}
	env := mergeEnv(in.Image.Env, c.Envs, home)
	caps, err := capabilities(sc, h.Bounding)
	if err != nil {
		return nil, err
	}
	adj := ClampOOMScoreAdj(c.GetLinux().GetResources().GetOomScoreAdj(), h)

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

	// The sandbox's cgroup_parent, such as "/kubepods/burstable/pod<uid>" (empty:
	// DefaultCgroupParent); the container's cgroup is <parent>/crijournal-<ID>.
	if s.Linux.CgroupsPath, err = CgroupsPath(in.Sandbox.GetLinux().GetCgroupParent(), in.ID, in.SystemdCgroup); err != nil {
		return nil, err
	}

	res, err := Resources(c.GetLinux().GetResources(), h)
	if err != nil {
		return nil, err
	}
	s.Linux.Resources = res

	if privileged {
		s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}
		if h.Devices != nil {
			devs, err := h.Devices()
			if err != nil {
				return nil, fmt.Errorf("host devices for privileged container: %w", err)
			}
			s.Linux.Devices = devs
		}
	} else {
		s.Linux.Resources.Devices = []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}
		s.Linux.MaskedPaths, s.Linux.ReadonlyPaths = procPaths(sc, in.Namespaces["user"] != "", h)
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

// procPaths returns the masked and read-only paths of an unprivileged container: the
// request's lists when it sends them, and when a list is empty, the default one, but in
// a container in its pod's own user namespace (userns), where an empty list means none.
//
// The kubelet encodes the pod API's procMount in these two lists
// (securitycontext.ConvertToRuntimeMaskedPaths and ConvertToRuntimeReadonlyPaths): the
// default lists for Default, both empty for Unmasked, which the API allows only with
// hostUsers: false (ValidateSecurityContext: "`hostUsers` must be false to use
// `Unmasked`"). An empty list reaches the runtime as no list at all (protobuf has no empty
// repeated field), so "Unmasked" and "nothing sent" are one request. containerd and CRI-O
// take it as "none masked" for every container. crijournal does so only in a user
// namespace, where the kubelet may ask for it; outside one the kubelet never sends empty
// lists, so an empty list there is a client that sends none (crictl's configurations)
// and the container keeps the defaults rather than a /proc that shows the host's.
func procPaths(sc *runtimeapi.LinuxContainerSecurityContext, userns bool, h Host) (masked, readonly []string) {
	masked, readonly = slices.Clone(sc.GetMaskedPaths()), slices.Clone(sc.GetReadonlyPaths())
	if userns {
		return masked, readonly
	}
	if len(masked) == 0 {
		masked = slices.Concat(defaultMaskedPaths, h.ThermalThrottle)
	}
	if len(readonly) == 0 {
		readonly = slices.Clone(defaultReadonlyPaths)
	}
	return masked, readonly
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
		set("PATH=" + DefaultPath)
	}
	if _, ok := index["HOME"]; !ok {
		if home == "" {
			home = "/"
		}
		set("HOME=" + home)
	}
	return env
}

// HasDotDot says whether the path p has a ".." segment.
func HasDotDot(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

// SandboxOOMScoreAdj is the oom_score_adj a pod's pause process asks for: the one
// containerd (defaultSandboxOOMAdj) and CRI-O (PodInfraOOMAdj) give a pause container,
// below every container of a pod (the kubelet gives a Guaranteed pod's -997) and above
// the kubelet and the runtime themselves (-999 in their systemd units).
const SandboxOOMScoreAdj = -998

// ClampOOMScoreAdj is the container's oom_score_adj: the requested one within the
// kernel's range [-1000, 1000], and not below the daemon's own when the daemon lacks
// CAP_SYS_RESOURCE (the kernel would refuse runc a lower one, as containerd knows).
func ClampOOMScoreAdj(requested int64, h Host) int {
	adj := min(max(requested, -1000), 1000)
	if !h.SysResource {
		adj = max(adj, int64(h.OOMScoreAdj))
	}
	return int(adj)
}

// ErrInvalidID is returned when an ID is not 1 to 64 characters of [A-Za-z0-9_-]
// (IDs name files, sockets and cgroups).
var ErrInvalidID = errors.New("invalid container ID")

// ValidID checks that id is safe as a file name, a cgroup name and a runc ID: 1 to 64 of
// A-Z, a-z, 0-9, _ and - (^[A-Za-z0-9_-]{1,64}$, checked by hand: every status and stats
// call checks an ID, and the regexp cost more than the rest of ContainerStatus's look).
func ValidID(id string) error {
	if len(id) == 0 || len(id) > 64 {
		return fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: %q", ErrInvalidID, id)
		}
	}
	return nil
}
