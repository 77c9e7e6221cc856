// Package netns owns the network plumbing of a pod sandbox: the pinned
// namespaces a sandbox's containers join, the attachment of the sandbox's
// network namespace to the pod network through CNI, and the pod's files.
//
// # Pinned namespaces
//
// [Pin] creates new network, IPC and UTS namespaces ([Net], [IPC], [UTS]) and
// keeps each alive without any process in it by bind-mounting it onto an
// empty file:
//
//	<dir>/netns/<sandboxID>
//	<dir>/ipcns/<sandboxID>
//	<dir>/utsns/<sandboxID>
//
// The path of a pin is a pure function of (dir, kind, sandboxID), see
// [PinPath], so an undo step only needs to remember those. [Unpin] removes a
// pin and is idempotent: a pin that is not mounted, or not there at all, is
// success ("not found is success"). [IsPinned] reports whether a path is a
// live pin (an nsfs mount).
//
// A pod with its own user namespace is pinned by [PinUser] instead: one child,
// cloned into a new user namespace (<dir>/userns/<sandboxID>, kind [User]) and
// the namespaces it owns, whose /proc/<pid>/ns entries are pinned the same way
// (a multi-threaded process cannot unshare a user namespace itself). Unpin
// removes those pins too; Pin refuses the user kind.
//
// Namespaces belong to OS threads. Pin enters the new namespaces on a locked
// thread that the Go runtime then destroys, and never on the main thread,
// which the runtime cannot destroy: a tainted main thread would keep a
// sandbox's network namespace alive for the life of the daemon and make
// /proc/<pid>/ns/* and /proc/net describe the sandbox instead of the host.
//
// # CNI
//
// [LoadNetwork] reads the first network configuration of a CNI configuration
// directory, the way CRI-O and containerd pick their default network, and
// returns a [Network]. [Network.Attach] runs CNI ADD for a sandbox (libcni
// AddNetworkList), [Network.Detach] runs CNI DEL (DelNetworkList). Detach is
// idempotent and also works after the network namespace is gone, so that IPAM
// still releases the sandbox's addresses; it is the undo of Attach. Attach
// does not undo a failed ADD itself: the caller records the intent before
// calling Attach and runs Detach as the undo whatever Attach returned.
//
// [Networks] hands out the network new sandboxes join; while [Networks.Watch]
// runs it follows the configuration directory (fsnotify), so a replaced or
// removed network is seen without a restart. An attachment is always
// detached from the network it was made on, whatever is configured now: the
// attach step records the network's configuration ([AttachStep]), and
// [DetachStep] uses libcni's cached ADD configuration first, then that record
// ([Networks.Attached]).
//
// CNI plugins are started with a parent-death signal (SIGKILL) from a locked
// OS thread, so a plugin cannot outlive a daemon killed during ADD and finish
// an allocation nobody will ever account for. The IPAM plugin a plugin starts
// has no such signal: [KillPlugins] (run by the undo of an attach step that is
// not done, before DEL) kills, through pidfds, every process whose environment
// names the sandbox as CNI_CONTAINERID. The caller keeps teardowns of one sandbox
// apart.
//
// # Shared PID namespaces
//
// A PID namespace cannot be pinned empty: it dies with its init. For pods that
// share one (pid POD), [StartPause] starts the pause program
// (cmd/crijournal-pause, see [PauseProgram]) as PID 1 of a new PID namespace, in
// the pod's pinned network, IPC and UTS namespaces (those it does not share with
// the node: a container sees the pause process as PID 1, and its network in
// /proc/1/net), in a mount namespace, a cgroup and a cgroup namespace of its
// own, waits until it has confined itself
// (package internal/pause) and pins the namespace at <dir>/pidns/<sandboxID>;
// [StopPause] kills only a process it has identified as that pause (through a
// pidfd, so a recycled PID is never hit) and unpins it. See pause.go and
// pauseproc.go.
//
// # Port forwarding
//
// [DialLoopback] connects to a TCP port on the loopback interface of a pinned network
// namespace (or of the host's, for pods on the host network), from a socket made on
// a disposable thread that entered the namespace; [Forward] copies between that
// connection and a client's stream. Nothing is pinned or journaled for it.
//
// # Host ports
//
// A sandbox's port mappings ([PortMapping]) go to CNI as the portMappings
// capability argument (libcni's CapabilityArgs, handed to plugins that declare
// it, such as portmap). The attach step records them with its arguments
// ([ArgPortMappings]) so that DEL passes the same ones and portmap removes the
// rules it made; records written before have none, and decode as such.
//
// # A pod's files
//
// What a pod's containers bind-mount from the sandbox (podfiles.go): its
// resolv.conf ([ResolvConfStep]: the pod's [DNS] configuration, or a copy of the
// host's), its hostname file ([HostnameStep]) and its /dev/shm, a tmpfs of
// [ShmSize] ([ShmStep]), one directory per sandbox ([PodFilesDir]). They belong
// here with the namespaces: they are the pod's network and UTS identity and its
// IPC memory.
//
// # Journal steps
//
// steps.go names this package's step kinds ([StepPin], [StepPause],
// [StepUserPin], [StepAttach]; podfiles.go: [StepResolvConf], [StepHostname], [StepShm])
// and registers their undos with the journal's registry. A pod with its own user
// namespace gets one [StepUserPin] (see [PinUser]: the user namespace, the namespaces it
// owns and the pause process, made by one child) instead of [StepPin] and [StepPause].
//
// # Conventions
//
// Functions that can block take a [context.Context] first; the caller chooses
// the timeout (this package adds none). Nothing is logged: every failure is
// returned, wrapped with what was being done. Identifiers that end up in
// paths (sandbox IDs, interface names, network names) are validated before any
// path is built from them; invalid ones give [ErrInvalid].
//
// Apart from registering its undos with package journal (steps.go), this package
// imports no other crijournal package.
package netns
