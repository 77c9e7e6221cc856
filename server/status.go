package server

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	toml "github.com/pelletier/go-toml/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/oci"
)

// Version reports the runtime's name and version.
func (s *Server) Version(ctx context.Context, req *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{
		Version:           "0.1.0",
		RuntimeName:       RuntimeName,
		RuntimeVersion:    s.version,
		RuntimeApiVersion: "v1",
	}, nil
}

// Status reports RuntimeReady (false with a reason once the journal has failed: the
// daemon is stopping), NetworkReady (false with a reason while no CNI network is
// configured), JournalHasSpace (false with a reason while the journal's disk is too full
// for its space reserve: new pods and containers are refused), the runtime handlers and
// features, and with verbose the effective configuration.
func (s *Server) Status(ctx context.Context, req *runtimeapi.StatusRequest) (*runtimeapi.StatusResponse, error) {
	runtime := &runtimeapi.RuntimeCondition{Type: runtimeapi.RuntimeReady, Status: true}
	if err := s.journal.Err(); err != nil {
		runtime.Status = false
		runtime.Reason = ReasonJournalFailed
		runtime.Message = fmt.Sprintf("%v; the runtime is stopping, its next start recovers from the journal file", err)
	}
	network := &runtimeapi.RuntimeCondition{Type: runtimeapi.NetworkReady, Status: true}
	if _, err := s.networks.Network(); err != nil {
		network.Status = false
		network.Reason = "NetworkPluginNotReady"
		network.Message = fmt.Sprintf("Network plugin returns error: %v", err)
	}
	// Not RuntimeReady: the kubelet stops syncing pods while the runtime is not
	// ready, and the pods it must stop and remove to free the disk are what the
	// journal's reserve is for. An optional condition is shown (crictl info), not
	// acted on.
	space := &runtimeapi.RuntimeCondition{Type: ConditionJournalHasSpace, Status: true}
	if err := s.journal.LowSpace(); err != nil {
		space.Status = false
		space.Reason = ReasonJournalLowSpace
		space.Message = err.Error()
	}
	resp := &runtimeapi.StatusResponse{Status: &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		runtime,
		network,
		space,
	}}}
	s.describeRuntime(ctx, req.GetVerbose(), resp)
	return resp, nil
}

// ReasonJournalFailed is the reason of RuntimeReady false once a journal commit failed.
const ReasonJournalFailed = "JournalFailed"

// ConditionJournalHasSpace is the type of Status's optional condition that is false
// while the journal is low on disk space (journal.ErrLowSpace), with the reason
// ReasonJournalLowSpace.
const (
	ConditionJournalHasSpace = "JournalHasSpace"
	ReasonJournalLowSpace    = "JournalLowSpace"
)

// featuresTimeout bounds `runc features`, run once per handler.
const featuresTimeout = 10 * time.Second

// nodeConfig is what UpdateRuntimeConfig tells the runtime about its node.
type nodeConfig struct {
	mu      sync.Mutex
	podCIDR string
}

// RuntimeConfig reports the cgroup driver, which the kubelet reads at start to pick its
// own.
func (s *Server) RuntimeConfig(ctx context.Context, req *runtimeapi.RuntimeConfigRequest) (*runtimeapi.RuntimeConfigResponse, error) {
	driver := runtimeapi.CgroupDriver_CGROUPFS
	if s.cfg.SystemdCgroup() {
		driver = runtimeapi.CgroupDriver_SYSTEMD
	}
	return &runtimeapi.RuntimeConfigResponse{Linux: &runtimeapi.LinuxRuntimeConfiguration{CgroupDriver: driver}}, nil
}

// UpdateRuntimeConfig takes the node's pod CIDR, which the kubelet sends on every node
// status sync. The CNI configuration decides the pods' addresses; the CIDR is kept for
// Status verbose and logged when it changes.
func (s *Server) UpdateRuntimeConfig(ctx context.Context, req *runtimeapi.UpdateRuntimeConfigRequest) (*runtimeapi.UpdateRuntimeConfigResponse, error) {
	cidr := req.GetRuntimeConfig().GetNetworkConfig().GetPodCidr()
	s.node.mu.Lock()
	changed := cidr != s.node.podCIDR
	s.node.podCIDR = cidr
	s.node.mu.Unlock()
	if changed {
		s.log.Info("node pod CIDR updated", "pod_cidr", cidr)
	}
	return &runtimeapi.UpdateRuntimeConfigResponse{}, nil
}

// describeRuntime adds to a Status answer the runtime handlers with their features, the
// runtime's own features and, when verbose, the effective configuration.
func (s *Server) describeRuntime(ctx context.Context, verbose bool, resp *runtimeapi.StatusResponse) {
	// mount_options: bind mounts honour Mount.mount_options (noexec, nodev, nosuid; see
	// oci.criMount), whatever the handler: runc applies them as it applies ro.
	// user_namespaces_host_network: pods with their own user namespace on the node's
	// network, where the kernel lets their containers bind the node's /sys (probed once,
	// at the daemon's start: oci.ProbeUsernsHostNetwork).
	resp.Features = &runtimeapi.RuntimeFeatures{SupplementalGroupsPolicy: true, MountOptions: true,
		UserNamespacesHostNetwork: oci.ProbeUsernsHostNetwork() == nil}
	supported := map[string]oci.Features{}
	handlers := s.handlers()
	names := handlers.Names()
	for _, name := range names {
		f := s.handlerFeatures(ctx, name)
		supported[name] = f
		h := &runtimeapi.RuntimeHandler{Name: name, Features: &runtimeapi.RuntimeHandlerFeatures{
			RecursiveReadOnlyMounts: f.RecursiveReadOnlyMounts,
			UserNamespaces:          f.UserNamespaces,
		}}
		resp.RuntimeHandlers = append(resp.RuntimeHandlers, h)
		if name == handlers.Default() {
			// The default handler is also the one pods that name none get (""), as
			// containerd lists it.
			resp.RuntimeHandlers = append(resp.RuntimeHandlers, &runtimeapi.RuntimeHandler{Features: h.Features})
		}
	}
	if !verbose {
		return
	}
	resp.Info = map[string]string{"config": s.effectiveConfig()}
	s.node.mu.Lock()
	resp.Info["podCIDR"] = infoJSON(s.node.podCIDR)
	s.node.mu.Unlock()
	resp.Info["runtimeFeatures"] = infoJSON(supported)
	resp.Info[StatusInfoRuntimeVersions] = infoJSON(s.handlerVersions(ctx, names))
	resp.Info["confinement"] = infoJSON(oci.NodeConfinement(s.cfg.SeccompUnavailable))
	resp.Info[StatusInfoPendingRemovals] = strconv.Itoa(s.journal.PendingRemovals())
}

// StatusInfoPendingRemovals is the key of a verbose Status's info that counts the
// removals that answered with work left (a root filesystem's deletion; see
// journal.Remove): tests and benchmarks wait for none before they look at the node.
const StatusInfoPendingRemovals = "pendingRemovals"

// StatusInfoRuntimeVersions is the key of a verbose Status's info (crictl info) that
// holds each handler's runtime version and what it says about runc's known container
// breakouts (oci.RuntimeVersion), by handler name.
const StatusInfoRuntimeVersions = "runtimeVersions"

// handlerVersion is a handler's entry under StatusInfoRuntimeVersions.
type handlerVersion struct {
	oci.RuntimeVersion
	// Error says why the runtime could not be asked (Verdict is then unknown).
	Error string `json:"error,omitempty"`
}

// handlerVersions asks the runtime of each handler its version. It forks every runtime
// once per call: only a verbose Status, which the kubelet does not poll, calls it.
func (s *Server) handlerVersions(ctx context.Context, names []string) map[string]handlerVersion {
	out := map[string]handlerVersion{}
	if s.runtimes == nil {
		return out
	}
	for _, name := range names {
		rt, err := s.runtimes.Runtime(name)
		if err != nil {
			out[name] = handlerVersion{RuntimeVersion: oci.RuntimeVersion{Verdict: oci.VerdictUnknown}, Error: err.Error()}
			continue
		}
		v, err := rt.Version(ctx)
		hv := handlerVersion{RuntimeVersion: v}
		if err != nil {
			hv.Error = err.Error()
		}
		out[name] = hv
	}
	return out
}

// handlerFeatures asks a handler's runtime what it supports; a handler that cannot say
// supports nothing.
func (s *Server) handlerFeatures(ctx context.Context, name string) oci.Features {
	if s.runtimes == nil {
		return oci.Features{}
	}
	rt, err := s.runtimes.Runtime(name)
	if err != nil {
		return oci.Features{}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), featuresTimeout)
	defer cancel()
	f, err := rt.Features(fctx)
	if err != nil {
		s.log.Debug("runtime features not readable (reported as none)", "handler", name, "err", err)
	}
	return f
}

// effectiveConfig is the daemon's configuration after defaults, file, environment and
// flags, as JSON keyed by the TOML keys.
func (s *Server) effectiveConfig() string {
	data, err := s.cfg.TOML()
	if err != nil {
		return infoJSON(err.Error())
	}
	var m map[string]any
	if err := toml.Unmarshal(data, &m); err != nil {
		return infoJSON(err.Error())
	}
	return infoJSON(m)
}

// handlers are the configured runtime handlers and the default one.
func (s *Server) handlers() oci.Handlers {
	return oci.NewHandlers(s.cfg.DefaultRuntime, maps.Keys(s.cfg.Runtimes))
}
