package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
)

// Stages of a sandbox creation, as inspect and waiting requests show them.
const (
	stageSandboxReserve    = "sandbox name reservation"
	stageSandboxNamespaces = "sandbox namespaces pinning"
	stageSandboxNetwork    = "sandbox network creation"
)

// pinTimeout bounds pinning namespaces, which only makes syscalls.
const pinTimeout = 30 * time.Second

// RunPodSandbox creates a pod sandbox: pinned namespaces and, unless the pod uses the
// host's network, a CNI attachment. Each step is journaled before it acts.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	name, err := sandboxName(cfg)
	if err != nil {
		return nil, err
	}
	hostNetwork := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE
	var network *netns.Network
	if !hostNetwork {
		if network, err = s.networks.Network(); err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "cannot create pod network: %v", err)
		}
	}
	deadline, _ := ctx.Deadline()
	res, err := s.reserve(ctx, journal.BeginRequest{
		Kind: journal.KindSandbox, Name: name, Deadline: deadline, Stage: stageSandboxReserve,
		Fingerprint: fingerprint(cfg, req.GetRuntimeHandler()),
	})
	if err != nil {
		return nil, err
	}
	if res.existingID != "" {
		return &runtimeapi.RunPodSandboxResponse{PodSandboxId: res.existingID}, nil
	}
	rec := res.record
	id := rec.ID
	log := s.log.With("id", id, "name", name)
	md := cfg.GetMetadata()
	sb := sandboxObject{
		Config:         mustMarshal(cfg),
		RuntimeHandler: req.GetRuntimeHandler(),
		HostNetwork:    hostNetwork,
		CreatedAt:      time.Now(),
	}

	// Step 1: pin the namespaces the pod does not share with the host.
	kinds := []netns.Kind{}
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetIpc() != runtimeapi.NamespaceMode_NODE {
		kinds = append(kinds, netns.IPC)
	}
	if !hostNetwork {
		kinds = append(kinds, netns.Net, netns.UTS)
	}
	if len(kinds) > 0 {
		log.Debug("stage", "stage", stageSandboxNamespaces)
		seq, err := s.journal.Intent(ctx, id, stageSandboxNamespaces, netns.StepPin, netns.PinArgs(s.cfg.NamespaceDir, id, kinds))
		if err != nil {
			return nil, s.fail(ctx, rec, stageSandboxNamespaces, err)
		}
		pctx, cancel := detached(ctx, pinTimeout)
		paths, err := netns.Pin(pctx, s.cfg.NamespaceDir, id, kinds, sandboxHostname(cfg))
		cancel()
		if err != nil {
			return nil, s.fail(ctx, rec, stageSandboxNamespaces, err)
		}
		s.journal.Done(id, seq)
		sb.Namespaces = map[string]string{}
		for k, p := range paths {
			sb.Namespaces[string(k)] = p
		}
	}

	// Step 2: attach the network, detached from the request so a slow network can still
	// finish and be cached for the retry rather than thrown away.
	if !hostNetwork {
		log.Debug("stage", "stage", stageSandboxNetwork)
		netnsPath := sb.Namespaces[string(netns.Net)]
		seq, err := s.journal.Intent(ctx, id, stageSandboxNetwork, netns.StepAttach,
			netns.AttachArgs(network.Name(), id, netnsPath, netns.DefaultIfName, md.GetName(), md.GetNamespace(), md.GetUid()))
		if err != nil {
			return nil, s.fail(ctx, rec, stageSandboxNetwork, err)
		}
		nctx, cancel := detached(ctx, s.cfg.NetworkTimeout)
		result, err := network.Attach(nctx, id, netnsPath, netns.DefaultIfName,
			netns.CNIArgs(md.GetName(), md.GetNamespace(), md.GetUid(), id))
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = status.Errorf(codes.DeadlineExceeded, "CNI ADD did not finish within network_timeout (%s): %v", s.cfg.NetworkTimeout, err)
			}
			return nil, s.fail(ctx, rec, stageSandboxNetwork, err)
		}
		s.journal.Done(id, seq)
		sb.IPs = result.IPs
	}

	if _, err := s.finish(ctx, id, sb); err != nil {
		return nil, err
	}
	log.Info("pod sandbox created", "ips", sb.IPs)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// sandboxHostname is the hostname set in the pod's UTS namespace.
func sandboxHostname(cfg *runtimeapi.PodSandboxConfig) string {
	if h := cfg.GetHostname(); h != "" {
		return h
	}
	name := cfg.GetMetadata().GetName()
	if len(name) > 63 {
		name = name[:63]
	}
	return name
}
