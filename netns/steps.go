package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/crijournal/crijournal/journal"
)

// Step kinds this package owns. The strings are stored in the journal: never change them.
const (
	// StepPin pins a sandbox's namespaces. Args: one path per kind ("net", "ipc", "uts").
	// Made by PinStep.
	StepPin journal.StepKind = "netns-pin"
	// StepAttach attaches a sandbox to the CNI network. Args: an Attachment (see
	// AttachStep).
	StepAttach journal.StepKind = "cni-attach"
	// StepPause starts a sandbox's pause process in a new, pinned pid namespace.
	// Args: ArgPath, and ArgCgroup when it has a cgroup of its own (records written
	// before the pause process had one lack it). Made by PauseStep.
	StepPause journal.StepKind = "pause-process"
	// StepUserPin pins a sandbox's own user namespace with the namespaces it owns
	// (net, ipc, uts) and, for a shared pid namespace, keeps the pause process that
	// made them (see PinUser). Args: one path per kind ("user", "net", "ipc", "uts",
	// and always "pid": the pause process is looked for even when the pod has no
	// shared pid namespace, since PinUser's child may outlive a crash), and ArgCgroup
	// when a kept pause process has a cgroup of its own. Made by UserPinStep; it
	// replaces StepPin and StepPause for such a sandbox.
	StepUserPin journal.StepKind = "userns-pin"
)

// Stages of this package's steps, as inspect, logs and waiting requests show them (and the
// stalled-requests metric counts them by).
const (
	StagePin     = "sandbox namespaces pinning"
	StageUserPin = "sandbox user namespace pinning"
	StagePause   = "sandbox pid namespace (pause process)"
	StageAttach  = "sandbox network creation"
)

// ArgPath is the key of StepPause's argument: the pin of the pid namespace. The pause
// process's PID is not recorded: it is only known after the intent is committed, and
// the undo finds the process through the pin (see StopPause).
const ArgPath = "path"

// ArgCgroup is the key of StepPause's and StepUserPin's argument that names the cgroup
// the pause process is put in (see PauseProgram.Cgroup), removed by the undo once the
// process is gone.
const ArgCgroup = "cgroup"

// Keys of StepAttach's arguments.
const (
	ArgSandboxID = "sandbox_id"
	ArgNetNS     = "netns"
	ArgIfName    = "ifname"
	ArgNetwork   = "network"
	ArgPodName   = "pod_name"
	ArgPodNS     = "pod_namespace"
	ArgPodUID    = "pod_uid"
	// ArgConfig is the network's configuration (a CNI plugin list, JSON) as ADD used it,
	// so that DEL can reach the same network after the configuration changed. Records
	// written before it existed lack it; DEL then finds the configuration elsewhere (see
	// Networks.Attached).
	ArgConfig = "config"
	// ArgPortMappings are the sandbox's port mappings as ADD passed them to CNI (the
	// portMappings capability; JSON), so that DEL passes the same ones. Absent when
	// there are none, and in records written before they were recorded.
	ArgPortMappings = "port_mappings"
)

// PinStep returns the step that pins the namespaces of the given kinds for a sandbox
// (see Pin), hostname set in a new UTS namespace. Its result is the pinned paths.
func PinStep(dir, sandboxID string, kinds []Kind, hostname string) journal.Action[Paths] {
	args := map[string]string{}
	for _, k := range kinds {
		args[string(k)] = PinPath(dir, k, sandboxID)
	}
	return journal.Action[Paths]{Kind: StepPin, Stage: StagePin, Args: args,
		Run: func(ctx context.Context) (Paths, error) {
			return Pin(ctx, dir, sandboxID, kinds, hostname)
		}}
}

// UserPins is the result of a UserPinStep.
type UserPins struct {
	Paths Paths // the pins, by kind ("pid" only with a shared pid namespace)
	PID   int   // the pause process (0 without a shared pid namespace)
}

// UserPinStep returns the step that creates and pins a sandbox's user namespace with
// the given maps and, owned by it, namespaces of the given kinds (net, ipc, uts, and
// pid for a shared pid namespace held by a pause process running prog; see PinUser).
func UserPinStep(dir, sandboxID string, kinds []Kind, hostname string, uids, gids []IDMap, prog PauseProgram) journal.Action[UserPins] {
	args := map[string]string{string(User): PinPath(dir, User, sandboxID), string(PID): PinPath(dir, PID, sandboxID)}
	for _, k := range kinds {
		args[string(k)] = PinPath(dir, k, sandboxID)
	}
	if prog.Cgroup != "" && slices.Contains(kinds, PID) {
		args[ArgCgroup] = prog.Cgroup
	}
	return journal.Action[UserPins]{Kind: StepUserPin, Stage: StageUserPin, Args: args,
		Run: func(ctx context.Context) (UserPins, error) {
			paths, pid, err := PinUser(ctx, dir, sandboxID, kinds, hostname, uids, gids, prog)
			return UserPins{Paths: paths, PID: pid}, err
		}}
}

// PauseProcess is the result of a PauseStep.
type PauseProcess struct {
	Path string // the pin of the pid namespace
	PID  int    // the pause process, in the caller's pid namespace
}

// PauseStep returns the step that starts a sandbox's pause process, running prog, in a
// new pid namespace pinned in dir and in the sandbox's namespaces of the kinds join,
// pinned before by a PinStep (see StartPause). The undo needs no more than before: the
// pause process holds the joined namespaces, it does not own them.
func PauseStep(dir, sandboxID string, join []Kind, prog PauseProgram) journal.Action[PauseProcess] {
	args := map[string]string{ArgPath: PinPath(dir, PID, sandboxID)}
	if prog.Cgroup != "" {
		args[ArgCgroup] = prog.Cgroup
	}
	return journal.Action[PauseProcess]{Kind: StepPause, Stage: StagePause, Args: args,
		Run: func(ctx context.Context) (PauseProcess, error) {
			path, pid, err := StartPause(ctx, dir, sandboxID, join, prog)
			return PauseProcess{Path: path, PID: pid}, err
		}}
}

// Attachment is one sandbox's attachment to a CNI network: everything CNI ADD needs and
// everything its undo, CNI DEL, needs. It is recorded as StepAttach's arguments.
type Attachment struct {
	Network   string // the network's name
	SandboxID string
	NetNS     string // the path of the pinned network namespace
	IfName    string
	Pod       Pod
	// Config is the network's configuration as ADD used it (a CNI plugin list, JSON,
	// compacted to one line), so that DEL reaches the same network after the
	// configuration changed; empty in records written before it was recorded.
	Config string
	// PortMappings are passed to CNI as the portMappings capability (the portmap
	// plugin's host ports), at ADD and at DEL.
	PortMappings []PortMapping
}

// PortMapping is one host port of a sandbox, as CNI's portMappings capability has it.
type PortMapping struct {
	HostPort      int32  `json:"hostPort"`
	ContainerPort int32  `json:"containerPort"`
	Protocol      string `json:"protocol"`         // "tcp", "udp" or "sctp"
	HostIP        string `json:"hostIP,omitempty"` // "" for every address of the host
}

// ValidatePortMappings returns an error wrapping ErrInvalid unless every mapping has a
// host and a container port in 1-65535, a protocol tcp, udp or sctp, and a host IP that is
// empty or an IP address.
func ValidatePortMappings(mappings []PortMapping) error {
	for _, m := range mappings {
		switch {
		case m.HostPort < 1 || m.HostPort > 65535:
			return fmt.Errorf("port mapping %+v: %w: host port out of range 1-65535", m, ErrInvalid)
		case m.ContainerPort < 1 || m.ContainerPort > 65535:
			return fmt.Errorf("port mapping %+v: %w: container port out of range 1-65535", m, ErrInvalid)
		case m.Protocol != "tcp" && m.Protocol != "udp" && m.Protocol != "sctp":
			return fmt.Errorf("port mapping %+v: %w: protocol is not tcp, udp or sctp", m, ErrInvalid)
		}
		if m.HostIP != "" {
			if _, err := netip.ParseAddr(m.HostIP); err != nil {
				return fmt.Errorf("port mapping %+v: %w: host IP is not an IP address", m, ErrInvalid)
			}
		}
	}
	return nil
}

// capabilityArgs returns the CNI capability arguments of the attachment (nil for none).
func (a Attachment) capabilityArgs() map[string]any {
	if len(a.PortMappings) == 0 {
		return nil
	}
	return map[string]any{"portMappings": a.PortMappings}
}

// Pod names the pod a sandbox belongs to, for the K8S_* CNI arguments.
type Pod struct {
	Name, Namespace, UID string
}

func (a Attachment) args() map[string]string {
	args := map[string]string{
		ArgNetwork: a.Network, ArgConfig: a.Config, ArgSandboxID: a.SandboxID, ArgNetNS: a.NetNS, ArgIfName: a.IfName,
		ArgPodName: a.Pod.Name, ArgPodNS: a.Pod.Namespace, ArgPodUID: a.Pod.UID,
	}
	if len(a.PortMappings) > 0 {
		b, err := json.Marshal(a.PortMappings)
		if err != nil {
			panic(fmt.Sprintf("encode port mappings: %v", err)) // plain ints and strings
		}
		args[ArgPortMappings] = string(b)
	}
	return args
}

// attachmentOf reads an attachment back from its step's arguments.
func attachmentOf(args map[string]string) (Attachment, error) {
	a := Attachment{
		Network: args[ArgNetwork], SandboxID: args[ArgSandboxID], NetNS: args[ArgNetNS], IfName: args[ArgIfName],
		Pod: Pod{Name: args[ArgPodName], Namespace: args[ArgPodNS], UID: args[ArgPodUID]}, Config: args[ArgConfig],
	}
	if pm := args[ArgPortMappings]; pm != "" {
		if err := json.Unmarshal([]byte(pm), &a.PortMappings); err != nil {
			return a, fmt.Errorf("attachment of %s: recorded port mappings %q: %w", a.SandboxID, pm, err)
		}
	}
	return a, nil
}

// cniArgs returns the K8S_* CNI arguments of the attachment.
func (a Attachment) cniArgs() map[string]string {
	return map[string]string{
		"K8S_POD_NAME": a.Pod.Name, "K8S_POD_NAMESPACE": a.Pod.Namespace, "K8S_POD_UID": a.Pod.UID,
		"K8S_POD_INFRA_CONTAINER_ID": a.SandboxID,
	}
}

// AttachStep returns the step that attaches a sandbox to network n (CNI ADD, see
// Network.Attach) through interface ifName of the namespace at netnsPath, with the
// given host ports (the portMappings capability; none for nil). Its result is the
// attachment's Result.
func AttachStep(n *Network, sandboxID, netnsPath, ifName string, pod Pod, ports []PortMapping) journal.Action[*Result] {
	a := Attachment{Network: n.Name(), SandboxID: sandboxID, NetNS: netnsPath, IfName: ifName, Pod: pod,
		Config: compactConfig(n.Config()), PortMappings: ports}
	return journal.Action[*Result]{Kind: StepAttach, Stage: StageAttach, Args: a.args(),
		Run: func(ctx context.Context) (*Result, error) {
			if err := ValidatePortMappings(a.PortMappings); err != nil {
				return nil, err
			}
			return n.Attach(ctx, a.SandboxID, a.NetNS, a.IfName, a.cniArgs(), a.capabilityArgs())
		}}
}

// compactConfig returns a network configuration compacted to one line (as it is when it
// is not valid JSON).
func compactConfig(config []byte) string {
	var compact bytes.Buffer
	if json.Compact(&compact, config) == nil {
		return compact.String()
	}
	return string(config)
}

// RegisterUndos registers the undo of every step kind this package owns.
func RegisterUndos(reg *journal.Registry, networks *Networks) {
	reg.Register(StepPin, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		var errs []error
		for _, path := range step.Args {
			if err := Unpin(ctx, path); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
	reg.Register(StepPause, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		if err := StopPause(ctx, step.Args[ArgPath], 0); err != nil {
			return err
		}
		return removePauseCgroup(step.Args)
	})
	reg.Register(StepUserPin, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		return undoUserPin(ctx, step.Args)
	})
	reg.Register(StepAttach, undoAttach(networks))
	registerPodFileUndos(reg)
}

// undoAttach is the undo of StepAttach: DetachStep, which looks for plugins still at work
// for the sandbox unless the step is done. A done step's ADD returned, and its plugins
// with it (libcni waits for each plugin, and each for the IPAM plugin it delegates to),
// so only an ADD that was cut off, by a timeout or by the daemon's death, can have left
// one running; the look is a read of every process's environment on the node (see
// KillPlugins), whose cost grows with the node's processes, not with the sandbox. A
// step whose last undo failed is looked at too: its status no longer says whether its
// ADD returned. A DEL that was cut off (by undo_timeout, or the daemon's death, which
// leaves the step done) may have left its own IPAM plugin running: that one only
// releases what the next DEL releases too, so it is no reason to look.
func undoAttach(networks *Networks) journal.UndoFunc {
	return func(ctx context.Context, rec journal.Record, step journal.Step) error {
		return DetachStep(ctx, networks, step.Args, step.Status != journal.StepDone)
	}
}

// removePauseCgroup removes the cgroup a step's arguments name (ArgCgroup), if any.
func removePauseCgroup(args map[string]string) error {
	if cg := args[ArgCgroup]; cg != "" {
		return RemoveCgroup(cg)
	}
	return nil
}

// undoUserPin undoes a StepUserPin: the pause process first (while it lives, its
// namespaces do too), its cgroup, then every pin.
func undoUserPin(ctx context.Context, args map[string]string) error {
	if p := args[string(PID)]; p != "" {
		if err := StopPause(ctx, p, 0); err != nil {
			return err
		}
	}
	if err := removePauseCgroup(args); err != nil {
		return err
	}
	var errs []error
	for k, path := range args {
		if k == string(PID) || k == ArgCgroup {
			continue
		}
		if err := Unpin(ctx, path); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DetachStep runs the CNI DEL described by a StepAttach's arguments, on the network the
// sandbox was attached to, whatever the configured network is now: libcni's cached ADD
// configuration first, then the configuration the step recorded (see Networks.Attached).
// With killPlugins, plugins still working for the sandbox (an interrupted ADD's IPAM
// plugin) are killed first (see KillPlugins).
func DetachStep(ctx context.Context, networks *Networks, args map[string]string, killPlugins bool) error {
	a, err := attachmentOf(args)
	if err != nil {
		return err
	}
	if killPlugins {
		if _, err := KillPlugins(ctx, a.SandboxID); err != nil {
			return err
		}
	}
	n, err := networks.Attached(a.Network, []byte(a.Config))
	if err != nil {
		return fmt.Errorf("cni detach of %s: %w", a.SandboxID, err)
	}
	return n.Detach(ctx, a.SandboxID, a.NetNS, a.IfName, a.cniArgs(), a.capabilityArgs())
}
