package netns

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/crijournal/crijournal/journal"
)

// Step kinds this package owns. The strings are stored in the journal: never change them.
const (
	// StepPin pins a sandbox's namespaces. Args: one path per kind ("net", "ipc", "uts").
	StepPin journal.StepKind = "netns-pin"
	// StepAttach attaches a sandbox to the CNI network. Args: see AttachArgs.
	StepAttach journal.StepKind = "cni-attach"
	// StepPause starts a sandbox's pause process in a new, pinned pid namespace.
	// Args: see PauseArgs.
	StepPause journal.StepKind = "pause-process"
)

// ArgPath is the key of StepPause's argument: the pin of the pid namespace. The pause
// process's PID is not recorded: it is only known after the intent is committed, and
// the undo finds the process through the pin (see StopPause).
const ArgPath = "path"

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
)

// PinArgs returns the journal arguments of a StepPin for the pins Pin would make.
func PinArgs(dir, sandboxID string, kinds []Kind) map[string]string {
	args := map[string]string{}
	for _, k := range kinds {
		args[string(k)] = PinPath(dir, k, sandboxID)
	}
	return args
}

// PauseArgs returns the journal arguments of a StepPause for the pin StartPause would make.
func PauseArgs(dir, sandboxID string) map[string]string {
	return map[string]string{ArgPath: PinPath(dir, PID, sandboxID)}
}

// AttachArgs returns the journal arguments of a StepAttach on network: everything Detach
// needs, the network's configuration included (compacted to one line).
func AttachArgs(network *Network, sandboxID, netnsPath, ifName, podName, podNS, podUID string) map[string]string {
	config := network.Config()
	var compact bytes.Buffer
	if json.Compact(&compact, config) == nil {
		config = compact.Bytes()
	}
	return map[string]string{
		ArgNetwork: network.Name(), ArgConfig: string(config), ArgSandboxID: sandboxID,
		ArgNetNS: netnsPath, ArgIfName: ifName, ArgPodName: podName, ArgPodNS: podNS, ArgPodUID: podUID,
	}
}

// CNIArgs returns the K8S_* CNI arguments of a pod.
func CNIArgs(podName, podNS, podUID, sandboxID string) map[string]string {
	return map[string]string{
		"K8S_POD_NAME": podName, "K8S_POD_NAMESPACE": podNS, "K8S_POD_UID": podUID,
		"K8S_POD_INFRA_CONTAINER_ID": sandboxID,
	}
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
		return StopPause(ctx, step.Args[ArgPath], 0)
	})
	reg.Register(StepAttach, func(ctx context.Context, rec journal.Record, step journal.Step) error {
		return DetachStep(ctx, networks, step.Args)
	})
}

// DetachStep runs the CNI DEL described by a StepAttach's arguments, on the network the
// sandbox was attached to, whatever the configured network is now: libcni's cached ADD
// configuration first, then the configuration the step recorded (see Networks.Attached).
// Plugins still working for the sandbox (an interrupted ADD's IPAM plugin) are killed first.
func DetachStep(ctx context.Context, networks *Networks, args map[string]string) error {
	if _, err := KillPlugins(ctx, args[ArgSandboxID]); err != nil {
		return err
	}
	n, err := networks.Attached(args[ArgNetwork], []byte(args[ArgConfig]))
	if err != nil {
		return fmt.Errorf("cni detach of %s: %w", args[ArgSandboxID], err)
	}
	cniArgs := CNIArgs(args[ArgPodName], args[ArgPodNS], args[ArgPodUID], args[ArgSandboxID])
	return n.Detach(ctx, args[ArgSandboxID], args[ArgNetNS], args[ArgIfName], cniArgs)
}
