package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/crijournal/crijournal/internal/testenv"
	"github.com/crijournal/crijournal/journal"
)

// NRI end to end: a plugin written on NRI's pkg/stub, in the test, connects to the
// daemon's NRI socket (nri_listen, in the daemon's own directory) and records every
// event it gets; hooks make it fail, block or adjust.

// nriPlugin is the test's NRI plugin.
type nriPlugin struct {
	mu     sync.Mutex
	events []string // "<Event> <pod name>[/<container name>]"
	// Hooks, keyed by pod or container name: the plugin fails, or sleeps in, the
	// event's handler.
	failRun, failCreate   string
	sleepCreate           time.Duration
	synced                chan syncedState
	addEnv, addAnnotation [2]string // added to every container it is asked to create
}

type syncedState struct{ pods, containers []string }

func (p *nriPlugin) record(event string, pod *api.PodSandbox, ctr *api.Container) {
	what := pod.GetName()
	if ctr != nil {
		what += "/" + ctr.GetName()
	}
	p.mu.Lock()
	p.events = append(p.events, event+" "+what)
	p.mu.Unlock()
}

// seen returns the events so far about pod (all, for "").
func (p *nriPlugin) seen(pod string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, e := range p.events {
		_, what, _ := strings.Cut(e, " ")
		if pod == "" || what == pod || strings.HasPrefix(what, pod+"/") {
			out = append(out, e)
		}
	}
	return out
}

func (p *nriPlugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	var st syncedState
	for _, pod := range pods {
		st.pods = append(st.pods, pod.GetName())
	}
	for _, c := range ctrs {
		st.containers = append(st.containers, c.GetName())
	}
	select {
	case p.synced <- st:
	default:
	}
	return nil, nil
}

func (p *nriPlugin) RunPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("RunPodSandbox", pod, nil)
	if pod.GetName() == p.failRun {
		return errors.New("the test plugin refuses this pod")
	}
	return nil
}

func (p *nriPlugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("StopPodSandbox", pod, nil)
	return nil
}

func (p *nriPlugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.record("RemovePodSandbox", pod, nil)
	return nil
}

func (p *nriPlugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.record("CreateContainer", pod, ctr)
	if ctr.GetName() == p.failCreate {
		return nil, nil, errors.New("the test plugin refuses this container")
	}
	time.Sleep(p.sleepCreate)
	adj := &api.ContainerAdjustment{}
	if p.addEnv[0] != "" {
		adj.AddEnv(p.addEnv[0], p.addEnv[1])
	}
	if p.addAnnotation[0] != "" {
		adj.AddAnnotation(p.addAnnotation[0], p.addAnnotation[1])
	}
	return adj, nil, nil
}

func (p *nriPlugin) PostCreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("PostCreateContainer", pod, ctr)
	return nil
}

func (p *nriPlugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("StartContainer", pod, ctr)
	return nil
}

func (p *nriPlugin) PostStartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("PostStartContainer", pod, ctr)
	return nil
}

func (p *nriPlugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, _ *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.record("UpdateContainer", pod, ctr)
	return nil, nil
}

func (p *nriPlugin) PostUpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("PostUpdateContainer", pod, ctr)
	return nil
}

func (p *nriPlugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	p.record("StopContainer", pod, ctr)
	return nil, nil
}

func (p *nriPlugin) RemoveContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	p.record("RemoveContainer", pod, ctr)
	return nil
}

// connectPlugin connects p to d's NRI socket and waits for its synchronization, whose
// state it returns. The plugin is stopped at the end of the test.
func connectPlugin(t *testing.T, d *daemon, p *nriPlugin) syncedState {
	t.Helper()
	p.synced = make(chan syncedState, 1)
	s, err := stub.New(p, stub.WithPluginName("e2e"), stub.WithPluginIdx("10"), stub.WithSocketPath(d.nriSocket))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("connect the NRI plugin to %s: %v\n%s", d.nriSocket, err, d.logTail(30))
	}
	t.Cleanup(s.Stop)
	select {
	case st := <-p.synced:
		return st
	case <-time.After(20 * time.Second):
		t.Fatalf("the NRI plugin was not synchronized within 20s\n%s", d.logTail(30))
	}
	return syncedState{}
}

// requireEvents fails the test unless the plugin saw exactly want about pod.
func requireEvents(t *testing.T, p *nriPlugin, pod, why string, want ...string) {
	t.Helper()
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() error {
		if got := p.seen(pod); !slices.Equal(got, want) {
			return fmt.Errorf("%s: NRI events about %s:\n got %q\nwant %q", why, pod, got, want)
		}
		return nil
	})
}

// bundleConfig returns the config.json the runtime got for container id.
func (d *daemon) bundleConfig(t *testing.T, id string) map[string]any {
	t.Helper()
	out := d.mustCrictl(t, "inspect", "-o", "json", id)
	var st struct {
		Info struct {
			Bundle string `json:"bundle"`
		} `json:"info"`
	}
	mustDecode(t, "crictl inspect", []byte(out), &st)
	if st.Info.Bundle == "" {
		t.Fatalf("crictl inspect %s shows no bundle:\n%s", id, out)
	}
	b, err := os.ReadFile(filepath.Join(st.Info.Bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	mustDecode(t, "config.json", b, &spec)
	return spec
}

// TestNRIEvents: a container's whole life as a plugin sees it, in order, each event
// once (also a second stop, and across a restart of the daemon); the plugin's
// adjustment (an environment variable and an annotation) reaches runc's config.json and
// the container's environment.
func TestNRIEvents(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	p := &nriPlugin{addEnv: [2]string{"NRI_E2E", "adjusted"}, addAnnotation: [2]string{"e2e.nri/added", "yes"}}
	connectPlugin(t, d, p)

	pod := d.containerPod(t, "nri-events", false)
	podID := d.mustRunp(t, pod)
	ctr := containerConfig(t, "app", 0, sleeper)
	id := d.run(t, podID, ctr, pod)
	requireEvents(t, p, "nri-events", "after create and start",
		"RunPodSandbox nri-events", "CreateContainer nri-events/app", "PostCreateContainer nri-events/app",
		"StartContainer nri-events/app", "PostStartContainer nri-events/app")

	spec := d.bundleConfig(t, id)
	env, _ := spec["process"].(map[string]any)["env"].([]any)
	if !slices.Contains(env, any("NRI_E2E=adjusted")) {
		t.Errorf("config.json's env lacks the plugin's NRI_E2E=adjusted: %v", env)
	}
	if a, _ := spec["annotations"].(map[string]any); a["e2e.nri/added"] != "yes" {
		t.Errorf("config.json's annotations lack the plugin's e2e.nri/added=yes: %v", a)
	}
	if out := d.execSync(t, id, "env"); !strings.Contains(out, "NRI_E2E=adjusted") {
		t.Errorf("the container's environment lacks NRI_E2E=adjusted:\n%s", out)
	}

	d.mustCrictl(t, "update", "--memory", "67108864", id)
	d.mustCrictl(t, "stop", "-t", "0", id)
	d.mustCrictl(t, "stop", "-t", "0", id)
	d.mustCrictl(t, "stopp", podID)
	d.mustCrictl(t, "stopp", podID)
	requireEvents(t, p, "nri-events", "after update and two stops of each",
		"RunPodSandbox nri-events", "CreateContainer nri-events/app", "PostCreateContainer nri-events/app",
		"StartContainer nri-events/app", "PostStartContainer nri-events/app",
		"UpdateContainer nri-events/app", "PostUpdateContainer nri-events/app",
		"StopContainer nri-events/app", "StopPodSandbox nri-events")

	// A restart: the plugin reconnects and is synchronized from the journal; the
	// removals send Remove only (Stop was sent, and its marker committed).
	d.restart(t)
	p2 := &nriPlugin{}
	st := connectPlugin(t, d, p2)
	if !slices.Equal(st.pods, []string{"nri-events"}) || !slices.Equal(st.containers, []string{"app"}) {
		t.Errorf("synchronized with pods %q and containers %q, want [nri-events] and [app]", st.pods, st.containers)
	}
	d.mustCrictl(t, "rm", id)
	d.mustCrictl(t, "rmp", podID)
	requireEvents(t, p2, "nri-events", "removals after a restart", "RemoveContainer nri-events/app", "RemovePodSandbox nri-events")
}

// TestNRIPluginAfterCreation: a pod and a container made while no plugin was registered
// (their NRI steps noted, not journaled before a send to nobody) are in the
// synchronization of a plugin that connects later, after a restart of the daemon too,
// and that plugin is told of their stops and removals: the noted steps were made
// durable with the creations' settles, and their undos run at removal.
func TestNRIPluginAfterCreation(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "nri-late", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "app", 0, sleeper), pod)
	// Killed, not stopped: the journal holds what the creations' commits made durable.
	d.kill(t)
	for _, rec := range d.records(t) {
		if !slices.ContainsFunc(rec.Steps, func(s journal.Step) bool { return strings.HasPrefix(string(s.Kind), "nri-") }) {
			t.Errorf("record %s: no NRI step was noted: %s", rec.Name, describeSteps(rec))
		}
	}

	d.start(t, daemonBinary(t))
	d.waitReady(t)
	p := &nriPlugin{}
	st := connectPlugin(t, d, p)
	if !slices.Equal(st.pods, []string{"nri-late"}) || !slices.Equal(st.containers, []string{"app"}) {
		t.Errorf("synchronized with pods %q and containers %q, want [nri-late] and [app]", st.pods, st.containers)
	}
	d.mustCrictl(t, "stop", "-t", "0", id)
	d.mustCrictl(t, "stopp", podID)
	d.mustCrictl(t, "rm", id)
	d.mustCrictl(t, "rmp", podID)
	requireEvents(t, p, "nri-late", "stops and removals",
		"StopContainer nri-late/app", "StopPodSandbox nri-late", "RemoveContainer nri-late/app", "RemovePodSandbox nri-late")
}

// TestNRIPluginAfterExit: a container that exited while no plugin was registered is
// shown to a plugin that registers later as exited, in its synchronization; the plugin
// is told of its removal and its pod's stop and removal, not of a stop that happened
// before it came (as containerd replays no event).
func TestNRIPluginAfterExit(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	pod := d.containerPod(t, "nri-gone", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "quick", 0, []string{"true"}), pod)
	d.requireExited(t, id, 0)

	p := &nriPlugin{}
	st := connectPlugin(t, d, p)
	if !slices.Equal(st.containers, []string{"quick"}) {
		t.Errorf("synchronized with containers %q, want [quick]", st.containers)
	}
	d.mustCrictl(t, "stopp", podID)
	d.mustCrictl(t, "rmp", podID)
	requireEvents(t, p, "nri-gone", "the pod's stop and removal",
		"StopPodSandbox nri-gone", "RemoveContainer nri-gone/quick", "RemovePodSandbox nri-gone")
}

// TestNRIContainerExit: a container that exits by itself gets its StopContainer.
func TestNRIContainerExit(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	p := &nriPlugin{}
	connectPlugin(t, d, p)
	pod := d.containerPod(t, "nri-exit", false)
	podID := d.mustRunp(t, pod)
	id := d.run(t, podID, containerConfig(t, "quick", 0, []string{"true"}), pod)
	d.requireExited(t, id, 0)
	requireEvents(t, p, "nri-exit/quick", "a container that exited by itself",
		"CreateContainer nri-exit/quick", "PostCreateContainer nri-exit/quick", "StartContainer nri-exit/quick",
		"PostStartContainer nri-exit/quick", "StopContainer nri-exit/quick")
	d.removeCtr(t, id)
	requireEvents(t, p, "nri-exit/quick", "its removal",
		"CreateContainer nri-exit/quick", "PostCreateContainer nri-exit/quick", "StartContainer nri-exit/quick",
		"PostStartContainer nri-exit/quick", "StopContainer nri-exit/quick", "RemoveContainer nri-exit/quick")
}

// TestNRIFailingHooks: a plugin that refuses a pod or a container fails its creation;
// the creation is rolled back, and the plugins are told Stop and Remove by the undo.
func TestNRIFailingHooks(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	p := &nriPlugin{failRun: "nri-refused", failCreate: "refused"}
	connectPlugin(t, d, p)

	_, stderr, err := d.runp(t, d.containerPod(t, "nri-refused", false))
	requireCode(t, "runp of a pod the plugin refuses", err, stderr, "FailedPrecondition")
	requireEvents(t, p, "nri-refused", "a refused pod", "RunPodSandbox nri-refused", "StopPodSandbox nri-refused",
		"RemovePodSandbox nri-refused")
	d.requirePods(t, "after a refused pod")

	pod := d.containerPod(t, "nri-ok", false)
	podID := d.mustRunp(t, pod)
	_, stderr, err = d.create(t, nil, podID, containerConfig(t, "refused", 0, sleeper), pod)
	requireCode(t, "create of a container the plugin refuses", err, stderr, "FailedPrecondition")
	requireEvents(t, p, "nri-ok/refused", "a refused container", "CreateContainer nri-ok/refused",
		"StopContainer nri-ok/refused", "RemoveContainer nri-ok/refused")
	d.requirePs(t, "after a refused container")
	d.requireNoContainerTrace(t, "after a refused container")
}

// TestNRISlowHook: a plugin slower than the client's deadline (but within
// nri_plugin_request_timeout) is asked once; the creation finishes after the deadline,
// is cached, and the retry gets it.
func TestNRISlowHook(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{extraTOML: []string{`nri_plugin_request_timeout = "20s"`}})
	p := &nriPlugin{sleepCreate: 5 * time.Second}
	connectPlugin(t, d, p)
	pod := d.containerPod(t, "nri-slow", false)
	podID := d.mustRunp(t, pod)
	ctr := containerConfig(t, "slow", 0, sleeper)
	_, stderr, err := d.create(t, []string{"-T", "2s"}, podID, ctr, pod)
	requireCode(t, "create -T 2s while the plugin takes 5s", err, stderr, "DeadlineExceeded")
	rec := d.waitContainerRecord(t, "of the timed-out creation", 5*time.Second, func(journal.Record) bool { return true })
	d.waitCached(t, rec.ID)
	id := d.mustCreate(t, podID, ctr, pod)
	if id != rec.ID {
		t.Errorf("the retry got container %s, want the cached %s", id, rec.ID)
	}
	requireEvents(t, p, "nri-slow/slow", "a slow plugin and a retry", "CreateContainer nri-slow/slow", "PostCreateContainer nri-slow/slow")
}

// TestNRIBlockingHook: a plugin that blocks longer than nri_plugin_request_timeout is
// cut off (the adaptation closes it) and the daemon goes on without it.
func TestNRIBlockingHook(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{extraTOML: []string{`nri_plugin_request_timeout = "1s"`}})
	p := &nriPlugin{sleepCreate: 4 * time.Second}
	connectPlugin(t, d, p)
	pod := d.containerPod(t, "nri-block", false)
	podID := d.mustRunp(t, pod)
	start := time.Now()
	_, stderr, err := d.create(t, nil, podID, containerConfig(t, "blocked", 0, sleeper), pod)
	t.Logf("create with a plugin blocking 4s past its 1s limit: %v after %v (%s)", err, time.Since(start).Round(time.Millisecond), strings.TrimSpace(stderr))
	if took := time.Since(start); took > 3500*time.Millisecond {
		t.Errorf("create took %v: the blocking plugin was not cut off at its 1s limit", took)
	}
	// The plugin is gone; creations go on without it.
	d.mustCreate(t, podID, containerConfig(t, "after", 0, sleeper), pod)
	if got := p.seen("nri-block/after"); len(got) != 0 {
		t.Errorf("the cut-off plugin still got events: %q", got)
	}
}
