package netns

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// AttachArgs returns the journal arguments of a StepAttach: everything Detach needs.
func AttachArgs(network, sandboxID, netnsPath, ifName, podName, podNS, podUID string) map[string]string {
	return map[string]string{
		ArgNetwork: network, ArgSandboxID: sandboxID, ArgNetNS: netnsPath, ArgIfName: ifName,
		ArgPodName: podName, ArgPodNS: podNS, ArgPodUID: podUID,
	}
}

// CNIArgs returns the K8S_* CNI arguments of a pod.
func CNIArgs(podName, podNS, podUID, sandboxID string) map[string]string {
	return map[string]string{
		"K8S_POD_NAME": podName, "K8S_POD_NAMESPACE": podNS, "K8S_POD_UID": podUID,
		"K8S_POD_INFRA_CONTAINER_ID": sandboxID,
	}
}

// NetworkSource hands out the current CNI network; it is how undos find the network long
// after the step that used it (after a restart, say).
type NetworkSource interface {
	Network() (*Network, error)
}

// RegisterUndos registers the undo of every step kind this package owns.
func RegisterUndos(reg *journal.Registry, networks NetworkSource) {
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

// DetachStep runs the CNI DEL described by a StepAttach's arguments.
func DetachStep(ctx context.Context, networks NetworkSource, args map[string]string) error {
	if _, err := KillPlugins(ctx, args[ArgSandboxID]); err != nil {
		return err
	}
	n, err := networks.Network()
	if err != nil {
		return fmt.Errorf("cni detach of %s: %w", args[ArgSandboxID], err)
	}
	if args[ArgNetwork] != "" && n.Name() != args[ArgNetwork] {
		return fmt.Errorf("cni detach of %s: attached to network %q, but the configured network is now %q",
			args[ArgSandboxID], args[ArgNetwork], n.Name())
	}
	cniArgs := CNIArgs(args[ArgPodName], args[ArgPodNS], args[ArgPodUID], args[ArgSandboxID])
	return n.Detach(ctx, args[ArgSandboxID], args[ArgNetNS], args[ArgIfName], cniArgs)
}

// Networks loads the CNI network from a configuration directory on first use and keeps it;
// until a configuration exists it answers with ErrNoNetwork and tries again next time.
type Networks struct {
	ConfDir    string
	PluginDirs []string
	CacheDir   string

	mu      sync.Mutex
	network *Network
}

// Network returns the loaded network, loading it if needed.
func (s *Networks) Network() (*Network, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.network != nil {
		return s.network, nil
	}
	n, err := LoadNetwork(s.ConfDir, s.PluginDirs, s.CacheDir)
	if err != nil {
		return nil, err
	}
	s.network = n
	return n, nil
}
