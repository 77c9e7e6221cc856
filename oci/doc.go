// Package oci turns a CRI container into an OCI runtime spec and runs it with an OCI
// runtime (runc by default; crun is accepted, but fails on a host whose cgroups are a
// v1 hybrid hierarchy) under conmon.
//
// # Spec
//
// [Spec] builds a runtime spec from a [SpecInput]: the CRI container and sandbox
// configs, the image's config, the mounted root filesystem and the sandbox's pinned
// namespaces. The building itself is pure and lives in package oci/spec (spec.Build,
// with the aliases SpecInput, ImageConfig, ErrInvalidSpec, ... here); this package
// reads what it needs from the node (host.go: /proc/self, /sys; user.go and
// rootfile.go: the image's user database; apparmor.go: the loaded profiles and
// apparmor_parser) and hands it over as a spec.Host. The file names below are oci/spec's
// unless said otherwise. The rules, as containerd and CRI-O apply them:
//
//   - Args: the CRI command replaces the image's entrypoint and the CRI args replace
//     its cmd; a command given without args drops the image's cmd. No command at all
//     is refused.
//   - Env: the image's, then the CRI envs replacing by name; PATH and HOME are added
//     if neither set them. Cwd: CRI working_dir, else the image's, else "/".
//   - User: run_as_user, else run_as_username, else the image's User ("uid",
//     "uid:gid", "name", "name:group"); run_as_group replaces the group. Names and
//     the user's groups come from the root filesystem's /etc/passwd and /etc/group,
//     looked up as openat2(RESOLVE_IN_ROOT) does, so that links cannot leave it, and
//     read only if they are regular files (a named pipe or device node there is
//     refused, see openRootFile).
//     supplemental_groups are added (and the /etc/group memberships unless the
//     policy is Strict).
//   - Mounts (mounts.go): /proc, /dev (tmpfs), /dev/pts, /dev/mqueue, /dev/shm (tmpfs of 64 MiB,
//     or a bind of SpecInput.ShmPath), /sys and /sys/fs/cgroup (read-only unless
//     privileged), then binds of ResolvConf, Hosts and HostnameFile (read-only when
//     the root filesystem is, or when the source is the node's own file, as the host's
//     /etc/hosts given to a pod on the host's network), then the CRI mounts, which
//     replace a standard mount at the same place and are ordered parents first. A
//     CRI mount is a recursive bind with its propagation (PRIVATE rprivate,
//     HOST_TO_CONTAINER rslave, BIDIRECTIONAL rshared, which also sets the root
//     filesystem's propagation) and ro or rw, plus "rro" for recursive_read_only
//     (only read-only and PRIVATE, and only when SpecInput.RecursiveReadOnly says the
//     runtime knows rro). An image volume binds SpecInput.ImageVolumes' mounted image
//     (or its image_sub_path, resolved inside the image with securejoin, which must
//     exist); see ImageVolumes for its checks. Refused: a container path that is
//     relative or has a ".." segment, a host path that does not exist (a link is
//     followed; CreateHostPaths makes missing ones first) and ID-mapped mounts outside a
//     pod with a user namespace of its own. In such a pod every CRI mount is idmapped
//     (runc's "idmap": the mount's own uid/gid mappings, else the container's user
//     namespace).
//   - Namespaces (spec_namespaces.go): a new mount namespace; the sandbox's net, ipc and uts namespaces
//     by path (absent: the host's); the sandbox's pid namespace (held by its pause
//     process) when the container's pid option is POD and the sandbox has one, the
//     host's for pid NODE, SpecInput.TargetPidNamespace (the target container's) for
//     pid TARGET, else a new one. The pod's user namespace (SpecInput.Namespaces
//     "user") is joined by path, with no mappings of the spec's own; a user namespace
//     mode other than NODE without one is refused. The hostname is set when the
//     container has a UTS namespace other than the host's.
//   - Resources (spec_resources.go): cpu period, quota and shares, cpuset cpus and mems, memory limit
//     (and swap, hugepages and unified settings where the machine supports them)
//     in the cgroup <parent>/crijournal-<id> (cgroupfs). The parent is the
//     sandbox's cgroup_parent, else [DefaultCgroupParent].
//   - oom_score_adj is kept within [-1000, 1000] and, when the daemon lacks
//     CAP_SYS_RESOURCE in its effective set (CapEff), clamped to be at least the
//     daemon's own (/proc/self/oom_score_adj): without it the runtime cannot lower
//     it, and runc fails outright if asked to. With it, the request is kept.
//     [OOMScoreAdj] applies the same rule to a process the daemon starts itself: a
//     pod's pause process, which asks for [SandboxOOMScoreAdj].
//   - Capabilities (spec_caps.go): [DefaultCapabilities] with the CRI add and drop ("ALL" first),
//     or, privileged, every capability in the daemon's own bounding set (CapBnd):
//     asking runc for a capability the daemon lacks fails with "unable to apply
//     caps", so one named explicitly is refused instead.
//   - Privileged also means: no masked or read-only paths, every device allowed and
//     the host's devices created in /dev, /sys rw. Otherwise the standard masked and
//     read-only paths, moby's and containerd's (the masked ones with each CPU's
//     thermal_throttle directory in sysfs, where the host has one), or the CRI's own
//     lists, and a device cgroup that denies all but runc's defaults and the CRI
//     devices.
//   - CDI devices (CDI_devices and cdi.k8s.io/ annotations, see [CDIDevices]) are
//     applied after Spec by [CDI.Inject] from the CDI spec files of the node;
//     an unknown device is refused naming it.
//   - readonly_rootfs, no_new_privs and tty map directly. Pod sysctls are applied.
//   - Seccomp (seccomp.go): RuntimeDefault is Moby's default profile
//     (github.com/moby/profiles) adjusted to the container's capabilities; Localhost
//     is the node's profile file at the absolute path the kubelet gives (missing or
//     malformed: refused, naming the path); Unconfined and unset get no filter, as
//     CRI-O does by default; privileged containers get none whatever they ask for.
//     The deprecated seccomp_profile_path ("runtime/default", "docker/default",
//     "unconfined", "localhost/<path>") is read when the field is unset. A node
//     without seccomp (kernel, or SpecInput.NoSeccomp) refuses RuntimeDefault and
//     Localhost.
//   - AppArmor (apparmor.go; the loading in oci's apparmor.go): a Localhost profile is applied where AppArmor is
//     enabled and the profile loaded, and refused otherwise (also on a host without
//     AppArmor). Where AppArmor is enabled, RuntimeDefault and
//     unset (non-privileged) apply [DefaultAppArmorProfile], which Spec generates
//     from Docker's and containerd's default rules (apparmor_profile.go) and loads
//     with apparmor_parser when it is not loaded; a container that needs it when it
//     cannot be loaded is refused with [ErrNoDefaultAppArmor] (FailedPrecondition),
//     not run unconfined. Without AppArmor they get no profile. There is no SELinux
//     label.
//
// Every refusal of a configuration wraps [ErrInvalidSpec] (InvalidArgument). The
// spec claims [SpecVersion], the version runc 1.1 implements.
//
// # Runtime
//
// [Handlers] are the node's runtime handlers and the default one: the one place that
// fills in the default for a pod that names none and checks that a handler is configured
// ([ErrUnknownHandler]). The signal names a stop signal may have are read by [ParseSignal]
// and written by [SignalName], from one table.
//
// A [Runtime] runs containers with one runtime handler, in two calls.
// [Runtime.Prepare] starts the container's conmon, which parses its flags, opens the
// log and waits on its start pipe; its exec and the loading of its libraries (about
// 10 ms) overlap what the caller does next (the root filesystem). [Pending.Create]
// then writes config.json into the bundle, the container's state directory, and lets
// conmon run `runc create`; conmon relays the container's output to its log file in
// the CRI format, and writes its exit code to an exit file when it exits. conmon gets
// its own session and is not killed when the daemon dies: containers outlive daemon
// restarts. Create moves conmon out of the daemon's cgroup into one of its pod's, beside
// the container's own: crijournal-conmon-<id> (cgroupfs) or crijournal-conmon-<id>.scope
// in the pod's slice (systemd), as CRI-O's conmon_cgroup = "pod" does; it counts to the
// pod, and a service manager that kills the daemon's cgroup on restart leaves it alone.
// The move is made while conmon starts the runtime, so that runc's own move of the
// container's init waits for the kernel's grace period with it instead of after it
// (see Pending.Create). Release and Delete remove that cgroup once conmon is gone.
//
// conmon is started with --sync: it does not double-fork, so it remains the daemon's
// child, and the daemon reaps it when it exits (from a goroutine waiting on a pidfd
// in the netpoller, not a thread per container). After a daemon restart the old
// conmons are no longer its children; their reaping is up to their new parent.
//
// The command line:
//
//	conmon --sync -c <id> -u <id> -n <id> -r <runtime> -b <StateDir>/containers/<id>
//	  -p <StateDir>/containers/<id>/pid -P <StateDir>/containers/<id>/conmon.pid
//	  --persist-dir <StateDir>/containers/<id> --exit-dir <StateDir>/exits
//	  --socket-dir-path <StateDir>/attach
//	  --runtime-arg --root=<Root> --runtime-arg --log-format=json
//	  [--runtime-arg --systemd-cgroup]
//	  -l k8s-file:<log path> [--log-size-max <Config.LogSizeMax>] (or -l none)
//	  [-t | -i [--leave-stdin-open]]
//
// --systemd-cgroup with the systemd cgroup driver (Config.SystemdCgroup). --log-size-max
// when Config.LogSizeMax is positive: conmon truncates the log (starts it
// again, empty) when a write would take it beyond that, and a reopen (ReopenLog, the
// kubelet's rotation) starts its count again. -t when the container has a terminal;
// otherwise -i when the CRI config asks for stdin, with --leave-stdin-open unless it
// also asks for stdin_once ([StdinMode]), as CRI-O does. The sync pipe is fd 3
// (_OCI_SYNCPIPE=3), on which conmon reports {"pid": N} or the runtime's error; the start
// pipe is fd 4 (_OCI_STARTPIPE=4). conmon does not write -P in --sync mode; Prepare
// writes it.
//
// StateDir must be short (at most layout.MaxStateDirLen, 28 bytes): conmon's attach
// socket path, <StateDir>/attach/<id>/attach, must fit a socket address. The daemon's is
// layout.StateDirFor's, <run_root>/oci-<handler> (/run/crijournal/oci-runc), or
// /run/cjo-<hash> for a run root too long for that. It holds:
//
//	exits/<id>                    exit code, written by conmon; mtime = exit time
//	attach/<id>                   conmon's link to the bundle (attach socket)
//	containers/<id>/              the bundle: config.json, and conmon's ctl and winsz
//	                              fifos and attach socket
//	containers/<id>/meta.json     bundle, log path and cgroup, written by Create
//	containers/<id>/conmon.pid    conmon's PID, written by Prepare
//	containers/<id>/pid           the container's init PID (runc --pid-file)
//	containers/<id>/exit, oom     conmon's copy of the exit code; OOM marker
//	containers/<id>/conmon.stderr conmon's messages before it detached
//	exec-*/                       runc's log and pid file of one ExecSync, removed after it
//	exec-*.log                    runc's log of one streamed exec, removed after it
//
// [Runtime.Delete] is idempotent and removes all of it: the runtime's container
// (runc delete --force), conmon (after a moment to record the exit), the files
// Create and conmon put in the bundle (config.json, ctl, winsz, attach; a bundle
// elsewhere, recorded by an older daemon, keeps the rest), a cgroup the runtime left,
// the exit file and the state directory. It is the undo of [StepRuntimeContainer]; the
// undo of [StepConmon] finds nothing once it has run, see [RegisterUndos].
//
// [Runtime.WatchExits] reports exits as conmon writes the exit files (inotify, no
// polling). [Runtime.Stop] waits on a pidfd of the container's init, then on conmon
// recording the exit. [Runtime.Exit] decides how a container ended, as CRI-O's
// internal/oci does: from conmon's exit file and OOM marker, from a pidfd of conmon
// while it runs (no process forked), and from the runtime's state when those cannot
// tell; a container the runtime definitely lost ended with [ReasonUnknown]. The
// caller only records what it decides.
//
// [Runtime.ExecSync] runs `runc exec` directly (not through conmon). runc's own
// errors go to a log file, so they are not mistaken for the command's output. The
// command is runc's child in a session of its own; on timeout runc and every
// descendant are killed with SIGKILL and reaped. A process orphaned on the way is
// handed to the daemon if it is a subreaper ([BecomeSubreaper]) and reaped here.
// Reaping matters beyond tidiness: an exec'd process that stays an unreaped zombie
// of the daemon is still in the container's pid namespace, and the namespace's init
// cannot finish exiting until it is reaped, so `runc delete` fails with "container
// init still running". Orphans of containers' pid namespaces this package does not
// wait for (a stage of a runc exec that failed half way, a command nothing claimed), and
// processes of containers in the node's pid namespace that outlive their conmon (a
// background process killed with its container), are reaped by [ReapOrphans], which the
// daemon runs for its whole life. A container's init whose conmon was killed by someone
// else is handed to the daemon too; [Runtime.Delete] reaps it.
//
// [Runtime.Version] runs `<runtime> --version` and judges the release a runc gives
// against runc's container breakouts of November 2025 (CVE-2025-31133, CVE-2025-52565,
// CVE-2025-52881; see [Verdict]); a runtime that is not runc is not judged. The daemon
// asks at start, and a verbose Status asks again.
//
// # Streams
//
// [Runtime.Exec] runs a command for a client's streams (stdin, stdout, stderr, a
// terminal and its resizes) with `runc exec`, directly, not through conmon. With a
// terminal, runc runs under a pseudo-terminal of this process (made with
// TIOCGPTPEER, read through the netpoller) and relays it to the command's terminal in
// the container, as under CRI-O; a resize is set on that pseudo-terminal and runc
// passes it on (SIGWINCH). That runc lives for the session, a child of the daemon: it is
// given the container's oom_score_adj (never below the daemon's), not left with the
// daemon's own (-999 under contrib/systemd), which the command in the container gets
// from runc anyway. When the caller's context ends, runc and the command are
// killed and reaped as for ExecSync.
//
// [Runtime.Attach] connects a client's streams to the container's main process
// through conmon's attach socket (SOCK_SEQPACKET; each packet conmon sends starts
// with the stream it came from, 2 stdout or 3 stderr; input packets are at most
// 32 KiB, conmon's buffer). The end of the client's input shuts the socket's write
// side down, which makes conmon close the container's stdin unless it was started
// with --leave-stdin-open. Resizes are written to the ctl fifo in the bundle as
// "1 <rows> <columns>".
//
// # Conventions
//
// Container IDs are 1 to 64 characters of [A-Za-z0-9_-] ([ErrInvalidID]): they name
// files, cgroups and runtime containers. Calls that run the runtime take a context
// and kill the runtime when it ends. Nothing is logged: errors are returned, with
// the runtime's message. Typed errors: [ErrNotFound], [ErrAlreadyExists],
// [ErrNotRunning], [ErrExecTimeout], [ErrInvalidSpec], [ErrNoDefaultAppArmor],
// [ErrInvalidID].
package oci
