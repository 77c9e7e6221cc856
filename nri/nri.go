package nri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	nrilog "github.com/containerd/nri/pkg/log"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// RuntimeName is the runtime name NRI plugins are told.
const RuntimeName = "crijournal"

// ErrPlugin is returned (wrapped) when a plugin refused or failed an event that
// decides a creation or a call (RunPodSandbox, CreateContainer, UpdateContainer).
var ErrPlugin = errors.New("NRI plugin failed")

// Options configure the NRI adaptation (config's nri_* keys).
type Options struct {
	Enable              bool          // enable_nri
	Socket              string        // nri_listen: the socket external plugins connect to
	PluginDir           string        // nri_plugin_dir: plugins started by the daemon
	PluginConfigDir     string        // nri_plugin_config_dir: their configuration
	RegistrationTimeout time.Duration // nri_plugin_registration_timeout
	RequestTimeout      time.Duration // nri_plugin_request_timeout
	DisableConnections  bool          // nri_disable_connections: no external plugins
	Version             string        // the daemon's version, as plugins are told
	Log                 *slog.Logger
}

// Source is the runtime as NRI sees it: what a connecting plugin is synchronized with,
// and where the changes plugins ask for by themselves are made (the server, through the
// paths its CRI calls use).
type Source interface {
	// List returns the pods and containers plugins know of: those settled created or
	// cached.
	List(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error)
	// Update changes containers' resources as UpdateContainerResources does, and
	// returns the updates that failed.
	Update(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error)
	// Evict stops containers, as StopContainer does.
	Evict(ctx context.Context, evictions []*api.ContainerEviction) error
}

// NRI is the runtime's side of NRI. The zero of *NRI (nil) and one made with Enable
// false are disabled: every event is a no-op and Block returns a no-op. Build it with
// New, start it with Start once recovery has run, stop it with Stop.
type NRI struct {
	a         *adaptation.Adaptation
	src       Source
	log       *slog.Logger
	pluginDir string

	// syncs counts the adaptation's synchronizations: the first is Start's, of the
	// plugins it started from the plugin directory (none, or some); every later one is
	// an external plugin's.
	syncs atomic.Int64
	// plugged is set once a plugin may be registered (see Plugged).
	plugged atomic.Bool
}

// New returns the NRI adaptation configured by o, not yet started; nil, nil when NRI is
// disabled.
func New(o Options) (*NRI, error) {
	if !o.Enable {
		return nil, nil
	}
	n := &NRI{log: o.Log, pluginDir: o.PluginDir}
	if n.log == nil {
		n.log = slog.Default()
	}
	nrilog.Set(slogLogger{n.log})
	opts := []adaptation.Option{
		adaptation.WithPluginPath(o.PluginDir),
		adaptation.WithPluginConfigPath(o.PluginConfigDir),
		adaptation.WithSocketPath(o.Socket),
	}
	if o.DisableConnections {
		opts = append(opts, adaptation.WithDisabledExternalConnections())
	}
	if o.RegistrationTimeout > 0 {
		adaptation.SetPluginRegistrationTimeout(o.RegistrationTimeout)
	}
	if o.RequestTimeout > 0 {
		adaptation.SetPluginRequestTimeout(o.RequestTimeout)
	}
	a, err := adaptation.New(RuntimeName, o.Version, n.synchronize, n.update, opts...)
	if err != nil {
		return nil, fmt.Errorf("nri: %w", err)
	}
	n.a = a
	return n, nil
}

// Enabled reports whether events are sent to plugins.
func (n *NRI) Enabled() bool { return n != nil && n.a != nil }

// Plugged reports whether a plugin may be registered: NRI is enabled and, since Start,
// the plugin directory held a plugin to start or an external plugin was synchronized
// (one that left since still counts: the answer never goes back to false). A plugin is
// registered only at the end of its synchronization, which Block holds off; so a
// creation that holds Block and finds Plugged false may skip its NRI step, a step
// with nobody to tell: a plugin that connects meanwhile is synchronized after the
// creation has settled, and finds it then (see the package comment).
func (n *NRI) Plugged() bool { return n.Enabled() && n.plugged.Load() }

// hasPluginFiles reports whether dir holds a plugin the adaptation would start: an
// executable file (anything that is not a directory, to err on the safe side). A dir
// that cannot be read may hold some.
func hasPluginFiles(dir string) bool {
	if dir == "" {
		return false
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	for _, e := range entries {
		if !e.IsDir() {
			return true
		}
	}
	return false
}

// Start starts the plugins of the plugin directory and listens for external ones. src
// is what they are synchronized with; Start is called once recovery has run, so that
// what they are told is what the journal holds.
func (n *NRI) Start(src Source) error {
	if !n.Enabled() {
		return nil
	}
	n.src = src
	// Looked at before the adaptation's own look, which starts what it finds.
	if hasPluginFiles(n.pluginDir) {
		n.plugged.Store(true)
	}
	if err := n.a.Start(); err != nil {
		return fmt.Errorf("nri: start: %w", err)
	}
	return nil
}

// Stop stops the plugins the daemon started, closes the connections of the others and
// stops listening. The adaptation's goroutines end with it.
func (n *NRI) Stop() {
	if n.Enabled() {
		n.a.Stop()
	}
}

// synchronize is the adaptation's SyncFn: it lists the runtime's pods and containers
// and hands them to the plugin being registered, then applies the updates the plugin
// asked for.
func (n *NRI) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	if n.syncs.Add(1) > 1 {
		// An external plugin: it is registered once this returns (unless it fails).
		n.plugged.Store(true)
	}
	pods, containers, err := n.src.List(ctx)
	if err != nil {
		return fmt.Errorf("nri: list pods and containers for a plugin's synchronization: %w", err)
	}
	updates, err := cb(ctx, pods, containers)
	if err != nil {
		return err
	}
	if failed, err := n.src.Update(ctx, updates); err != nil || len(failed) > 0 {
		n.log.Warn("NRI: updates a plugin asked for at synchronization failed", "failed", len(failed), "err", err)
	}
	return nil
}

// update is the adaptation's UpdateFn: the updates a plugin asks for by itself.
func (n *NRI) update(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return n.src.Update(ctx, updates)
}

// Block keeps plugins from being synchronized until the returned function is called:
// a creation holds it from before its NRI step until its record has settled (see the
// package comment). Disabled, it does nothing.
func (n *NRI) Block() (unblock func()) {
	if !n.Enabled() {
		return func() {}
	}
	b := n.a.BlockPluginSync()
	return b.Unblock
}

// pluginError wraps an error of the plugins in ErrPlugin. The cause is kept as text
// only: a plugin's ttrpc status says nothing about the runtime's call, whose code
// ErrPlugin decides.
func pluginError(event string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %s: %v", ErrPlugin, event, err)
}

// RunPodSandbox tells the plugins a pod was made; an error fails its creation.
func (n *NRI) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("RunPodSandbox", n.a.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}))
}

// StopPodSandbox tells the plugins a pod stopped.
func (n *NRI) StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("StopPodSandbox", n.a.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: pod}))
}

// RemovePodSandbox tells the plugins a pod is gone.
func (n *NRI) RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("RemovePodSandbox", n.a.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod}))
}

// UpdatePodSandbox asks the plugins about new pod-level resources of a pod (the CRI's
// UpdatePodSandboxResources): its overhead and the sum of its containers' resources. An
// error refuses the update.
func (n *NRI) UpdatePodSandbox(ctx context.Context, pod *api.PodSandbox, overhead, resources *runtimeapi.LinuxContainerResources) error {
	if !n.Enabled() {
		return nil
	}
	_, err := n.a.UpdatePodSandbox(ctx, &api.UpdatePodSandboxRequest{Pod: pod,
		OverheadLinuxResources: criResources(overhead), LinuxResources: criResources(resources)})
	return pluginError("UpdatePodSandbox", err)
}

// PostUpdatePodSandbox tells the plugins a pod's pod-level resources changed.
func (n *NRI) PostUpdatePodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("PostUpdatePodSandbox", n.a.PostUpdatePodSandbox(ctx, &api.PostUpdatePodSandboxRequest{Pod: pod}))
}

// Created is the plugins' answer to a container's creation: the adjustment of its spec,
// and updates and evictions of other containers.
type Created struct {
	Adjust *api.ContainerAdjustment
	Update []*api.ContainerUpdate
	Evict  []*api.ContainerEviction
}

// CreateContainer asks the plugins about a container about to be created; an error
// fails its creation.
func (n *NRI) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (Created, error) {
	if !n.Enabled() {
		return Created{}, nil
	}
	r, err := n.a.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return Created{}, pluginError("CreateContainer", err)
	}
	return Created{Adjust: r.GetAdjust(), Update: r.GetUpdate(), Evict: r.GetEvict()}, nil
}

// PostCreateContainer tells the plugins a container was created.
func (n *NRI) PostCreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("PostCreateContainer", n.a.PostCreateContainer(ctx, &api.PostCreateContainerRequest{Pod: pod, Container: ctr}))
}

// StartContainer tells the plugins a container is about to start.
func (n *NRI) StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("StartContainer", n.a.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: ctr}))
}

// PostStartContainer tells the plugins a container started.
func (n *NRI) PostStartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("PostStartContainer", n.a.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: ctr}))
}

// UpdateContainer asks the plugins about new resources of a container. It returns the
// resources to set (res, or what the plugins made of it) and the updates of other
// containers they asked for.
func (n *NRI) UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (*api.LinuxResources, []*api.ContainerUpdate, error) {
	if !n.Enabled() {
		return res, nil, nil
	}
	r, err := n.a.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: ctr, LinuxResources: res})
	if err != nil {
		return nil, nil, pluginError("UpdateContainer", err)
	}
	var others []*api.ContainerUpdate
	for _, u := range r.GetUpdate() {
		switch {
		case u == nil:
		case u.GetContainerId() == ctr.GetId():
			if r := u.GetLinux().GetResources(); r != nil {
				res = r
			}
		default:
			others = append(others, u)
		}
	}
	return res, others, nil
}

// PostUpdateContainer tells the plugins a container's resources changed.
func (n *NRI) PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("PostUpdateContainer", n.a.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: ctr}))
}

// StopContainer tells the plugins a container stopped, and returns the updates of
// other containers they asked for.
func (n *NRI) StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	if !n.Enabled() {
		return nil, nil
	}
	r, err := n.a.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: ctr})
	if err != nil {
		return nil, pluginError("StopContainer", err)
	}
	return r.GetUpdate(), nil
}

// RemoveContainer tells the plugins a container is gone.
func (n *NRI) RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	if !n.Enabled() {
		return nil
	}
	return pluginError("RemoveContainer", n.a.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: ctr}))
}
