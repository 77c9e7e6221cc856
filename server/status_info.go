package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/netns"
	"github.com/crijournal/crijournal/oci"
)

// The verbose statuses' info (crictl inspect and inspectp): what operators' scripts read
// from containerd and CRI-O, under the names containerd gives them (the guides' `nsenter
// -t $(crictl inspect -o go-template --template '{{.info.pid}}' ID)`), beside the journal's
// own view, which keeps its names.

// containerInfo is ContainerStatus's verbose info["info"].
type containerInfo struct {
	// As containerd's ContainerInfo names them.
	SandboxID   string                      `json:"sandboxID"`
	Pid         int                         `json:"pid"` // the container's init process; 0 when it does not run
	Config      *runtimeapi.ContainerConfig `json:"config"`
	RuntimeSpec *specs.Spec                 `json:"runtimeSpec"` // the bundle's config.json, as the runtime got it

	// crijournal's own.
	SandboxIDOwn   string         `json:"sandbox_id"`
	RuntimeHandler string         `json:"runtime_handler"`
	Bundle         string         `json:"bundle"`
	Rootfs         string         `json:"rootfs"`
	Journal        map[string]any `json:"journal"`
}

// containerVerboseInfo builds a container's verbose info. What cannot be read (the
// runtime's state, the bundle's spec) is left empty and logged: the status itself is
// still answered.
func (s *Server) containerVerboseInfo(ctx context.Context, c container) containerInfo {
	info := containerInfo{
		SandboxID: c.obj.SandboxID, Config: c.config,
		SandboxIDOwn: c.obj.SandboxID, RuntimeHandler: c.obj.Handler, Bundle: c.obj.Bundle, Rootfs: c.obj.Rootfs,
		Journal: map[string]any{"state": c.rec.State, "steps": c.rec.Steps, "markers": c.rec.Markers},
	}
	if c.obj.Bundle != "" {
		if sp, err := readSpec(filepath.Join(c.obj.Bundle, "config.json")); err != nil {
			s.log.Debug("container spec not readable for its verbose status", "id", c.rec.ID, "err", err)
		} else {
			info.RuntimeSpec = sp
		}
	}
	if c.state() != runtimeapi.ContainerState_CONTAINER_RUNNING || s.runtimes == nil {
		return info
	}
	rt, err := s.runtimes.Runtime(c.obj.Handler)
	if err != nil {
		s.log.Debug("no runtime for the container's verbose status", "id", c.rec.ID, "err", err)
		return info
	}
	st, err := rt.State(ctx, c.rec.ID)
	if err != nil {
		s.log.Debug("container state not readable for its verbose status", "id", c.rec.ID, "err", err)
		return info
	}
	if st.Status == oci.StatusRunning || st.Status == oci.StatusPaused {
		info.Pid = st.Pid
	}
	return info
}

// readSpec reads an OCI runtime spec (a bundle's config.json).
func readSpec(path string) (*specs.Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	sp := &specs.Spec{}
	if err := json.Unmarshal(b, sp); err != nil {
		return nil, err
	}
	return sp, nil
}

// sandboxInfo is PodSandboxStatus's verbose info["info"].
type sandboxInfo struct {
	// As containerd's SandboxInfo names them: the pause process (0 for a pod that
	// shares no pid namespace, which has none), the configuration, the runtime spec.
	Pid            int                          `json:"pid"`
	Config         *runtimeapi.PodSandboxConfig `json:"config"`
	RuntimeHandler string                       `json:"runtimeHandler"`
	RuntimeSpec    *specs.Spec                  `json:"runtimeSpec"`
	// NetNamespacePath is the pod's pinned network namespace ("" on the node's
	// network), the path containerd's runtimeSpec.linux.namespaces holds too.
	NetNamespacePath string `json:"netNamespacePath"`

	// crijournal's own.
	Namespaces  map[string]string `json:"namespaces"`
	HostNetwork bool              `json:"host_network"`
	// The pod-level resources as created or last updated (UpdatePodSandboxResources).
	Overhead  *runtimeapi.LinuxContainerResources `json:"overhead"`
	Resources *runtimeapi.LinuxContainerResources `json:"resources"`
	Journal   map[string]any                      `json:"journal"`
}

// sandboxVerboseInfo builds a sandbox's verbose info.
func (s *Server) sandboxVerboseInfo(sb sandbox) sandboxInfo {
	info := sandboxInfo{
		Config: sb.config, RuntimeHandler: sb.obj.RuntimeHandler, NetNamespacePath: sb.obj.Namespaces[string(netns.Net)],
		Namespaces: sb.obj.Namespaces, HostNetwork: sb.obj.HostNetwork,
		Overhead: sb.config.GetLinux().GetOverhead(), Resources: sb.config.GetLinux().GetResources(),
		Journal: map[string]any{"state": sb.rec.State, "steps": sb.rec.Steps, "markers": sb.rec.Markers},
	}
	if p := sb.obj.Namespaces[string(netns.PID)]; p != "" {
		info.Pid = netns.PausePID(p)
	}
	info.RuntimeSpec = s.sandboxSpec(sb, info.Pid)
	return info
}

// specNamespaceTypes are the OCI names of the kinds of a sandbox's pinned namespaces.
var specNamespaceTypes = []struct {
	kind netns.Kind
	typ  specs.LinuxNamespaceType
}{
	{netns.User, specs.UserNamespace}, {netns.PID, specs.PIDNamespace}, {netns.Net, specs.NetworkNamespace},
	{netns.IPC, specs.IPCNamespace}, {netns.UTS, specs.UTSNamespace},
}

// sandboxSpec is the runtime spec a sandbox's verbose status shows. A crijournal sandbox
// has no infra container and so no bundle: the spec describes what an infra container's
// would hold that tools read, the pod's namespaces by their pinned paths (a namespace
// the pod shares with the node is absent, as in an OCI spec), its user namespace's
// mappings, hostname, sysctls, cgroup and annotations, and the pause process when the
// pod has one (pid).
func (s *Server) sandboxSpec(sb sandbox, pid int) *specs.Spec {
	cfg := sb.config
	sp := &specs.Spec{
		Version:     oci.SpecVersion,
		Annotations: cfg.GetAnnotations(),
		Linux:       &specs.Linux{Sysctl: cfg.GetLinux().GetSysctls()},
	}
	for _, n := range specNamespaceTypes {
		if p := sb.obj.Namespaces[string(n.kind)]; p != "" {
			sp.Linux.Namespaces = append(sp.Linux.Namespaces, specs.LinuxNamespace{Type: n.typ, Path: p})
		}
	}
	if sb.obj.Namespaces[string(netns.UTS)] != "" {
		sp.Hostname = sandboxHostname(cfg)
	}
	if u := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetUsernsOptions(); u.GetMode() == runtimeapi.NamespaceMode_POD {
		sp.Linux.UIDMappings, sp.Linux.GIDMappings = idMaps(u.GetUids()), idMaps(u.GetGids())
	}
	if cg, err := oci.SandboxCgroup(sb.rec.ID, cfg, s.cfg.SystemdCgroup()); err == nil {
		sp.Linux.CgroupsPath = cg
	}
	if pid > 0 {
		sp.Process = &specs.Process{Args: []string{s.pauseProgram, "pause", sb.rec.ID}, Cwd: "/"}
	}
	return sp
}
