package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/crijournal/crijournal/creation"
	"github.com/crijournal/crijournal/journal"
	"github.com/crijournal/crijournal/nri"
)

// nriTimeout bounds one NRI step (all plugins' handling of one event; each plugin is
// bounded by nri_plugin_request_timeout). Like the other steps it runs detached from the
// request, so plugins slower than the client's deadline still finish, and the creation
// is cached for the retry.
const nriTimeout = 2 * time.Minute

// nriEventTimeout bounds the NRI events that are not steps (post-create, start, stop,
// update, ...), sent after the request's own work, detached from it.
const nriEventTimeout = 30 * time.Second

// nriStops keeps the StopContainer events of one container apart: recordExit is called
// from several places at once (the exit watcher, status calls, StopContainer), and only
// one of them sends the event (see exitMarkers).
type nriStops struct {
	inFlight sync.Map // container ID -> struct{}
	// starting holds the containers StartContainer is starting (container ID -> a
	// channel closed once it sent PostStartContainer): a container that exits at once
	// has its StopContainer wait for that, so plugins see PostStart before Stop.
	starting sync.Map
}

// start marks container id as being started until the returned func is called.
func (n *nriStops) start(id string) (done func()) {
	ch := make(chan struct{})
	n.starting.Store(id, ch)
	return func() {
		n.starting.Delete(id)
		close(ch)
	}
}

// waitStarted waits until container id is not being started, for at most
// nriEventTimeout (a caller inside the start itself must not wait for ever).
func (n *nriStops) waitStarted(ctx context.Context, id string) {
	v, ok := n.starting.Load(id)
	if !ok {
		return
	}
	t := time.NewTimer(nriEventTimeout)
	defer t.Stop()
	select {
	case <-v.(chan struct{}):
	case <-ctx.Done():
	case <-t.C:
	}
}

// nriPod returns the NRI form of a created sandbox.
func nriPod(sb sandbox) *api.PodSandbox {
	return nri.PodSandbox(nri.Pod{ID: sb.rec.ID, Config: sb.config, RuntimeHandler: sb.obj.RuntimeHandler,
		IPs: sb.obj.IPs, Namespaces: sb.obj.Namespaces})
}

// nriState is the NRI state of a container in CRI state st.
func nriState(st runtimeapi.ContainerState) api.ContainerState {
	switch st {
	case runtimeapi.ContainerState_CONTAINER_CREATED:
		return api.ContainerState_CONTAINER_CREATED
	case runtimeapi.ContainerState_CONTAINER_RUNNING:
		return api.ContainerState_CONTAINER_RUNNING
	case runtimeapi.ContainerState_CONTAINER_EXITED:
		return api.ContainerState_CONTAINER_STOPPED
	}
	return api.ContainerState_CONTAINER_UNKNOWN
}

// nriContainer returns the NRI form of a created container, with the spec the runtime
// runs (its bundle's config.json, as the plugins adjusted it) when it can be read.
func nriContainer(c container) *api.Container {
	ctr := nri.Ctr{ID: c.rec.ID, SandboxID: c.obj.SandboxID, Config: c.config, Spec: bundleSpec(c.obj.Bundle),
		State: nriState(c.state()), CreatedAt: c.obj.CreatedAt}
	if v, ok := c.rec.Marker(markerStartedAt); ok {
		ctr.StartedAt, _ = time.Parse(time.RFC3339Nano, v)
	}
	if v, ok := c.rec.Marker(markerFinishedAt); ok {
		ctr.FinishedAt, _ = time.Parse(time.RFC3339Nano, v)
		code, _ := c.rec.Marker(markerExitCode)
		n, _ := strconv.ParseInt(code, 10, 32)
		ctr.ExitCode = int32(n)
		ctr.Reason, _ = c.rec.Marker(markerReason)
	}
	return nri.Container(ctr)
}

// bundleSpec reads the spec of a container's bundle; nil when it cannot.
func bundleSpec(bundle string) *specs.Spec {
	if bundle == "" {
		return nil
	}
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil
	}
	var spec specs.Spec
	if json.Unmarshal(b, &spec) != nil {
		return nil
	}
	return &spec
}

// nriOf returns the NRI forms of a container and its sandbox.
func (s *Server) nriOf(c container) (*api.PodSandbox, *api.Container, error) {
	rec, err := s.journal.Get(c.obj.SandboxID)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %s of container %s: %w", c.obj.SandboxID, c.rec.ID, err)
	}
	sb, err := decodeSandbox(rec)
	if err != nil {
		return nil, nil, err
	}
	return nriPod(sb), nriContainer(c), nil
}

// nriEvent sends one event about container c that does not decide a call (post-create,
// post-start, post-update): detached from the request, bounded, logged on failure.
func (s *Server) nriEvent(ctx context.Context, c container, event string, send func(context.Context, *api.PodSandbox, *api.Container) error) {
	if !s.nri.Plugged() {
		return // nobody to tell: not worth the container's spec read from its bundle
	}
	ectx, cancel := detached(ctx, nriEventTimeout)
	defer cancel()
	pod, ctr, err := s.nriOf(c)
	if err == nil {
		err = send(ectx, pod, ctr)
	}
	if err != nil {
		s.log.Warn("NRI event failed", "event", event, "id", c.rec.ID, "name", c.rec.Name, "err", err)
	}
}

// exitMarkers commits a container's exit markers and, the first time, sends the
// plugins its StopContainer and commits nri.MarkerStopped with the markers, so that the
// event is sent once, also across a restart (the undo at removal sends it only when the
// marker is missing).
func (s *Server) exitMarkers(ctx context.Context, c container, markers map[string]*string) error {
	_, sent := c.rec.Marker(nri.MarkerStopped)
	switch {
	case sent || !s.nri.Enabled():
		// Told already, or nobody to tell ever: nothing to send or record.
	case !s.nri.Plugged():
		// No plugin to tell (see nriContainerStep): recorded as told, so that the undo
		// at removal does not tell a plugin registered by then of a stop it was
		// synchronized after.
		markers[nri.MarkerStopped] = nowMarker()
	default:
		if _, busy := s.nriStops.inFlight.LoadOrStore(c.rec.ID, struct{}{}); !busy {
			defer s.nriStops.inFlight.Delete(c.rec.ID) // after the markers' commit
			// Look again: c may be older than the commit of another caller that sent it.
			if rec, err := s.journal.Get(c.rec.ID); err == nil {
				_, sent = rec.Marker(nri.MarkerStopped)
			}
			if !sent {
				s.nriStops.waitStarted(ctx, c.rec.ID)
				s.nriStopContainer(ctx, c)
				markers[nri.MarkerStopped] = nowMarker()
			}
		}
	}
	return s.journal.SetMarkers(c.rec.ID, markers)
}

// nriStopContainer sends StopContainer for c and applies the updates of other
// containers the plugins asked for.
func (s *Server) nriStopContainer(ctx context.Context, c container) {
	ectx, cancel := detached(ctx, nriEventTimeout)
	defer cancel()
	pod, ctr, err := s.nriOf(c)
	if err == nil {
		ctr.State = api.ContainerState_CONTAINER_STOPPED
		var updates []*api.ContainerUpdate
		if updates, err = s.nri.StopContainer(ectx, pod, ctr); err == nil {
			s.nriApply(ectx, updates, nil)
		}
	}
	if err != nil {
		s.log.Warn("NRI StopContainer failed; it is not sent again", "id", c.rec.ID, "name", c.rec.Name, "err", err)
	}
}

// nriApply makes the updates and evictions plugins asked for in an answer to an event,
// logging those that fail.
func (s *Server) nriApply(ctx context.Context, updates []*api.ContainerUpdate, evictions []*api.ContainerEviction) {
	if failed, err := s.nriUpdate(ctx, updates); err != nil || len(failed) > 0 {
		s.log.Warn("container updates asked for by NRI plugins failed", "failed", len(failed), "err", err)
	}
	if err := s.nriEvict(ctx, evictions); err != nil {
		s.log.Warn("container evictions asked for by NRI plugins failed", "err", err)
	}
}

// NRISource returns what NRI plugins are synchronized with and change containers
// through: this server.
func (s *Server) NRISource() nri.Source { return nriSource{s} }

type nriSource struct{ s *Server }

// List lists the sandboxes and containers settled created or cached: those the
// plugins have been told about (or would have been, before they connected).
func (n nriSource) List(ctx context.Context) ([]*api.PodSandbox, []*api.Container, error) {
	s := n.s
	recs := s.journal.Snapshot(func(r *journal.Record) bool {
		return r.State == journal.StateCreated || r.State == journal.StateCached
	})
	var pods []*api.PodSandbox
	var ctrs []*api.Container
	for _, rec := range recs {
		switch rec.Kind {
		case journal.KindSandbox:
			sb, err := decodeSandbox(rec)
			if err != nil {
				s.log.Warn("NRI sync: skipping undecodable sandbox", "id", rec.ID, "err", err)
				continue
			}
			pods = append(pods, nriPod(sb))
		case journal.KindContainer:
			c, err := decodeContainer(rec)
			if err != nil {
				s.log.Warn("NRI sync: skipping undecodable container", "id", rec.ID, "err", err)
				continue
			}
			ctrs = append(ctrs, nriContainer(c))
		}
	}
	return pods, ctrs, ctx.Err()
}

// Update changes containers' resources through UpdateContainerResources's path.
func (n nriSource) Update(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	return n.s.nriUpdate(ctx, updates)
}

// Evict stops containers through StopContainer's path.
func (n nriSource) Evict(ctx context.Context, evictions []*api.ContainerEviction) error {
	return n.s.nriEvict(ctx, evictions)
}

// nriUpdate changes the resources of containers as plugins asked, each through
// updateResources (UpdateContainerResources's path, without the NRI events: the
// plugins asked for it), and returns the updates that failed and were not to be ignored.
func (s *Server) nriUpdate(ctx context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	var failed []*api.ContainerUpdate
	var errs []error
	for _, u := range updates {
		if u == nil {
			continue
		}
		c, err := s.findContainer(u.GetContainerId())
		if err == nil {
			err = s.updateResources(ctx, c, nri.CRIResources(u.GetLinux().GetResources(), c.resources().GetLinux()))
		}
		if err != nil && !u.GetIgnoreFailure() {
			failed = append(failed, u)
			errs = append(errs, fmt.Errorf("update container %s: %w", u.GetContainerId(), err))
		}
	}
	return failed, errors.Join(errs...)
}

// nriEvict stops the containers plugins asked to evict, as StopContainer does.
func (s *Server) nriEvict(ctx context.Context, evictions []*api.ContainerEviction) error {
	var errs []error
	for _, e := range evictions {
		c, err := s.findContainer(e.GetContainerId())
		if errors.Is(err, errNotFound) {
			continue
		}
		if err == nil {
			s.log.Info("container evicted by an NRI plugin", "id", c.rec.ID, "name", c.rec.Name, "reason", e.GetReason())
			err = s.stopContainer(ctx, c, 0)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("evict container %s: %w", e.GetContainerId(), err))
		}
	}
	return errors.Join(errs...)
}

// nriSandboxStep is the NRI step of a sandbox's creation (see nri.SandboxStep).
func (s *Server) nriSandboxStep(c *creation.Creation, cfg *runtimeapi.PodSandboxConfig, obj sandboxObject) error {
	if !s.nri.Enabled() {
		return nil
	}
	pod := nri.PodSandbox(nri.Pod{ID: c.ID(), Config: cfg, RuntimeHandler: obj.RuntimeHandler, IPs: obj.IPs,
		Namespaces: obj.Namespaces})
	step := nri.SandboxStep(s.nri, pod)
	if !s.nri.Plugged() {
		// No plugin to tell, and none can register before the sandbox settles (the
		// caller holds Block): the step is recorded, without a commit of its own, for
		// its undo to tell the plugins registered by then of the pod's removal.
		return creation.Note(c, step)
	}
	_, err := creation.Step(c, creation.Limit{Max: nriTimeout}, step)
	return err
}

// nriContainerStep is the NRI step of a container's creation (see nri.ContainerStep):
// the plugins' adjustment is applied to spec, in place, and their answer returned.
func (s *Server) nriContainerStep(c *creation.Creation, sb sandbox, cfg *runtimeapi.ContainerConfig, spec *specs.Spec) (nri.Created, error) {
	if !s.nri.Enabled() {
		return nri.Created{}, nil
	}
	ctr := nri.Container(nri.Ctr{ID: c.ID(), SandboxID: sb.rec.ID, Config: cfg, Spec: spec, State: api.ContainerState_CONTAINER_UNKNOWN})
	step := nri.ContainerStep(s.nri, nriPod(sb), ctr)
	if !s.nri.Plugged() {
		// No plugin to ask (see nriSandboxStep): recorded for its undo only.
		return nri.Created{}, creation.Note(c, step)
	}
	created, err := creation.Step(c, creation.Limit{Max: nriTimeout}, step)
	if err != nil {
		return created, err
	}
	if err := nri.Adjust(spec, created.Adjust); err != nil {
		return created, c.Fail(nri.StageContainer, err)
	}
	return created, nil
}

// nriCreated finishes a container's creation for the plugins: PostCreateContainer, then
// the updates and evictions of other containers they asked for.
func (s *Server) nriCreated(ctx context.Context, id string, plugins nri.Created) {
	if !s.nri.Plugged() {
		return // nobody to tell, and no plugin's answer to apply
	}
	c, err := s.findContainer(id)
	if err != nil {
		return
	}
	s.nriEvent(ctx, c, "PostCreateContainer", s.nri.PostCreateContainer)
	actx, cancel := detached(ctx, nriEventTimeout)
	defer cancel()
	s.nriApply(actx, plugins.Update, plugins.Evict)
}

// nriStopPod sends the plugins StopPodSandbox for sb unless it was sent (its record has
// nri.MarkerStopped), and adds that marker to markers, which the caller commits with the
// sandbox's stop.
func (s *Server) nriStopPod(ctx context.Context, sb sandbox, markers map[string]*string) {
	if _, sent := sb.rec.Marker(nri.MarkerStopped); sent || !s.nri.Enabled() {
		return
	}
	if err := s.nri.StopPodSandbox(ctx, nriPod(sb)); err != nil {
		s.log.Warn("NRI StopPodSandbox failed; it is not sent again", "id", sb.rec.ID, "name", sb.rec.Name, "err", err)
	}
	markers[nri.MarkerStopped] = nowMarker()
}
