package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
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
	stageSandboxPause      = "sandbox pid namespace (pause process)"
	stageSandboxNetwork    = "sandbox network creation"
)

// flowSandboxCreate names the sandbox creation flow in failure points.
const flowSandboxCreate = "sandbox-create"

// pinTimeout bounds pinning namespaces, which only makes syscalls.
const pinTimeout = 30 * time.Second

// RunPodSandbox creates a pod sandbox: pinned namespaces, a pause process holding a
// shared pid namespace when the pod asks for one (pid POD), and, unless the pod uses the
// host's network, a CNI attachment. Each step is journaled before it acts.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	name, err := sandboxName(cfg)
	if err != nil {
		return nil, err
	}
	if h := req.GetRuntimeHandler(); h != "" {
		if _, ok := s.cfg.Runtimes[h]; !ok {
			return nil, invalidf("runtime handler %q is not configured (configured: %s)", h, strings.Join(slices.Sorted(maps.Keys(s.cfg.Runtimes)), ", "))
		}
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
	}, legacyFingerprint(cfg, req.GetRuntimeHandler()))
	if err != nil {
		return nil, err
	}
	if res.existingID != "" {
		// Claimed from the cache (or a true duplicate): its pause process is watched from
		// now on, if it was not already.
		if sb, err := s.findSandbox(res.existingID); err == nil && sb.obj.Namespaces[string(netns.PID)] != "" {
			s.watchPause(sb.rec.ID, sb.rec.Name, sb.obj.Namespaces[string(netns.PID)])
		}
		return &runtimeapi.RunPodSandboxResponse{PodSandboxId: res.existingID}, nil
	}
	rec := res.record
	id := rec.ID
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
		err := s.step(ctx, flowSandboxCreate, rec, stageSandboxNamespaces, netns.StepPin, netns.PinArgs(s.cfg.NamespaceDir, id, kinds), func() error {
			pctx, cancel := detached(ctx, pinTimeout)
			defer cancel()
			paths, err := netns.Pin(pctx, s.cfg.NamespaceDir, id, kinds, sandboxHostname(cfg))
			sb.Namespaces = map[string]string{}
			for k, p := range paths {
				sb.Namespaces[string(k)] = p
			}
			return err
		})
		if err != nil {
			return nil, s.fail(ctx, rec, stageSandboxNamespaces, err)
		}
	}

	// Step 2: a shared pid namespace, held by a pause process (this very binary) as its
	// init. It stays until the sandbox is removed, as CRI-O's infra container does.
	if cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid() == runtimeapi.NamespaceMode_POD {
		err := s.step(ctx, flowSandboxCreate, rec, stageSandboxPause, netns.StepPause, netns.PauseArgs(s.cfg.NamespaceDir, id), func() error {
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("start pause process: find the daemon's binary: %w", err)
			}
			pctx, cancel := detached(ctx, pinTimeout)
			defer cancel()
			path, pid, err := netns.StartPause(pctx, s.cfg.NamespaceDir, id, exe)
			if err != nil {
				return err
			}
			if sb.Namespaces == nil {
				sb.Namespaces = map[string]string{}
			}
			sb.Namespaces[string(netns.PID)] = path
			s.log.Debug("pause process started", "id", id, "name", rec.Name, "pid", pid, "pidns", path)
			return nil
		})
		if err != nil {
			return nil, s.fail(ctx, rec, stageSandboxPause, err)
		}
	}

	// Step 3: attach the network, detached from the request so a slow network can still
	// finish and be cached for the retry rather than thrown away.
	if !hostNetwork {
		netnsPath := sb.Namespaces[string(netns.Net)]
		args := netns.AttachArgs(network, id, netnsPath, netns.DefaultIfName, md.GetName(), md.GetNamespace(), md.GetUid())
		err := s.step(ctx, flowSandboxCreate, rec, stageSandboxNetwork, netns.StepAttach, args, func() error {
			nctx, cancel := detached(ctx, s.cfg.NetworkTimeout)
			defer cancel()
			result, err := network.Attach(nctx, id, netnsPath, netns.DefaultIfName, netns.CNIArgs(md.GetName(), md.GetNamespace(), md.GetUid(), id))
			if errors.Is(err, context.DeadlineExceeded) {
				return status.Errorf(codes.DeadlineExceeded, "CNI ADD did not finish within network_timeout (%s): %v", s.cfg.NetworkTimeout, err)
			}
			if err == nil {
				sb.IPs = result.IPs
			}
			return err
		})
		if err != nil {
			return nil, s.fail(ctx, rec, stageSandboxNetwork, err)
		}
	}

	settled, err := s.finish(ctx, flowSandboxCreate, id, sb)
	if p := sb.Namespaces[string(netns.PID)]; p != "" && (settled.State == journal.StateCreated || settled.State == journal.StateCached) {
		s.watchPause(id, rec.Name, p)
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("pod sandbox created", "id", id, "name", name, "ips", sb.IPs)
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
