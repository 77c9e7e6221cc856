package test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The container events (GetContainerEvents), as the kubelet's Evented PLEG reads them
// over gRPC and as `crictl events` prints them: a pod's and its containers' lifecycles,
// a container exiting by itself, and PodSandboxStatus's timestamp with its statuses.

// eventLog collects the events of one subscriber, as "<id> <TYPE>".
type eventLog struct {
	mu     sync.Mutex
	events []string
	raw    map[string]*runtimeapi.ContainerEventResponse // the last gRPC event of each "<id> <TYPE>"
}

func (l *eventLog) add(id, kind string, ev *runtimeapi.ContainerEventResponse) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, id+" "+kind)
	if ev != nil {
		if l.raw == nil {
			l.raw = map[string]*runtimeapi.ContainerEventResponse{}
		}
		l.raw[id+" "+kind] = ev
	}
}

// last returns the last gRPC event of id of a type.
func (l *eventLog) last(id, kind string) *runtimeapi.ContainerEventResponse {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.raw[id+" "+kind]
}

// of returns the types of the events of id, in order.
func (l *eventLog) of(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, e := range l.events {
		if kind, ok := strings.CutPrefix(e, id+" "); ok {
			out = append(out, kind)
		}
	}
	return out
}

// wait waits until id's events are want, failing the test after a while.
func (l *eventLog) wait(t *testing.T, who, id string, want ...string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Equal(l.of(id), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: events of %s = %v, want %v", who, id, l.of(id), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// grpcEvents subscribes to the events over gRPC, waits until the daemon says it is
// subscribed (the response headers), and collects them until the test ends.
func (d *daemon) grpcEvents(t *testing.T) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := d.cri(t).GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Header(); err != nil {
		t.Fatalf("GetContainerEvents headers: %v", err)
	}
	l := &eventLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := stream.Recv()
			if err != nil {
				return
			}
			l.add(ev.GetContainerId(), ev.GetContainerEventType().String(), ev)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return l
}

// crictlEvents runs `crictl events -o json` until the test ends and collects what it
// prints. crictl prints each event as a JSON object, protobuf's JSON mapping, which
// leaves out a zero-valued field: an event without a type is CREATED.
func (d *daemon) crictlEvents(t *testing.T) *eventLog {
	t.Helper()
	if crictlPath == "" {
		t.Skip("crictl not found")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, crictlPath, d.crictlArgs("events", "-o", "json")...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	l := &eventLog{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		dec := json.NewDecoder(bufio.NewReader(out))
		for {
			var ev struct {
				ID   string `json:"containerId"`
				Type string `json:"containerEventType"`
			}
			if err := dec.Decode(&ev); err != nil {
				return
			}
			if ev.Type == "" {
				ev.Type = runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT.String()
			}
			l.add(ev.ID, ev.Type, nil)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("crictl events stderr: %s", stderr.String())
		}
	})
	return l
}

// subscribedCrictl makes pods until crictl events prints the creation of one: crictl
// gives no sign that it is subscribed. The pods are removed.
func (d *daemon) subscribedCrictl(t *testing.T, l *eventLog) {
	t.Helper()
	for i := range 10 {
		id := d.mustRunp(t, d.containerPod(t, fmt.Sprintf("events-warmup-%d", i), true))
		deadline := time.Now().Add(3 * time.Second)
		for len(l.of(id)) == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		d.removePod(t, id)
		if len(l.of(id)) > 0 {
			return
		}
	}
	t.Fatal("crictl events printed nothing for 10 pods")
}

const (
	evCreated = "CONTAINER_CREATED_EVENT"
	evStarted = "CONTAINER_STARTED_EVENT"
	evStopped = "CONTAINER_STOPPED_EVENT"
	evDeleted = "CONTAINER_DELETED_EVENT"
)

// TestContainerEvents: a pod and its containers, one stopped and one exiting by itself,
// send their events in their lifecycles' order to a gRPC subscriber and to crictl
// events; the events carry the pod's sandbox status (the kubelet reads its uid) and the
// containers' statuses; PodSandboxStatus sets its timestamp and containers_statuses
// together.
func TestContainerEvents(t *testing.T) {
	t.Parallel()
	d, _ := startContainerDaemon(t, daemonOptions{})
	byGRPC := d.grpcEvents(t)
	byCrictl := d.crictlEvents(t)
	d.subscribedCrictl(t, byCrictl)

	pod := d.containerPod(t, "events", true)
	podID := d.mustRunp(t, pod)
	sleeping := d.run(t, podID, containerConfig(t, "sleeping", 0, sleeper), pod)
	// It exits after its start is recorded (see the STARTED rule in
	// server/container_events_source.go for one that exits at once).
	seven := d.run(t, podID, containerConfig(t, "seven", 0, []string{"sh", "-c", "sleep 1; exit 7"}), pod)
	for who, l := range map[string]*eventLog{"gRPC": byGRPC, "crictl": byCrictl} {
		l.wait(t, who, podID, evCreated, evStarted)
		l.wait(t, who, sleeping, evCreated, evStarted)
		l.wait(t, who, seven, evCreated, evStarted, evStopped) // exited by itself
	}
	ev := byGRPC.last(seven, evStopped)
	if ev.GetPodSandboxStatus().GetId() != podID || ev.GetPodSandboxStatus().GetMetadata().GetUid() == "" {
		t.Errorf("the exit's event carries sandbox status %v, want the pod's with its uid", ev.GetPodSandboxStatus())
	}
	var exit *runtimeapi.ContainerStatus
	for _, cs := range ev.GetContainersStatuses() {
		if cs.GetId() == seven {
			exit = cs
		}
	}
	if exit.GetState() != runtimeapi.ContainerState_CONTAINER_EXITED || exit.GetExitCode() != 7 {
		t.Errorf("the exit's event has the container's status %v, want exited with 7", exit)
	}

	resp, err := d.cri(t).PodSandboxStatus(context.Background(), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: podID})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetTimestamp() == 0 || len(resp.GetContainersStatuses()) != 2 {
		t.Errorf("PodSandboxStatus: timestamp %d with %d container statuses, want both, 2 containers", resp.GetTimestamp(), len(resp.GetContainersStatuses()))
	}

	d.removeCtr(t, sleeping)
	d.mustCrictl(t, "rm", seven)
	d.removePod(t, podID)
	for who, l := range map[string]*eventLog{"gRPC": byGRPC, "crictl": byCrictl} {
		l.wait(t, who, sleeping, evCreated, evStarted, evStopped, evDeleted)
		l.wait(t, who, seven, evCreated, evStarted, evStopped, evDeleted)
		l.wait(t, who, podID, evCreated, evStarted, evStopped, evDeleted)
	}

	// A stream open when the daemon stops ends at once: the graceful stop (which
	// waits for every stream, 5 s at most) does not wait for it.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := d.cri(t).GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
	if err == nil {
		_, err = stream.Header()
	}
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := stream.Recv()
		ended <- err
	}()
	stopping := time.Now()
	d.stop(t)
	if took := time.Since(stopping); took > 4*time.Second {
		t.Errorf("the daemon took %v to stop with an event stream open", took)
	}
	if err := <-ended; err == nil {
		t.Error("the event stream got an event, want its end")
	}
	d.restart(t)
}
