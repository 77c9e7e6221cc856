package server

import (
	"context"
	"math"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/internal/pause"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
	"github.com/crijournal/crijournal/units"
)

// stageSandboxReserve is the stage of a sandbox creation before its first step, as
// inspect and waiting requests show it; the steps' stages are theirs (netns.StagePin, ...).
const stageSandboxReserve = "sandbox name reservation"

// flowSandboxCreate names the sandbox creation flow in failure points.
const flowSandboxCreate = "sandbox-create"

// namespaceTimeout bounds pinning a sandbox's namespaces and starting its pause process:
// syscalls and one fork, nothing that waits on the network or the disk for long.
const namespaceTimeout = 30 * time.Second

// RunPodSandbox creates a pod sandbox: pinned namespaces, a pause process holding a
// shared pid namespace when the pod asks for one (pid POD), the pod's files (resolv.conf,
// hostname, /dev/shm; see podfiles.go) and, unless the pod uses the host's network, a CNI
// attachment with the pod's host ports; then NRI's RunPodSandbox. Each step is journaled
// before it acts.
func (s *Server) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	name, err := sandboxName(cfg)
	if err != nil {
		return nil, err
	}
	if h := req.GetRuntimeHandler(); h != "" {
		if _, err := s.handlers().Lookup(h); err != nil {
			return nil, err
		}
	}
	namespaces := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions()
	ownUserns, err := s.podUserns(ctx, namespaces, req.GetRuntimeHandler())
	if err != nil {
		return nil, err
	}
	hostNetwork := namespaces.GetNetwork() == runtimeapi.NamespaceMode_NODE
	dns, err := podDNS(cfg)
	if err != nil {
		return nil, err
	}
	hostname, err := podHostnameFile(cfg, hostNetwork)
	if err != nil {
		return nil, err
	}
	var network *netns.Network
	var ports []netns.PortMapping
	if !hostNetwork {
		if ports, err = podPortMappings(cfg); err != nil {
			return nil, err
		}
		if network, err = s.networks.Network(); err != nil {
			return nil, newError(errWrongState, "cannot create pod network: %w", err)
		}
	}

	deadline, _ := ctx.Deadline()
	c, existing, err := s.creations.Begin(ctx, flowSandboxCreate, journal.BeginRequest{
		Kind: journal.KindSandbox, Name: name, Identity: sandboxIdentity(cfg), Deadline: deadline, Stage: stageSandboxReserve,
		Fingerprint: fingerprint(cfg, req.GetRuntimeHandler()),
	}, creation.Same{Older: olderFingerprints(cfg, req.GetRuntimeHandler()), AsRetried: func(made journal.Record) (any, error) {
		// The same pod: it is recorded as this call asked for it (its attempt).
		sb, err := decodeSandbox(made)
		if err != nil {
			return nil, err
		}
		sb.obj.Config = mustMarshal(cfg)
		return sb.obj, nil
	}})
	if c == nil {
		return s.answerSandbox(existing.ExistingID, err)
	}
	id := c.ID()
	obj := sandboxObject{
		Config:         mustMarshal(cfg),
		RuntimeHandler: req.GetRuntimeHandler(),
		HostNetwork:    hostNetwork,
		Namespaces:     map[string]string{},
		CreatedAt:      time.Now(),
	}

	// With the systemd driver, the pod's slice first, unless systemd has it.
	if err := s.podSlice(c, cfg); err != nil {
		return nil, err
	}
	// The pod's files, namespaces (and pause process) and network, each a step: their
	// intents are committed together, in one commit rather than one each, and they are
	// made in turn (see creation.Plan), but for the network and a pause process, which are made
	// at the same time. The undo of each finds nothing when the step never acted ("not
	// there" is success), so journaling a later one before an earlier one has acted is
	// as safe as journaling it just before it acts.
	local := c.Plan()
	pausing := false // a pause process is started last, by pinHostUserNamespaces
	// The pod's files its containers bind-mount: resolv.conf, hostname, and its own
	// /dev/shm unless it shares the host's IPC namespace.
	creation.AddStep(local, creation.Limit{Max: namespaceTimeout}, netns.ResolvConfStep(s.podFilesDir(), id, dns, netns.HostResolvConf),
		func(p string) { obj.ResolvConf = p })
	creation.AddStep(local, creation.Limit{Max: namespaceTimeout}, netns.HostnameStep(s.podFilesDir(), id, hostname),
		func(p string) { obj.HostnameFile = p })
	obj.Shm = netns.HostShm
	if namespaces.GetIpc() != runtimeapi.NamespaceMode_NODE {
		creation.AddStep(local, creation.Limit{Max: namespaceTimeout}, netns.ShmStep(s.podFilesDir(), id), func(p string) { obj.Shm = p })
	}
	switch {
	case ownUserns:
		// Its own user namespace, owning its net, ipc and uts namespaces and, when
		// shared, its pid namespace, whose pause process is the child that made them
		// all (see netns.PinUser). With pid CONTAINER that child is gone at once.
		kinds := podNamespaces(namespaces)
		if namespaces.GetPid() == runtimeapi.NamespaceMode_POD {
			kinds = append(kinds, netns.PID)
		}
		u := namespaces.GetUsernsOptions()
		uids, gids := idMaps(u.GetUids()), idMaps(u.GetGids())
		pause, err := s.pauseFor(id, cfg, uids, gids)
		if err != nil {
			return nil, c.Fail(netns.StageUserPin, err)
		}
		creation.AddStep(local, creation.Limit{Max: namespaceTimeout}, netns.UserPinStep(s.cfg.NamespaceDir, id, kinds, sandboxHostname(cfg),
			uids, gids, pause), func(pins netns.UserPins) {
			for k, p := range pins.Paths {
				obj.Namespaces[string(k)] = p
			}
			s.log.Debug("user namespace pinned, pause process started", "id", id, "name", name, "pid", pins.PID, "userns", pins.Paths[netns.User])
		})
	default:
		if pausing, err = s.pinHostUserNamespaces(local, id, cfg, namespaces, &obj); err != nil {
			return nil, c.Fail(netns.StagePause, err)
		}
	}
	// Last, the network, which may take long: it is cut off by network_timeout only.
	// It is in the same commit too: its undo (CNI DEL) of a namespace never pinned or
	// never attached finds nothing to release, as CNI requires of a DEL. It needs the
	// network namespace pinned, not the pause process of a pod in the node's user
	// namespace, whose start waits for the kernel to move it into its cgroup
	// (netns.PauseStep): it is attached beside it.
	if !hostNetwork {
		md := cfg.GetMetadata()
		attach := creation.AddStep[*netns.Result]
		if pausing {
			attach = creation.AddStepBeside[*netns.Result]
		}
		attach(local, creation.Limit{Max: s.cfg.NetworkTimeout, Setting: "network_timeout"}, netns.AttachStep(network, id,
			netns.PinPath(s.cfg.NamespaceDir, netns.Net, id), netns.DefaultIfName, netns.Pod{Name: md.GetName(), Namespace: md.GetNamespace(), UID: md.GetUid()}, ports),
			func(attached *netns.Result) { obj.IPs = attached.IPs })
	}
	if err := local.Run(); err != nil {
		return nil, err
	}
	// The NRI plugins, told last so that they see the pod's network; a plugin's
	// synchronization waits until the sandbox has settled (see package nri).
	unblock := s.nri.Block()
	defer unblock()
	if err := s.nriSandboxStep(c, cfg, obj); err != nil {
		return nil, err
	}

	settled, err := c.Finish(obj)
	if p := obj.Namespaces[string(netns.PID)]; p != "" && (settled.State == journal.StateCreated || settled.State == journal.StateCached) {
		s.watchPause(id, name, p)
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("pod sandbox created", "id", id, "name", name, "ips", obj.IPs)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: id}, nil
}

// pinHostUserNamespaces adds to p the steps that pin the namespaces of a pod in the
// node's user namespace: those it does not share with the node, and a shared pid
// namespace held by a pause process as its init, which stays until the sandbox is
// removed, as CRI-O's infra container does. The pause process runs in the pod's pinned
// namespaces, as an infra container would (a container sees it as PID 1, and its
// network in /proc/1/net): its step comes after theirs, and its undo before. Their
// results go into obj. It says whether it added a pause process's step, which it adds
// last.
func (s *Server) pinHostUserNamespaces(p *creation.Plan, id string, cfg *runtimeapi.PodSandboxConfig, namespaces *runtimeapi.NamespaceOption, obj *sandboxObject) (pausing bool, err error) {
	kinds := podNamespaces(namespaces)
	if len(kinds) > 0 {
		creation.AddStep(p, creation.Limit{Max: namespaceTimeout}, netns.PinStep(s.cfg.NamespaceDir, id, kinds, sandboxHostname(cfg)), func(paths netns.Paths) {
			for k, p := range paths {
				obj.Namespaces[string(k)] = p
			}
		})
	}
	if namespaces.GetPid() == runtimeapi.NamespaceMode_POD {
		prog, err := s.pauseFor(id, cfg, nil, nil)
		if err != nil {
			return false, err
		}
		creation.AddStep(p, creation.Limit{Max: namespaceTimeout}, netns.PauseStep(s.cfg.NamespaceDir, id, kinds, prog), func(pause netns.PauseProcess) {
			obj.Namespaces[string(netns.PID)] = pause.Path
			s.log.Debug("pause process started", "id", id, "name", p.Creation().Name(), "pid", pause.PID, "pidns", pause.Path)
		})
		return true, nil
	}
	return false, nil
}

// pauseFor says how the pause process of sandbox id runs (see netns.PauseProgram): as the
// pod's run_as_user and run_as_group, else 65535 as the Kubernetes pause image does; in a
// pod's own user namespace (uids and gids its maps, nil for none), as the namespace's
// root when that user is not mapped; in a cgroup of its own under the pod's cgroup_parent;
// with the oom_score_adj containerd and CRI-O give a pause container
// (oci.SandboxOOMScoreAdj), raised to the daemon's own as a container's is when the
// daemon may not go below it (oci.OOMScoreAdj), not the daemon's (-999 under its
// systemd unit), which it would otherwise inherit.
func (s *Server) pauseFor(id string, cfg *runtimeapi.PodSandboxConfig, uids, gids []netns.IDMap) (netns.PauseProgram, error) {
	sc := cfg.GetLinux().GetSecurityContext()
	uid, gid := int64(pause.DefaultUser), int64(pause.DefaultUser)
	if v := sc.GetRunAsUser(); v != nil {
		uid = v.GetValue()
	}
	if v := sc.GetRunAsGroup(); v != nil {
		gid = v.GetValue()
	}
	if uid < 0 || uid > math.MaxUint32 || gid < 0 || gid > math.MaxUint32 {
		return netns.PauseProgram{}, invalidf("pod security context: run_as_user %d, run_as_group %d: not user and group IDs", uid, gid)
	}
	if uids != nil && (!idMapped(uids, uint32(uid)) || !idMapped(gids, uint32(gid))) {
		uid, gid = 0, 0
	}
	cgroup, err := oci.SandboxCgroup(id, cfg, s.cfg.SystemdCgroup())
	if err != nil {
		return netns.PauseProgram{}, err
	}
	adj, err := oci.OOMScoreAdj(oci.SandboxOOMScoreAdj)
	if err != nil {
		return netns.PauseProgram{}, err
	}
	return netns.PauseProgram{Path: s.pauseProgram, UID: uint32(uid), GID: uint32(gid), Cgroup: cgroup, OOMScoreAdj: &adj}, nil
}

// podSlice makes the pod's slice, its cgroup_parent, as a step (units.SliceStep) when the
// cgroup driver is systemd and systemd does not have it: a kubelet with cgroupDriver:
// systemd makes its pods' slices itself, but a slice that systemd made only because a
// scope was started in it would stay after the pod. A pod without a cgroup_parent is put
// in units.DefaultSlice, shared, never a step. A parent that is neither a slice name nor
// a slice's directory (units.SliceName) is refused.
func (s *Server) podSlice(c *creation.Creation, cfg *runtimeapi.PodSandboxConfig) error {
	parent := cfg.GetLinux().GetCgroupParent()
	if !s.cfg.SystemdCgroup() || parent == "" {
		return nil
	}
	parent, err := units.SliceName(parent)
	if err != nil {
		return c.Fail(units.StageSlice, invalidf("cgroup_parent %q is not a systemd slice (such as kubepods-burstable-pod<uid>.slice, or its directory): the cgroup driver is systemd", cfg.GetLinux().GetCgroupParent()))
	}
	active, err := units.Active(context.WithoutCancel(c.Context()), parent)
	if err != nil {
		return c.Fail(units.StageSlice, newError(errUnavailable, "pod slice: %w", err))
	}
	if active {
		return nil
	}
	_, err = creation.Step(c, creation.Limit{Max: units.Timeout}, units.SliceStep(parent))
	return err
}

// idMapped reports whether maps map id (an ID inside the user namespace).
func idMapped(maps []netns.IDMap, id uint32) bool {
	for _, m := range maps {
		if id >= m.ContainerID && uint64(id) < uint64(m.ContainerID)+uint64(m.Size) {
			return true
		}
	}
	return false
}

// answerSandbox answers a RunPodSandbox settled by its reservation: the sandbox that
// already holds the name, or the reservation's error.
func (s *Server) answerSandbox(existingID string, err error) (*runtimeapi.RunPodSandboxResponse, error) {
	if err != nil {
		return nil, err
	}
	// Claimed from the cache (or a true duplicate): its pause process is watched from now
	// on, if it was not already.
	if sb, err := s.findSandbox(existingID); err == nil && sb.obj.Namespaces[string(netns.PID)] != "" {
		s.watchPause(sb.rec.ID, sb.rec.Name, sb.obj.Namespaces[string(netns.PID)])
	}
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: existingID}, nil
}

// podNamespaces returns the kinds of namespace a pod pins for itself: ipc unless it shares
// the host's, net and uts unless it uses the host's network.
func podNamespaces(opts *runtimeapi.NamespaceOption) []netns.Kind {
	var kinds []netns.Kind
	if opts.GetIpc() != runtimeapi.NamespaceMode_NODE {
		kinds = append(kinds, netns.IPC)
	}
	if opts.GetNetwork() != runtimeapi.NamespaceMode_NODE {
		kinds = append(kinds, netns.Net, netns.UTS)
	}
	return kinds
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
